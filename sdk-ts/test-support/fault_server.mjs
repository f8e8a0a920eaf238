// The Python SDK's fault providers (chainclient.fault_provider.FaultProvider, standard library
// only), started by `python -m chainclient.fault_serve` and driven by JSON lines: the very
// providers the Python conformance table runs against. `$CHAINCLIENT_PYTHON` (default python3)
// runs it, with the SDK's sources (../sdk) on PYTHONPATH.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

const SDK = fileURLToPath(new URL("../../sdk", import.meta.url));

export class FaultServer {
  /** Start providers named `names`; resolves once they listen (`providers`, `scenarios`). */
  static async start(names = ["vendor", "backup"]) {
    const python = process.env.CHAINCLIENT_PYTHON || "python3";
    const pythonPath = [SDK, process.env.PYTHONPATH].filter(Boolean).join(":");
    const child = spawn(python, ["-m", "chainclient.fault_serve", ...names], {
      env: { ...process.env, PYTHONPATH: pythonPath },
      stdio: ["pipe", "pipe", "pipe"],
    });
    const server = new FaultServer(child);
    const hello = await server.read();
    server.providers = hello.providers;
    server.scenarios = hello.scenarios;
    server.defaultParams = hello.default_params;
    return server;
  }

  constructor(child) {
    this.child = child;
    this.stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text) => (this.stderr += text));
    this.lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    this.exited = new Promise((resolve) => child.on("exit", resolve));
  }

  async read() {
    const { value, done } = await this.lines.next();
    if (done) throw new Error(`the fault provider ended: ${this.stderr.slice(-2000)}`);
    return JSON.parse(value);
  }

  /** One command, its answer; a command the server refused throws its error. */
  async ask(command) {
    this.child.stdin.write(JSON.stringify(command) + "\n");
    const answer = await this.read();
    if (answer.error) throw new Error(`fault provider: ${answer.error} (for ${JSON.stringify(command)})`);
    return answer;
  }

  set(provider, scenario, params = {}) {
    return this.ask({ op: "set", provider, scenario, params });
  }

  async requests(provider) {
    return (await this.ask({ op: "requests", provider })).requests;
  }

  clear(provider) {
    return this.ask({ op: "clear", provider });
  }

  async close() {
    if (this.child.exitCode !== null) return;
    await this.ask({ op: "close" }).catch(() => this.child.kill());
    this.child.stdin.end();
    await this.exited;
  }
}
