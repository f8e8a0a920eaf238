// A TypeScript process saving documents to one chain's state file, driven by
// tests/test_state_file_shared_lock.py next to Python processes doing the same in the same
// directory. Each stdin line is a JSON list of chain documents, all saved at once (as several
// ChainClients of one service, sharing its state directory, would); the answer is one JSON
// line, a result per document: "wrote", "held" (the file already held it or a newer one) or
// "failed: <why>" (the save threw).
import { createInterface } from "node:readline";

import { Registry, parseDocument } from "../../sdk-ts/dist/index.js";
import { StateFile } from "../../sdk-ts/dist/stateFile.js";

const [stateDir, chain, registryJson] = process.argv.slice(2);
const registry = new Registry(JSON.parse(registryJson));
const stateFile = new StateFile(stateDir, chain, registry, null);
const say = (value) => process.stdout.write(JSON.stringify(value) + "\n");

say({ event: "ready", pid: process.pid });
for await (const line of createInterface({ input: process.stdin })) {
  const saves = JSON.parse(line).map(async (data) => {
    const document = parseDocument(data, { registry, source: "live" });
    try {
      return (await stateFile.save(document)) === null ? "wrote" : "held";
    } catch (error) {
      return `failed: ${error.name}: ${error.message}`;
    }
  });
  say(await Promise.all(saves));
}
