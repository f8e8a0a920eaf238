// One process of TypeScript ChainClients for bench/propagation.py --client typescript: a
// ChainClient per name (sdk-ts/dist), answering the bench's commands, one JSON line each way
// (the same commands its Python client processes answer over a pipe).
import { createInterface } from "node:readline";

import { ChainClient, Registry } from "../sdk-ts/dist/index.js";

const [baseUrl, token, namesJson, mode, pollInterval, waitS, registryJson, defaultJson] = process.argv.slice(2);
const names = JSON.parse(namesJson);
const registry = new Registry(JSON.parse(registryJson));
const quiet = { debug() {}, info() {}, warn() {}, error: (m) => console.error(m) };
const applied = new Map(names.map((name) => [name, new Map()]));
const clients = names.map(
  (name) =>
    new ChainClient(baseUrl, {
      chain: "chat",
      token,
      registry,
      default: JSON.parse(defaultJson),
      stateDir: null,
      pollInterval: Number(pollInterval),
      longPoll: mode === "longpoll",
      waitS: Number(waitS),
      instance: name,
      service: "bench",
      reportUsage: false,
      timeout: 10,
      maxBackoff: 2,
      logger: quiet,
      onChange: (document) => applied.get(name).set(document.version, Date.now() / 1000),
    }),
);
clients.forEach((client) => client.start());
const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");
say(["started", clients.length]);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
for await (const line of createInterface({ input: process.stdin })) {
  const [command, argument] = JSON.parse(line);
  if (command === "versions") {
    const counts = {};
    for (const client of clients) counts[client.current().version] = (counts[client.current().version] ?? 0) + 1;
    say(counts);
  } else if (command === "failures") {
    say(clients.filter((client) => client.health().consecutive_failures > 0).length);
  } else if (command === "collect") {
    const [version, deadline] = argument;
    while (Date.now() / 1000 < deadline && clients.some((client) => client.current().version < version)) await sleep(20);
    say(names.map((name) => applied.get(name).get(version) ?? null));
  } else if (command === "stop") {
    await Promise.all(clients.map((client) => client.stop(0.01)));
    say(["stopped", clients.length]);
    break;
  }
}
process.stdin.destroy();
