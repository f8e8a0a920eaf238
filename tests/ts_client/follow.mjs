// A service's TypeScript clients, driven by tests/test_typescript_client.py: `count` ChainClients
// of the chain `chat` (long polling, sharing one state directory), each with a clock the test can
// move forward. Commands come as lines on stdin; each answer is one JSON line on stdout.
//   status            what each client serves now, and its health
//   advance SECONDS   move every client's clock forward (a pin's expiry without waiting for it)
//   stop              stop every client (a last usage report each) and exit
import { createInterface } from "node:readline";

import { ChainClient, Registry } from "../../sdk-ts/dist/index.js";

const [url, token, stateDir, count, registryJson, defaultJson] = process.argv.slice(2);
const registry = new Registry(JSON.parse(registryJson));
let offset = 0;
const quiet = { debug() {}, info() {}, warn() {}, error: (m) => console.error(m) };
const clients = Array.from({ length: Number(count) }, (_, i) =>
  new ChainClient(url, {
    chain: "chat",
    token,
    registry,
    default: JSON.parse(defaultJson),
    stateDir: stateDir === "-" ? null : stateDir,
    pollInterval: 0.5,
    longPoll: true,
    waitS: 5,
    timeout: 2,
    maxBackoff: 1,
    aheadAfterS: 1,
    usageInterval: 1,
    service: "ts-system",
    instance: `ts-${i}`,
    logger: quiet,
    clock: () => Date.now() / 1000 + offset,
  }),
);

function status() {
  return {
    current: clients.map((c) => {
      const d = c.current();
      return { epoch: d.epoch, version: d.version, preset: d.preset, source: d.source, is_default: d.is_default };
    }),
    health: clients.map((c) => {
      const h = c.health();
      return { consecutive_failures: h.consecutive_failures, expired_pin: h.expired_pin !== null, ahead_of_server: h.ahead_of_server !== null };
    }),
  };
}

const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");
say({ event: "ready", ...status() });
clients.forEach((c) => c.start());

for await (const line of createInterface({ input: process.stdin })) {
  const [command, argument] = line.trim().split(/\s+/);
  if (command === "status") say(status());
  else if (command === "advance") {
    offset += Number(argument);
    say(status());
  } else if (command === "stop") {
    await Promise.all(clients.map((c) => c.stop()));
    say({ event: "stopped" });
    break;
  }
}
