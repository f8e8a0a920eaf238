// ChainClient over real HTTP (node:http, its default): a local scripted control plane.
// Long polls, stop() in the middle of one, Retry-After, usage reports from the background loop,
// the health section's token counts, and one state file shared by two clients never going back.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Answer, ChainClient, ProviderError, Registry, Router, TOKEN_FIELDS, step } from "../dist/index.js";

const registry = new Registry({
  vendor_a: { destination: "vendor_a-us", models: { large: ["text"] } },
  vendor_b: { destination: "vendor_b-eu", models: { large: ["text"] } },
});
const defaults = [step("vendor_a", "large", 20000)];
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const waitUntil = async (condition, seconds = 5) => {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return condition();
};

function doc(version, preset = "normal", chain = [{ provider: "vendor_a", model: "large", timeout_ms: 20000 }]) {
  return {
    name: "chat", epoch: 0, version, preset, is_default: preset === "normal", chain,
    marking: { degraded: false, note: "" }, updated_by: "alice", reason: `v${version}`,
    updated_at: "2026-12-05T05:00:00Z", expires_at: null, default: null,
  };
}

// A control plane: GETs are held (?wait=) until the version changes; POST usage recorded.
const plane = { version: 1, waiting: [], requests: [], reports: [], usageStatus: 202, retryAfter: null };
let server;
let url;
before(async () => {
  server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      plane.requests.push({ method: request.method, url: request.url, headers: request.headers });
      if (request.method === "POST") {
        plane.reports.push(JSON.parse(body));
        const headers = plane.retryAfter ? { "Retry-After": plane.retryAfter } : {};
        response.writeHead(plane.usageStatus, headers).end("{}");
        return;
      }
      const answer = () => {
        const tag = `"${plane.version}"`;
        if (request.headers["if-none-match"] === tag) response.writeHead(304, { ETag: tag }).end();
        else response.writeHead(200, { ETag: tag, "Content-Type": "application/json" }).end(JSON.stringify(doc(plane.version, plane.version % 2 ? "normal" : "pin_secondary")));
      };
      if (request.url.includes("wait=") && request.headers["if-none-match"] === `"${plane.version}"`) {
        plane.waiting.push(answer);
        response.on("close", () => (plane.waiting = plane.waiting.filter((w) => w !== answer)));
      } else answer();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function change() {
  plane.version += 1;
  const waiting = plane.waiting.splice(0);
  waiting.forEach((answer) => answer());
}

test("a long-polling client applies a change as soon as it is made, and stop() ends a held poll at once", async () => {
  const seen = [];
  const client = new ChainClient(url, {
    chain: "chat", token: "tok", registry, default: defaults, pollInterval: 60, waitS: 30, logger: quiet,
    service: "svc", instance: "i-1", onChange: (d) => seen.push(d.version),
  }).start();
  try {
    assert.ok(await waitUntil(() => client.current().version === plane.version));
    assert.ok(await waitUntil(() => plane.waiting.length === 1), "the poll is held");
    const held = plane.requests.at(-1);
    assert.equal(held.headers["x-chain-client"], "svc/i-1");
    assert.equal(held.headers["authorization"], "Bearer tok");
    assert.match(held.url, /\?wait=30$/);
    change();
    // A 60 s poll interval: only the long poll can bring it this soon.
    assert.ok(await waitUntil(() => client.current().version === plane.version, 10));
    assert.deepEqual(seen, [plane.version - 1, plane.version]);
    assert.ok(await waitUntil(() => plane.waiting.length === 1), "asks again after the change");
    const started = performance.now();
    await client.stop();
    assert.ok(performance.now() - started < 5000, "stop() does not wait for the held poll (30 s)");
    assert.equal(client.health().running, false);
  } finally {
    await client.stop();
  }
});

test("usage reports go out from the background loop; one refused with Retry-After keeps its counts for the next", async () => {
  plane.reports = [];
  plane.usageStatus = 429;
  plane.retryAfter = "0.2";
  const client = new ChainClient(url, {
    chain: "chat", token: "tok", registry, default: defaults, longPoll: false, pollInterval: 60, usageInterval: 0.1, logger: quiet,
  }).start();
  try {
    client.record_served("vendor_a");
    assert.ok(await waitUntil(() => client.health().usage_report_failures >= 1));
    assert.equal(client.health().unreported_requests, 1, "kept for the next report");
    plane.usageStatus = 202;
    client.record_served("vendor_a");
    assert.ok(await waitUntil(() => client.health().usage_report_failures === 0, 5));
    assert.deepEqual(plane.reports.at(-1).providers.vendor_a.requests, 2);
    assert.equal(client.health().unreported_requests, 0);
  } finally {
    await client.stop();
    plane.retryAfter = null;
  }
});

// An attempt as the Router settles it; `more` sets what a test is about.
function attempt(provider, more = {}) {
  return {
    task_id: "t", attempt_id: "t-1", provider, model: "large", dispatch: "dispatched_known", outcome: "ok", status: null,
    elapsed_s: 0.05, timeout_s: 20, reason: "", error: "", destination: "", model_id: "", contract: "none", epoch: 0, version: 0,
    chunks: null, first_chunk_s: null, input_tokens: null, output_tokens: null, drill: null, ...more,
  };
}

// A client that only reports when flushUsage() is called, to the plane above.
function reporter() {
  plane.reports = [];
  plane.usageStatus = 202;
  return new ChainClient(url, { chain: "chat", token: "tok", registry, default: defaults, longPoll: false, logger: quiet });
}

const stepsOf = (report) => Object.fromEntries(report.health.steps.map(({ provider, ...entry }) => [provider, entry]));

test("the health section sums each step's tokens, with the served attempts that said both; a step that never said any has no token keys", async () => {
  assert.deepEqual([...TOKEN_FIELDS], ["input_tokens", "output_tokens", "served_with_tokens"]);
  const client = reporter();
  client.record_attempt(attempt("vendor_a", { input_tokens: 10, output_tokens: 5 }));
  client.record_attempt(attempt("vendor_a", { input_tokens: 7, output_tokens: 3, chunks: 4, first_chunk_s: 0.02 }));
  // Said only its input: in the sum, not among the served that said both.
  client.record_attempt(attempt("vendor_a", { input_tokens: 4 }));
  // A failed attempt that used tokens: in the sums, never served.
  client.record_attempt(attempt("vendor_a", { outcome: "failed", status: 500, input_tokens: 6, output_tokens: 1 }));
  client.record_attempt(attempt("vendor_b"));
  client.record_attempt(attempt("vendor_b", { outcome: "failed", status: 429 }));
  await client.flushUsage();
  const steps = stepsOf(plane.reports.at(-1));
  assert.deepEqual(steps.vendor_a, {
    model: "large",
    outcomes: { served: 3, server_error: 1 },
    latency_ms: [3, 0, 0, 0, 0, 0, 0, 0, 0],
    first_chunk_ms: [1, 0, 0, 0, 0, 0, 0, 0, 0],
    input_tokens: 27,
    output_tokens: 9,
    served_with_tokens: 2,
  });
  // After first_chunk_ms, as the Python SDK writes them.
  assert.deepEqual(Object.keys(steps.vendor_a).slice(-4), ["first_chunk_ms", ...TOKEN_FIELDS]);
  assert.deepEqual(steps.vendor_b, { model: "large", outcomes: { served: 1, rate_limited: 1 }, latency_ms: [1, 0, 0, 0, 0, 0, 0, 0, 0] });
});

test("a Router's attempts carry the tokens a transport's Answer said, integers only, into the report", async () => {
  const client = reporter();
  const answers = [new Answer("hi", "vendor_a/large-2", 12, 4), new Answer("hi", "vendor_a/large-2", 2.5, "7"), "hi"];
  const router = new Router(client, { transports: { vendor_a: async () => answers.shift() }, logger: quiet });
  const first = await router.complete("hi");
  assert.deepEqual([first.attempts[0].input_tokens, first.attempts[0].output_tokens], [12, 4]);
  const second = await router.complete("hi");
  assert.deepEqual([second.attempts[0].input_tokens, second.attempts[0].output_tokens], [null, null], "not integers: unknown");
  await router.complete("hi");
  await client.flushUsage();
  const { vendor_a } = stepsOf(plane.reports.at(-1));
  assert.deepEqual([vendor_a.outcomes, vendor_a.input_tokens, vendor_a.output_tokens, vendor_a.served_with_tokens], [{ served: 3 }, 12, 4, 1]);
});

test("a failed report's token counts are merged with those recorded while it was out, whichever batch said them", async () => {
  const reports = [];
  let status = 503;
  let whileOut = () => {};
  const client = new ChainClient(url, {
    chain: "chat", token: "tok", registry, default: defaults, longPoll: false, logger: quiet,
    fetch: async (_url, init) => {
      reports.push(JSON.parse(init.body));
      whileOut();
      return new Response("{}", { status });
    },
  });
  client.record_attempt(attempt("vendor_a", { input_tokens: 10, output_tokens: 5 }));
  client.record_attempt(attempt("vendor_b"));
  // Recorded after the batch was taken and before it failed: put_back adds the two up.
  whileOut = () => {
    client.record_attempt(attempt("vendor_a", { input_tokens: 1, output_tokens: 2 }));
    client.record_attempt(attempt("vendor_a"));
    client.record_attempt(attempt("vendor_b", { input_tokens: 3, output_tokens: 2 }));
    whileOut = () => {};
  };
  await client.flushUsage();
  assert.equal(client.health().usage_report_failures, 1);
  assert.equal(stepsOf(reports[0]).vendor_b.input_tokens, undefined, "the failed report's vendor_b said no tokens");
  status = 202;
  await client.flushUsage();
  assert.equal(client.health().usage_report_failures, 0);
  const steps = stepsOf(reports.at(-1));
  const tokens = (entry) => [entry.outcomes.served, ...TOKEN_FIELDS.map((name) => entry[name])];
  assert.deepEqual(tokens(steps.vendor_a), [3, 11, 7, 2]);
  assert.deepEqual(tokens(steps.vendor_b), [2, 3, 2, 1], "tokens said only while the failed report was out still count");
});

test("two clients sharing a state directory never move the file back", async () => {
  const directory = mkdtempSync(join(tmpdir(), "chainclient-shared-"));
  try {
    const options = { chain: "chat", token: "tok", registry, default: defaults, stateDir: directory, logger: quiet };
    const newer = new ChainClient(url, { ...options, fetch: async () => new Response(JSON.stringify(doc(9)), { status: 200 }) });
    const older = new ChainClient(url, { ...options, fetch: async () => new Response(JSON.stringify(doc(8)), { status: 200 }) });
    await Promise.all([newer.pollOnce(), older.pollOnce()]);
    const saved = JSON.parse(readFileSync(join(directory, "chat.json"), "utf8"));
    assert.equal(saved.format, "chainclient-state/2");
    assert.equal(saved.document.version, 9);
    assert.match(saved.digest, /^sha256:[0-9a-f]{64}$/);
    const restarted = new ChainClient(url, options);
    assert.deepEqual([restarted.current().source, restarted.current().version], ["disk", 9]);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

test("with environment, a state file saved from another environment's document is refused", async () => {
  const directory = mkdtempSync(join(tmpdir(), "chainclient-moved-"));
  try {
    const options = {
      chain: "chat", token: "tok", registry, default: defaults, stateDir: directory, longPoll: false, reportUsage: false, logger: quiet,
    };
    const staging = new ChainClient(url, {
      ...options, environment: "staging", fetch: async () => new Response(JSON.stringify({ ...doc(5), environment: "staging" }), { status: 200 }),
    });
    await staging.pollOnce();
    assert.equal(staging.current().version, 5);
    // The service moved to production with its state directory: it does not start from staging's document.
    const moved = new ChainClient(url, { ...options, environment: "production" });
    assert.deepEqual([moved.current().source, moved.current().version], ["default", 0]);
    assert.equal(
      moved.health().state_file_refused,
      "its document is of the 'staging' environment, not 'production': point the client at that environment's documents",
    );
    const again = new ChainClient(url, { ...options, environment: "staging" });
    assert.deepEqual([again.current().source, again.current().version], ["disk", 5]);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

test("with environment, a document of another environment is refused and one of its own applied", async () => {
  const warnings = [];
  let served = { ...doc(3), environment: "staging" };
  const fetch = async () => new Response(JSON.stringify(served), { status: 200, headers: { ETag: `"${served.version}"` } });
  const client = new ChainClient("http://copies.test", {
    chain: "chat", token: "tok", registry, default: defaults, stateDir: null, longPoll: false, reportUsage: false,
    logger: { ...quiet, warn: (message) => warnings.push(message) }, fetch, environment: "production",
  });
  await client.pollOnce();
  assert.equal(client.current().version, 0);
  assert.equal(client.health().rejected, 1);
  assert.deepEqual(warnings, [
    "chain chat: refused document v3 from the control plane: document is of the 'staging' environment, not 'production': " +
      "point the client at that environment's documents; keeping v0 compiled-default",
  ]);
  served = { ...doc(4) }; // a copy that names no environment is not production's either
  await client.pollOnce();
  assert.equal(client.current().version, 0);
  served = { ...doc(5), environment: "production" };
  await client.pollOnce();
  assert.equal(client.current().version, 5);
  const any = new ChainClient("http://copies.test", {
    chain: "chat", token: "tok", registry, default: defaults, stateDir: null, longPoll: false, reportUsage: false,
    logger: quiet, fetch: async () => new Response(JSON.stringify({ ...doc(6), environment: "staging" }), { status: 200 }),
  });
  await any.pollOnce(); // without environment, any environment's document is applied, as before
  assert.equal(any.current().version, 6);
});

test("bad options are refused at construction, saying what to fix", () => {
  const base = { chain: "chat", token: "tok", registry, default: defaults };
  assert.throws(() => new ChainClient(url, { ...base, token: "" }), /token is required/);
  assert.throws(() => new ChainClient(url, { ...base, pollInterval: 0 }), /pollInterval must be a positive number/);
  assert.throws(() => new ChainClient(url, { ...base, waitS: 61 }), /waitS must be within 0..60/);
  assert.throws(() => new ChainClient(url, { ...base, default: [step("vendor_x", "large", 20000)] }), /chain\[0\]: unknown provider 'vendor_x'/);
  assert.throws(() => new ChainClient(url, { ...base, published: true }), /published: true needs trustedKeys/);
  assert.throws(() => new ChainClient(url, { ...base, environment: " " }), /environment must be a non-empty string/);
  assert.throws(() => new ChainClient(url, { ...base, service: "a\nb" }), /service must be a string usable in an HTTP header/);
  assert.throws(() => new ChainClient("ftp://x", base), /baseUrl must be http/);
});

test("the User-Agent's version is the package's", async () => {
  const { VERSION } = await import("../dist/index.js");
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(VERSION, pkg.version);
});
