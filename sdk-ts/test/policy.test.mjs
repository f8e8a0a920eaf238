// The chain document's failure policy: parsed with the document (a bad one ignored, the
// document still applied), verified and kept as received, carried over to the default when a
// pin expires locally; the Router's stream commit point and bounds from it (a call's options
// overriding), its same-step retry, and the receipt's policy line. Fake transports and a fake
// clock: no test waits.
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import {
  AllProvidersFailed,
  ChainClient,
  DeadlineExceeded,
  FAILURE_POLICY_BOUND_MAX_MS,
  FAILURE_POLICY_BOUND_MIN_MS,
  FAILURE_POLICY_COMMITS,
  FAILURE_POLICY_RETRY_MAX_WAIT_MS,
  ProviderError,
  ProviderTimeout,
  ProviderUnavailable,
  Receipt,
  Registry,
  RequestRejected,
  Router,
  StreamInterrupted,
  compiledDefault,
  describeFailurePolicy,
  documentJson,
  parseDocument,
  signedContent,
  step,
} from "../dist/index.js";
import { exampleRegistry, quiet } from "../test-support/fixtures.mjs";

const registry = exampleRegistry();
const CHAIN = [
  { provider: "vendor_a", model: "large", timeout_ms: 20000 },
  { provider: "vendor_b", model: "large", timeout_ms: 20000 },
  { provider: "self_hosted", model: "8b", timeout_ms: 10000 },
];

/** The policy as the server sends it: all four keys. */
function policy(more = {}) {
  return { commit: "first_chunk", first_chunk_ms: null, idle_ms: null, retry_same_step: null, ...more };
}

function doc(more = {}) {
  return {
    name: "chat", epoch: 0, version: 4, preset: "normal", is_default: true, chain: CHAIN,
    marking: { degraded: false, note: "" }, updated_by: "alice", reason: "v4",
    updated_at: "2026-12-04T16:00:00Z", expires_at: null,
    default: { preset: "normal", chain: CHAIN, marking: { degraded: false, note: "" } },
    ...more,
  };
}

const parsed = (more) => parseDocument(doc(more), { registry });

/** A fake monotonic clock with advance(), as the router's pauses expect of a test clock. */
function fakeClock(start = 1000.3) {
  let now = start;
  const clock = () => now;
  clock.advance = (seconds) => (now += seconds);
  return clock;
}

/**
 * A stream transport playing `script` with the test's clock: a string is a chunk, `{ advance: s }`
 * lets s seconds pass on the clock, an Error is thrown (a cut, a malformed chunk, an error
 * event). `log` records what the provider produced, and `end` once its stream ended.
 */
function scripted(clock, script, log = [], name = "") {
  return async function* () {
    log.push(`open ${name}`);
    for (const item of script) {
      if (item instanceof Error) throw item;
      if (typeof item === "object") clock.advance(item.advance);
      else {
        log.push(`produced ${item}`);
        yield item;
      }
    }
    log.push(`end ${name}`);
  };
}

function streamRouter(document, clock, streamTransports, options = {}) {
  return new Router(document, { transports: {}, streamTransports, registry, clock, logger: quiet, ...options });
}

async function collect(stream, log = []) {
  const seen = [];
  for await (const chunk of stream) {
    log.push(`got ${chunk}`);
    seen.push(chunk);
  }
  return { seen, result: stream.result };
}

const cut = () => new ProviderError(null, true, "connection reset");
const steps = (receipt) => receipt.attempts.map((a) => [a.provider, a.outcome]);

describe("the document's failure policy", () => {
  test("the wire's failure-policy constants are the contract's", () => {
    assert.deepEqual([...FAILURE_POLICY_COMMITS], ["first_chunk", "complete"]);
    assert.deepEqual([FAILURE_POLICY_BOUND_MIN_MS, FAILURE_POLICY_BOUND_MAX_MS, FAILURE_POLICY_RETRY_MAX_WAIT_MS], [500, 120000, 10000]);
  });

  test("the served preset's policy and the default's are parsed", () => {
    const d = parsed({
      failure_policy: policy({ commit: "complete", first_chunk_ms: 5000, retry_same_step: { max_wait_ms: 2000 } }),
      default: { preset: "normal", chain: CHAIN, marking: null, failure_policy: policy({ idle_ms: 1500 }) },
    });
    assert.deepEqual({ ...d.failurePolicy }, { commit: "complete", firstChunkMs: 5000, idleMs: null, retryMaxWaitMs: 2000 });
    assert.equal(d.failurePolicyIgnored, null);
    assert.deepEqual({ ...d.default.failurePolicy }, { commit: "first_chunk", firstChunkMs: null, idleMs: 1500, retryMaxWaitMs: null });
    assert.equal(d.default.failurePolicyIgnored, null);
    assert.ok(Object.isFrozen(d.failurePolicy));
  });

  test("absent or null: no policy; a document built in code has none", () => {
    for (const d of [parsed(), parsed({ failure_policy: null, default: { preset: "normal", chain: CHAIN, failure_policy: null } })]) {
      assert.deepEqual([d.failurePolicy, d.failurePolicyIgnored, d.default.failurePolicy, d.default.failurePolicyIgnored], [null, null, null, null]);
    }
    const built = compiledDefault("chat", [step("vendor_a", "large", 20000)]);
    assert.deepEqual([built.failurePolicy, built.failurePolicyIgnored], [null, null]);
  });

  test("a missing key is its default; unknown keys are ignored; the bounds are inclusive", () => {
    assert.deepEqual({ ...parsed({ failure_policy: {} }).failurePolicy }, { commit: "first_chunk", firstChunkMs: null, idleMs: null, retryMaxWaitMs: null });
    const d = parsed({ failure_policy: { idle_ms: 500, first_chunk_ms: 120000, retry_same_step: { max_wait_ms: 0, jitter: true }, hedge: "later" } });
    assert.deepEqual({ ...d.failurePolicy }, { commit: "first_chunk", firstChunkMs: 120000, idleMs: 500, retryMaxWaitMs: 0 });
    assert.equal(parsed({ failure_policy: policy({ retry_same_step: { max_wait_ms: 10000 } }) }).failurePolicy.retryMaxWaitMs, 10000);
  });

  const INVALID = [
    ["an unknown commit (a newer server's)", policy({ commit: "later" }), 'failure_policy.commit "later" is not one this client knows'],
    ["a commit that is not a string", policy({ commit: 3 }), "failure_policy.commit 3 is not one this client knows"],
    ["a null commit", policy({ commit: null }), "failure_policy.commit null is not one this client knows"],
    ["first_chunk_ms below the bounds", policy({ first_chunk_ms: 499 }), "failure_policy.first_chunk_ms must be null or an integer within 500..120000 (milliseconds), got 499"],
    ["first_chunk_ms above the bounds", policy({ first_chunk_ms: 120001 }), "failure_policy.first_chunk_ms must be null or an integer within 500..120000 (milliseconds), got 120001"],
    ["first_chunk_ms not an integer", policy({ first_chunk_ms: 1000.5 }), "failure_policy.first_chunk_ms must be null or an integer within 500..120000 (milliseconds), got 1000.5"],
    ["idle_ms a string", policy({ idle_ms: "1000" }), 'failure_policy.idle_ms must be null or an integer within 500..120000 (milliseconds), got "1000"'],
    ["idle_ms a boolean", policy({ idle_ms: true }), "failure_policy.idle_ms must be null or an integer within 500..120000 (milliseconds), got true"],
    ["a wait above the most", policy({ retry_same_step: { max_wait_ms: 10001 } }), "failure_policy.retry_same_step.max_wait_ms must be an integer within 0..10000 (milliseconds), got 10001"],
    ["a negative wait", policy({ retry_same_step: { max_wait_ms: -1 } }), "failure_policy.retry_same_step.max_wait_ms must be an integer within 0..10000 (milliseconds), got -1"],
    ["a retry without its wait", policy({ retry_same_step: {} }), "failure_policy.retry_same_step.max_wait_ms must be an integer within 0..10000 (milliseconds), got undefined"],
    ["a retry that is not an object", policy({ retry_same_step: true }), "failure_policy.retry_same_step must be null or an object with max_wait_ms, got bool"],
    ["a policy that is not an object", "complete", "'failure_policy' must be an object, got str"],
    ["a policy that is a list", [], "'failure_policy' must be an object, got list"],
  ];
  for (const [name, bad, why] of INVALID) {
    test(`${name}: the policy is ignored, saying why; the document applies`, () => {
      const d = parsed({ failure_policy: bad });
      assert.equal(d.failurePolicy, null);
      assert.equal(d.failurePolicyIgnored, why);
      assert.equal(d.version, 4);
      assert.deepEqual(d.received.failure_policy, bad, "kept as received");
      const inDefault = parsed({ default: { preset: "normal", chain: CHAIN, failure_policy: bad } });
      assert.equal(inDefault.default.failurePolicy, null);
      assert.equal(inDefault.default.failurePolicyIgnored, why.startsWith("'") ? why.replace("'failure_policy'", "'default.failure_policy'") : `default.${why}`);
      assert.equal(inDefault.failurePolicyIgnored, null);
    });
  }

  test("describeFailurePolicy says each term that is set, in order", () => {
    const p = (more) => parsed({ failure_policy: policy(more) }).failurePolicy;
    assert.equal(describeFailurePolicy(p({})), "commit first_chunk");
    assert.equal(
      describeFailurePolicy(p({ commit: "complete", first_chunk_ms: 5000, retry_same_step: { max_wait_ms: 2000 } })),
      "commit complete, first chunk within 5000 ms, retry the same step once (Retry-After up to 2000 ms)",
    );
    assert.equal(
      describeFailurePolicy(p({ first_chunk_ms: 800, idle_ms: 1500, retry_same_step: { max_wait_ms: 0 } })),
      "commit first_chunk, first chunk within 800 ms, idle at most 1500 ms, retry the same step once (Retry-After up to 0 ms)",
    );
  });

  test("the client applies a document whose policy it ignores, warns once, and keeps the document as received", async () => {
    const warnings = [];
    const received = doc({ version: 5, failure_policy: policy({ commit: "later", extra: 1 }) });
    const client = new ChainClient("https://chains.example.com", {
      chain: "chat", token: "tok", registry, default: [step("vendor_a", "large", 20000)], stateDir: null, longPoll: false,
      reportUsage: false, logger: { ...quiet, warn: (m) => warnings.push(m) },
      fetch: async () => new Response(JSON.stringify(received), { status: 200 }),
    });
    await client.pollOnce();
    const current = client.current();
    assert.deepEqual([current.version, current.failurePolicy], [5, null]);
    assert.deepEqual(warnings, [
      'chain chat: ignoring the failure policy in v5: failure_policy.commit "later" is not one this client knows; the document itself is applied',
    ]);
    assert.deepEqual(documentJson(current), received);
  });

  test("a signed document with a policy verifies, is stored as received and verifies again from disk; an edited policy is refused", async () => {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    const trustedKeys = { "test-1": publicKey.export({ format: "jwk" }).x };
    const unsigned = doc({
      version: 6,
      failure_policy: policy({ commit: "complete", idle_ms: 1500, retry_same_step: { max_wait_ms: 2000 }, later_key: "kept" }),
      signature: { alg: "ed25519", key_id: "test-1", signed_at: "2026-12-04T16:00:01Z" },
    });
    const signed = { ...unsigned, signature: { ...unsigned.signature, value: sign(null, signedContent(unsigned), privateKey).toString("base64url") } };
    const directory = mkdtempSync(join(tmpdir(), "chainclient-policy-"));
    try {
      let answer = signed;
      const options = {
        chain: "chat", token: "tok", registry, default: [step("vendor_a", "large", 20000)], stateDir: directory, longPoll: false,
        reportUsage: false, logger: quiet, trustedKeys, fetch: async () => new Response(JSON.stringify(answer), { status: 200 }),
      };
      const client = new ChainClient("https://chains.example.com", options);
      await client.pollOnce();
      assert.deepEqual([client.current().version, client.current().signature.key_id], [6, "test-1"]);
      assert.deepEqual({ ...client.current().failurePolicy }, { commit: "complete", firstChunkMs: null, idleMs: 1500, retryMaxWaitMs: 2000 });
      assert.deepEqual(documentJson(client.current()), signed);
      const restarted = new ChainClient("https://chains.example.com", options);
      assert.deepEqual([restarted.current().source, restarted.current().version, restarted.health().state_file_refused], ["disk", 6, null]);
      assert.equal(restarted.current().failurePolicy.commit, "complete");
      // The policy is covered by the signature: changed on the way, the document is refused.
      answer = { ...signed, version: 7, failure_policy: policy({ commit: "first_chunk" }) };
      await restarted.pollOnce();
      assert.equal(restarted.current().version, 6);
      assert.equal(restarted.health().signatures.refused, 1);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  test("a pin expiring locally serves the default with the default's policy", async () => {
    const expiresAt = Date.parse("2026-12-04T17:00:00Z") / 1000;
    let now = expiresAt - 60;
    const pin = doc({
      version: 8, preset: "pin_secondary", is_default: false, chain: CHAIN.slice(1), expires_at: "2026-12-04T17:00:00Z",
      failure_policy: policy({ commit: "complete" }),
      default: { preset: "normal", chain: CHAIN, marking: null, failure_policy: policy({ first_chunk_ms: 3000, retry_same_step: { max_wait_ms: 1000 } }) },
    });
    const client = new ChainClient("https://chains.example.com", {
      chain: "chat", token: "tok", registry, default: [step("vendor_a", "large", 20000)], stateDir: null, longPoll: false,
      reportUsage: false, logger: quiet, clock: () => now, fetch: async () => new Response(JSON.stringify(pin), { status: 200 }),
    });
    await client.pollOnce();
    assert.deepEqual([client.current().preset, client.current().failurePolicy.commit], ["pin_secondary", "complete"]);
    const router = new Router(client, { transports: { vendor_a: async () => "a", vendor_b: async () => "b", self_hosted: async () => "c" }, clock: fakeClock(), logger: quiet });
    assert.equal((await router.complete({})).receipt.policy, "failure policy of preset 'pin_secondary': commit complete");
    now = expiresAt;
    const served = client.current();
    assert.deepEqual([served.preset, served.is_default, served.received], ["normal", true, null]);
    assert.deepEqual({ ...served.failurePolicy }, { commit: "first_chunk", firstChunkMs: 3000, idleMs: null, retryMaxWaitMs: 1000 });
    const result = await router.complete({});
    assert.equal(result.provider, "vendor_a");
    assert.equal(result.receipt.policy, "failure policy of preset 'normal': commit first_chunk, first chunk within 3000 ms, retry the same step once (Retry-After up to 1000 ms)");
    // A pin without a default falls back to the compiled-in steps: no policy.
    const bare = parseDocument(doc({ ...pin, default: null }), { registry });
    now = expiresAt + 1;
    const client2 = new ChainClient("https://chains.example.com", {
      chain: "chat", token: "tok", registry, default: [step("vendor_a", "large", 20000)], stateDir: null, longPoll: false,
      reportUsage: false, logger: quiet, clock: () => now, fetch: async () => new Response(JSON.stringify(bare.received), { status: 200 }),
    });
    await client2.pollOnce();
    assert.deepEqual([client2.current().preset, client2.current().failurePolicy], ["compiled-default", null]);
  });
});

describe("streams under a failure policy", () => {
  const complete = (more = {}) => parsed({ failure_policy: policy({ commit: "complete", ...more }) });
  const firstChunk = (more = {}) => parsed({ failure_policy: policy(more) });

  test("commit complete: nothing reaches the caller until the provider's stream ended, then every chunk", async () => {
    const clock = fakeClock();
    const log = [];
    const r = streamRouter(complete(), clock, { vendor_a: scripted(clock, ["Hel", "lo", "!"], log, "a"), vendor_b: scripted(clock, ["no"]) });
    const { seen, result } = await collect(r.stream({}), log);
    assert.deepEqual(seen, ["Hel", "lo", "!"]);
    assert.deepEqual(log, ["open a", "produced Hel", "produced lo", "produced !", "end a", "got Hel", "got lo", "got !"]);
    assert.equal(result.provider, "vendor_a");
    assert.deepEqual(result.receipt.attempts.map((a) => [a.provider, a.outcome, a.chunks]), [["vendor_a", "ok", 3]]);
    assert.equal(r.breakerState("vendor_a"), "closed");
  });

  test("commit complete: a cut after content falls back, and the caller gets only the next step's chunks", async () => {
    const clock = fakeClock();
    const r = streamRouter(complete(), clock, { vendor_a: scripted(clock, ["Hel", "lo", cut()]), vendor_b: scripted(clock, ["whole ", "answer"]) });
    const { seen, result } = await collect(r.stream({}));
    assert.deepEqual(seen, ["whole ", "answer"]);
    assert.equal(result.provider, "vendor_b");
    const [a, b] = result.receipt.attempts;
    assert.deepEqual([a.outcome, a.chunks, a.dispatch, a.error], ["failed", 0, "dispatched_unknown", "no HTTP status: connection reset"]);
    assert.deepEqual([b.outcome, b.chunks], ["ok", 2]);
    assert.equal(r.report().interrupted, 0);
    assert.equal(r.report().recovered_success, 1);
  });

  test("commit complete: a malformed end (an error event) before the end falls back too", async () => {
    const clock = fakeClock();
    const r = streamRouter(complete(), clock, { vendor_a: scripted(clock, ["partial", new ProviderError(500, true, "error event")]), vendor_b: scripted(clock, ["b"]) });
    const { seen } = await collect(r.stream({}));
    assert.deepEqual(seen, ["b"]);
  });

  test("commit complete: a stall past the idle bound before the end falls back", async () => {
    const clock = fakeClock();
    const r = streamRouter(complete({ idle_ms: 1000 }), clock, {
      vendor_a: scripted(clock, ["Hel", { advance: 1.5 }, "lo"]),
      vendor_b: scripted(clock, ["on time"]),
    });
    const { seen, result } = await collect(r.stream({}));
    assert.deepEqual(seen, ["on time"]);
    const a = result.receipt.attempts[0];
    assert.deepEqual([a.outcome, a.chunks, a.error], ["timeout", 0, "timed out after dispatch: no chunk within 1s"]);
  });

  test("commit first_chunk: the same cut is StreamInterrupted, nothing else tried", async () => {
    const clock = fakeClock();
    let asked = 0;
    const backup = async function* () {
      asked += 1;
      yield "second answer";
    };
    const r = streamRouter(firstChunk(), clock, { vendor_a: scripted(clock, ["Hel", "lo", cut()]), vendor_b: backup });
    const seen = [];
    await assert.rejects(
      (async () => {
        for await (const chunk of r.stream({})) seen.push(chunk);
      })(),
      (error) => error instanceof StreamInterrupted && error.chunks === 2 && error.provider === "vendor_a",
    );
    assert.deepEqual([seen, asked], [["Hel", "lo"], 0]);
  });

  test("no policy: the same cut is StreamInterrupted (today's default commit)", async () => {
    const clock = fakeClock();
    const r = streamRouter(parsed(), clock, { vendor_a: scripted(clock, ["Hel", cut()]), vendor_b: scripted(clock, ["b"]) });
    await assert.rejects(collect(r.stream({})), StreamInterrupted);
  });

  test("a call's commitAfterChars overrides the policy, both ways", async () => {
    let clock = fakeClock();
    let r = streamRouter(complete(), clock, { vendor_a: scripted(clock, ["Hel", "lo", cut()]), vendor_b: scripted(clock, ["b"]) });
    await assert.rejects(collect(r.stream({}, { commitAfterChars: 1 })), (error) => {
      assert.ok(error instanceof StreamInterrupted);
      assert.equal(error.receipt.policy, "failure policy of preset 'normal': commit complete; the call set commitAfterChars");
      return true;
    });
    clock = fakeClock();
    r = streamRouter(firstChunk(), clock, { vendor_a: scripted(clock, ["Hel", "lo", cut()]), vendor_b: scripted(clock, ["whole answer"]) });
    const { seen } = await collect(r.stream({}, { commitAfterChars: 100 }));
    assert.deepEqual(seen, ["whole answer"]);
  });

  test("the policy's firstChunkMs bounds the first chunk; the call's firstChunkS overrides it", async () => {
    const document = firstChunk({ first_chunk_ms: 1000 });
    let clock = fakeClock();
    let r = streamRouter(document, clock, { vendor_a: scripted(clock, [{ advance: 1.5 }, "late"]), vendor_b: scripted(clock, ["on time"]) });
    let { seen, result } = await collect(r.stream({}));
    assert.deepEqual(seen, ["on time"]);
    const a = result.receipt.attempts[0];
    assert.deepEqual([a.outcome, a.timeout_s, a.reason], ["timeout", 1, "timed out after 1s; outcome unknown, no side effects: safe to try the next step"]);
    assert.equal(result.receipt.attempts[1].timeout_s, 1, "the bound of every step's first chunk");
    clock = fakeClock();
    r = streamRouter(document, clock, { vendor_a: scripted(clock, [{ advance: 1.5 }, "late"]), vendor_b: scripted(clock, ["no"]) });
    ({ seen, result } = await collect(r.stream({}, { firstChunkS: 2 })));
    assert.deepEqual([seen, result.receipt.attempts[0].timeout_s], [["late"], 2]);
    assert.equal(result.receipt.policy, "failure policy of preset 'normal': commit first_chunk, first chunk within 1000 ms; the call set firstChunkS");
  });

  test("the policy's idleMs bounds the wait between chunks; the call's idleS overrides it", async () => {
    const document = firstChunk({ idle_ms: 1000 });
    let clock = fakeClock();
    let r = streamRouter(document, clock, { vendor_a: scripted(clock, ["first", { advance: 1.5 }, "second"]), vendor_b: scripted(clock, ["no"]) });
    await assert.rejects(collect(r.stream({})), (error) => error instanceof StreamInterrupted && error.chunks === 1 && /no chunk within 1s/.test(error.message));
    clock = fakeClock();
    r = streamRouter(document, clock, { vendor_a: scripted(clock, ["first", { advance: 1.5 }, "second"]), vendor_b: scripted(clock, ["no"]) });
    const { seen } = await collect(r.stream({}, { idleS: 2 }));
    assert.deepEqual(seen, ["first", "second"]);
    // Without a policy or an option: the step's timeout (20 s).
    clock = fakeClock();
    r = streamRouter(parsed(), clock, { vendor_a: scripted(clock, ["first", { advance: 19 }, "second"]), vendor_b: scripted(clock, ["no"]) });
    assert.deepEqual((await collect(r.stream({}))).seen, ["first", "second"]);
  });

  test("a stream failing before its commit point is retried on the same step; after it, never", async () => {
    const document = complete({ retry_same_step: { max_wait_ms: 2000 } });
    const clock = fakeClock();
    let opens = 0;
    const flaky = async function* () {
      opens += 1;
      if (opens === 1) throw new ProviderError(503, true, "overloaded", { retryAfterS: 1 });
      yield "fine";
    };
    const r = streamRouter(document, clock, { vendor_a: flaky, vendor_b: scripted(clock, ["b"]) });
    const started = clock();
    const { seen, result } = await collect(r.stream({}));
    assert.deepEqual([seen, opens, clock() - started], [["fine"], 2, 1]);
    assert.deepEqual(steps(result.receipt), [["vendor_a", "failed"], ["vendor_a", "ok"]]);
    assert.match(result.receipt.attempts[0].reason, /; retrying the same step after 1s$/);
    // Committed (first_chunk), a 503 in mid-stream is StreamInterrupted: nothing is retried.
    let calls = 0;
    const breaking = async function* () {
      calls += 1;
      yield "part";
      throw new ProviderError(503);
    };
    const committed = streamRouter(firstChunk({ retry_same_step: { max_wait_ms: 2000 } }), clock, { vendor_a: breaking, vendor_b: scripted(clock, ["b"]) });
    await assert.rejects(collect(committed.stream({})), StreamInterrupted);
    assert.equal(calls, 1);
  });
});

describe("the same-step retry", () => {
  const withRetry = (maxWaitMs = 2000, more = {}) => parsed({ failure_policy: policy({ retry_same_step: { max_wait_ms: maxWaitMs }, ...more }) });

  /** Transports counting their calls; `behaviour[provider]` is a list of what each call does (an Error is thrown), the last repeated. */
  function setup(document, behaviour, options = {}) {
    const clock = options.clock ?? fakeClock();
    const calls = { vendor_a: [], vendor_b: [], self_hosted: [] };
    const make = (provider) => async () => {
      calls[provider].push(clock());
      const list = behaviour[provider] ?? ["answer"];
      const what = list[Math.min(calls[provider].length, list.length) - 1];
      if (what instanceof Error) throw what;
      return `${what} from ${provider}`;
    };
    const transports = Object.fromEntries(Object.keys(calls).map((p) => [p, make(p)]));
    const router = new Router(document, { transports, registry, clock, logger: quiet, ...options, clock });
    return { clock, calls, router };
  }

  const http = (status, retryAfterS = null, dispatched = true) => new ProviderError(status, dispatched, "", { retryAfterS });

  test("a 429 with Retry-After 1 s, a wait of at most 2000 ms: the same step again after 1 s, and it serves", async () => {
    const { clock, calls, router } = setup(withRetry(), { vendor_a: [http(429, 1), "answer"] });
    const started = clock();
    const result = await router.complete({});
    assert.deepEqual([result.value, result.provider], ["answer from vendor_a", "vendor_a"]);
    assert.deepEqual(calls.vendor_a, [started, started + 1], "retried after exactly the Retry-After");
    assert.deepEqual(steps(result.receipt), [["vendor_a", "failed"], ["vendor_a", "ok"]]);
    assert.equal(
      result.receipt.attempts[0].reason,
      "HTTP 429 is retryable; the provider asked to retry after 1s (breaker open until then); retrying the same step after 1s",
    );
    assert.equal(result.receipt.attempts[1].reason, "");
    assert.deepEqual(result.receipt.refused, []);
    assert.equal(router.breakerState("vendor_a"), "closed", "the retry was the breaker's probe, and it served");
    assert.equal(router.report().recovered_success, 1);
    const lines = String(result.receipt).split("\n");
    assert.equal(lines[1], "  failure policy of preset 'normal': commit first_chunk, retry the same step once (Retry-After up to 2000 ms)");
    assert.match(lines[2], /^ {2}\S+-1 vendor_a\/large @ vendor_a-us: failed HTTP 429 .* -> .*; retrying the same step after 1s$/);
    assert.match(lines[3], /^ {2}\S+-2 vendor_a\/large @ vendor_a-us: ok /);
  });

  test("the breaker a Retry-After opened admits the retry after exactly that wait, whatever the clock reads", async () => {
    for (const [start, wait] of [[0.1, 0.7], [379.684, 0.7], [682.759, 0.3], [1000.3, 1.5], [12345.678, 2]]) {
      const { clock, calls, router } = setup(withRetry(), { vendor_a: [http(503, wait), "answer"] }, { clock: fakeClock(start) });
      const result = await router.complete({});
      assert.equal(result.provider, "vendor_a", `from ${start}, after ${wait} s`);
      assert.deepEqual(calls.vendor_a, [start, start + wait]);
      assert.match(result.receipt.attempts[0].reason, new RegExp(`; retrying the same step after ${wait}s$`));
      assert.equal(clock(), start + wait);
    }
  });

  test("a Retry-After longer than the policy's wait: the next step instead", async () => {
    const { clock, calls, router } = setup(withRetry(), { vendor_a: [http(429, 5)] });
    const started = clock();
    const result = await router.complete({});
    assert.equal(result.provider, "vendor_b");
    assert.deepEqual([calls.vendor_a.length, clock()], [1, started]);
    assert.doesNotMatch(result.receipt.attempts[0].reason, /retrying/);
  });

  test("a 500 without Retry-After is retried at once, once; then the next step", async () => {
    const { clock, calls, router } = setup(withRetry(), { vendor_a: [http(500)] });
    const started = clock();
    const result = await router.complete({});
    assert.equal(result.provider, "vendor_b");
    assert.deepEqual(steps(result.receipt), [["vendor_a", "failed"], ["vendor_a", "failed"], ["vendor_b", "ok"]]);
    assert.deepEqual(result.receipt.attempts.map((a) => a.reason), [
      "HTTP 500 is retryable; retrying the same step after 0s",
      "HTTP 500 is retryable",
      "",
    ]);
    assert.deepEqual([calls.vendor_a, clock()], [[started, started], started]);
  });

  test("never more than once per step: each step once, in a request where every step fails", async () => {
    const { calls, router } = setup(withRetry(), { vendor_a: [http(500)], vendor_b: [http(503, 0.5)], self_hosted: [new ProviderUnavailable("refused")] });
    await assert.rejects(router.complete({}), (error) => {
      assert.ok(error instanceof AllProvidersFailed);
      assert.deepEqual(steps(error.receipt), [
        ["vendor_a", "failed"], ["vendor_a", "failed"],
        ["vendor_b", "failed"], ["vendor_b", "failed"],
        ["self_hosted", "unavailable"], ["self_hosted", "unavailable"],
      ]);
      assert.deepEqual(error.receipt.attempts.map((a) => /retrying the same step/.test(a.reason)), [true, false, true, false, true, false]);
      return true;
    });
    assert.deepEqual([calls.vendor_a.length, calls.vendor_b.length, calls.self_hosted.length], [2, 2, 2]);
  });

  test("not when the wait would reach the deadline", async () => {
    let { calls, router } = setup(withRetry(), { vendor_a: [http(429, 1)] });
    let result = await router.complete({}, { deadlineS: 1 });
    assert.equal(result.provider, "vendor_b");
    assert.equal(calls.vendor_a.length, 1);
    ({ calls, router } = setup(withRetry(), { vendor_a: [http(429, 1), "answer"] }));
    result = await router.complete({}, { deadlineS: 1.5 });
    assert.deepEqual([result.provider, calls.vendor_a.length], ["vendor_a", 2]);
    assert.equal(result.receipt.attempts[1].timeout_s, 0.5, "the retry gets the time left");
  });

  test("not for a 400, a 401, a timeout, or a 502 that may have acted", async () => {
    let { calls, router } = setup(withRetry(), { vendor_a: [http(400)] });
    await assert.rejects(router.complete({}), RequestRejected);
    assert.equal(calls.vendor_a.length, 1);
    for (const failure of [http(401), new ProviderTimeout(false), new ProviderTimeout(true), http(502), http(503, null, true), http(404)]) {
      ({ calls, router } = setup(withRetry(), { vendor_a: [failure] }));
      const result = await router.complete({});
      assert.equal(result.provider, "vendor_b");
      const expected = failure instanceof ProviderError && failure.status === 503 ? 2 : 1;
      assert.equal(calls.vendor_a.length, expected, `${failure.message}`);
    }
    ({ calls, router } = setup(withRetry(), { vendor_a: [http(502, null, false)] }));
    assert.equal((await router.complete({})).provider, "vendor_b");
    assert.equal(calls.vendor_a.length, 1, "502 is not one of the retried statuses");
  });

  test("a retry refused by the breaker is recorded as skipped, and the walk goes on", async () => {
    const { calls, router } = setup(withRetry(), { vendor_a: [http(500)] }, { breaker: { failureThreshold: 1 } });
    const result = await router.complete({});
    assert.equal(result.provider, "vendor_b");
    assert.equal(calls.vendor_a.length, 1);
    assert.match(result.receipt.attempts[0].reason, /retrying the same step after 0s$/);
    assert.deepEqual(result.receipt.refused.map(([s, why]) => [s.provider, why]), [["vendor_a", "circuit breaker open (10.0s of cooldown left)"]]);
  });

  test("a drilled attempt is not retried", async () => {
    const now = Date.parse("2026-12-06T07:05:00Z") / 1000;
    const drill = { id: 7, hop: 1, fault: "rate_limited", share_bp: 2500, services: [], starts_at: "2026-12-06T07:00:00Z", ends_at: "2026-12-06T07:15:00Z" };
    const { calls, router } = setup(parsed({ drill, failure_policy: policy({ retry_same_step: { max_wait_ms: 2000 } }) }), {}, { wallClock: () => now });
    const results = [];
    for (let i = 0; i < 4; i++) results.push(await router.complete({}));
    const drilled = results.filter((r) => r.receipt.attempts[0].drill === 7);
    assert.equal(drilled.length, 1);
    assert.deepEqual(steps(drilled[0].receipt), [["vendor_a", "failed"], ["vendor_b", "ok"]]);
    assert.equal(calls.vendor_a.length, 3);
  });

  test("retrySameStep: false turns the policy's retry off; true turns it on without a policy (up to 10 s)", async () => {
    let { calls, router } = setup(withRetry(), { vendor_a: [http(429, 1), "answer"] });
    let result = await router.complete({}, { retrySameStep: false });
    assert.deepEqual([result.provider, calls.vendor_a.length], ["vendor_b", 1]);
    assert.equal(result.receipt.policy, "failure policy of preset 'normal': commit first_chunk, retry the same step once (Retry-After up to 2000 ms); the call set retrySameStep");
    ({ calls, router } = setup(parsed(), { vendor_a: [http(429, 10), "answer"] }));
    assert.equal((await router.complete({})).provider, "vendor_b", "no policy: no retry");
    ({ calls, router } = setup(parsed(), { vendor_a: [http(429, 10), "answer"] }));
    result = await router.complete({}, { retrySameStep: true });
    assert.deepEqual([result.provider, calls.vendor_a.length], ["vendor_a", 2]);
    assert.equal(result.receipt.policy, "", "no policy: no policy line, whatever the call set");
    ({ calls, router } = setup(parsed(), { vendor_a: [http(429, 10.5), "answer"] }));
    assert.equal((await router.complete({}, { retrySameStep: true })).provider, "vendor_b", "past FAILURE_POLICY_RETRY_MAX_WAIT_MS");
    // A policy without retry_same_step: true retries up to the most a policy may wait.
    ({ calls, router } = setup(parsed({ failure_policy: policy() }), { vendor_a: [http(429, 10), "answer"] }));
    assert.equal((await router.complete({}, { retrySameStep: true })).provider, "vendor_a");
  });

  test("a wait of 0 ms retries only what asks for no wait", async () => {
    let { calls, router } = setup(withRetry(0), { vendor_a: [http(503), "answer"] });
    assert.equal((await router.complete({})).provider, "vendor_a");
    ({ calls, router } = setup(withRetry(0), { vendor_a: [http(503, 0.5), "answer"] }));
    assert.equal((await router.complete({})).provider, "vendor_b");
    assert.equal(calls.vendor_a.length, 1);
  });

  test("the retry's wait comes out of the request's one deadline", async () => {
    const { router } = setup(withRetry(), { vendor_a: [http(429, 1.5)], vendor_b: [new ProviderTimeout(true)], self_hosted: [new ProviderTimeout(true)] });
    await assert.rejects(router.complete({}, { deadlineS: 2 }), (error) => {
      assert.ok(error instanceof DeadlineExceeded);
      assert.deepEqual(error.receipt.attempts.map((a) => [a.provider, a.outcome, a.timeout_s]), [
        ["vendor_a", "failed", 2],
        ["vendor_a", "failed", 0.5],
        ["vendor_b", "timeout", 0.5],
        ["self_hosted", "timeout", 0.5],
      ]);
      return true;
    });
  });
});

describe("the receipt's policy line", () => {
  test("present with a policy, absent without; the call's overrides named in order", async () => {
    const clock = fakeClock();
    const document = parsed({ failure_policy: policy({ commit: "complete", first_chunk_ms: 5000, retry_same_step: { max_wait_ms: 2000 } }) });
    const r = streamRouter(document, clock, { vendor_a: scripted(clock, ["a"]) });
    let { result } = await collect(r.stream({}));
    const line = "failure policy of preset 'normal': commit complete, first chunk within 5000 ms, retry the same step once (Retry-After up to 2000 ms)";
    assert.equal(result.receipt.policy, line);
    ({ result } = await collect(r.stream({}, { retrySameStep: true, idleS: 3, firstChunkS: 4, commitAfterChars: 1 })));
    assert.equal(result.receipt.policy, `${line}; the call set commitAfterChars, firstChunkS, idleS, retrySameStep`);
    ({ result } = await collect(r.stream({}, { idleS: 3, taskId: "t" })));
    assert.equal(result.receipt.policy, `${line}; the call set idleS`);
    assert.deepEqual(String(result.receipt).split("\n").slice(0, 2), [
      "task t (preset 'normal', version 4, contract none): 1 attempt(s)",
      `  ${line}; the call set idleS`,
    ]);

    const bare = streamRouter(parsed(), clock, { vendor_a: scripted(clock, ["a"]) });
    ({ result } = await collect(bare.stream({}, { idleS: 3, taskId: "t" })));
    assert.equal(result.receipt.policy, "");
    assert.equal(String(result.receipt).split("\n")[1].startsWith("  t-1 vendor_a/large"), true);
    const built = new Router([step("vendor_a", "large", 20000)], { transports: { vendor_a: async () => "x" }, registry, clock, logger: quiet });
    assert.equal((await built.complete({})).receipt.policy, "");
  });

  test("the policy line is on the errors' receipts too, and a Receipt built without one has none", async () => {
    const clock = fakeClock();
    const document = parsed({ failure_policy: policy({ idle_ms: 800 }) });
    const router = new Router(document, { transports: { vendor_a: async () => { throw new ProviderError(400); } }, registry, clock, logger: quiet });
    await assert.rejects(router.complete({}, { taskId: "t" }), (error) => {
      assert.equal(error.receipt.policy, "failure policy of preset 'normal': commit first_chunk, idle at most 800 ms");
      assert.match(error.message, /\n {2}failure policy of preset 'normal': commit first_chunk, idle at most 800 ms\n {2}t-1 vendor_a/);
      return true;
    });
    assert.equal(new Receipt("t", [], [], "p", 1, 0, "none").policy, "");
  });
});
