// A TypeScript service in a failover drill, driven by tests/test_drills_system.py: one
// ChainClient of `chat` and a Router whose fake transports count, per provider, the requests
// they were called for. It routes one request every few milliseconds from start to stop; each
// request is numbered, and what it ended as is kept: whether it was drilled (its receipt), the
// provider that served it, when it started. Commands come as lines on stdin; each answer is
// one JSON line on stdout.
//   status            the counts so far (see `status()`)
//   fail PROVIDER     make that fake fail every call from now on (HTTP 503)
//   stop              stop routing, stop the client (its last usage report) and exit
import { createInterface } from "node:readline";

import { ChainClient, ProviderError, Registry, Router } from "../../sdk-ts/dist/index.js";

const [url, token, registryJson, defaultJson, instance] = process.argv.slice(2);
const registry = new Registry(JSON.parse(registryJson));
const quiet = { debug() {}, info() {}, warn() {}, error: (m) => console.error(m) };
const client = new ChainClient(url, {
  chain: "chat",
  token,
  registry,
  default: JSON.parse(defaultJson),
  stateDir: null,
  longPoll: false, // the test's live server answers long polls at once
  pollInterval: 0.5,
  timeout: 5,
  service: "drill-ts",
  instance,
  logger: quiet,
});

const called = {}; // provider -> Set of request numbers
const failing = new Set();
const transports = Object.fromEntries(
  Object.keys(JSON.parse(registryJson)).map((name) => {
    called[name] = new Set();
    return [
      name,
      async (step, request) => {
        called[name].add(request);
        if (failing.has(name)) throw new ProviderError(503, true, `${name} overloaded`);
        return `${name}:${request}`;
      },
    ];
  }),
);
const router = new Router(client, { transports, breaker: null, logger: quiet });

const requests = []; // [started at (epoch s), drill id or null, provider served or null]
let routing = true;
let number = 0;

async function route() {
  while (routing) {
    const request = `ts-${number++}`;
    const at = Date.now() / 1000;
    try {
      const result = await router.complete(request);
      const drilled = result.receipt.attempts.find((a) => a.drill !== null);
      requests.push([request, at, drilled ? drilled.drill : null, result.provider]);
    } catch (error) {
      const drilled = (error.receipt?.attempts ?? []).find((a) => a.drill !== null);
      requests.push([request, at, drilled ? drilled.drill : null, null]);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function status() {
  const document = client.current();
  return {
    version: document.version,
    drill: document.drill ? document.drill.id : null,
    requests,
    called: Object.fromEntries(Object.entries(called).map(([name, set]) => [name, [...set]])),
  };
}

const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");
client.start();
const routed = route();
say({ event: "ready" });

for await (const line of createInterface({ input: process.stdin })) {
  const [command, argument] = line.trim().split(/\s+/);
  if (command === "status") say(status());
  else if (command === "fail") {
    failing.add(argument);
    say({ event: "failing", provider: argument });
  } else if (command === "stop") {
    routing = false;
    await routed;
    await client.stop();
    say({ event: "stopped" });
    break;
  }
}
