// Failover drills: the document's `drill` (a bad one ignored, the document still applied), the
// service digest, the Router's injection (the share exact to one request, no transport call,
// no breaker, no provider health, each fault's outcome, timeouts waited out, streams never
// opened) and the ChainClient's part: takesPart, the usage report's `drill` section and its
// cadence while a drill runs and after its end (real time: about 15 s).
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { describe, test } from "node:test";

import {
  ChainClient,
  DRILL_FAULTS,
  DRILL_REPORT_INTERVAL_S,
  DRILL_SERVICE_CONTEXT,
  DRILL_SHARE_MAX_BP,
  DRILL_SHARE_MIN_BP,
  DeadlineExceeded,
  ProviderError,
  Registry,
  Router,
  attemptLine,
  drillServiceDigest,
  drilledAt,
  parseDocument,
  sha256Hex,
} from "../dist/index.js";
import { exampleRegistry, quiet } from "../test-support/fixtures.mjs";

const registry = exampleRegistry();
const CHAIN = [
  { provider: "vendor_a", model: "large", timeout_ms: 20000 },
  { provider: "vendor_b", model: "large", timeout_ms: 10000 },
  { provider: "self_hosted", model: "8b", timeout_ms: 5000 },
];
const TOKEN = "cpt_drill_token";
// Python: hashlib.sha256(b"chainclient-drill/1\n7\n" + hashlib.sha256(b"cpt_drill_token").hexdigest().encode()).hexdigest()
const TOKEN_SHA256 = "cc9cb98ee309aac76d6b3114890ff43d1868180953abe5b829c1224ba2fd2e49";
const DIGEST_7 = "ecad37ecfdd2e0983db44bd5d5e61eedc75ef6896228ddfd0b29bbc2cce45bf9";
const STARTS = "2026-12-06T07:00:00.000Z";
const ENDS = "2026-12-06T07:15:00.000Z";
const DURING = Date.parse("2026-12-06T07:05:00.000Z") / 1000;

function drill(more = {}) {
  return { id: 7, hop: 1, fault: "server_error", share_bp: 1000, services: [], starts_at: STARTS, ends_at: ENDS, ...more };
}

function doc(more = {}) {
  return {
    name: "chat", epoch: 0, version: 3, preset: "normal", is_default: true, chain: CHAIN,
    marking: { degraded: false, note: "" }, updated_by: "drills", reason: "failover drill 7",
    updated_at: "2026-12-06T06:59:00.000Z", expires_at: null, default: null, ...more,
  };
}

/** A fake monotonic clock with advance(), as a drill's timeout fault expects of a test clock. */
function fakeClock(start = 1000) {
  let now = start;
  const clock = () => now;
  clock.advance = (seconds) => (now += seconds);
  return clock;
}

/** Transports counting their calls; `behaviour(provider)` is what each does. */
function transports(behaviour = () => "answer") {
  const calls = { vendor_a: 0, vendor_b: 0, self_hosted: 0 };
  const make = (provider) => async () => {
    calls[provider] += 1;
    const what = behaviour(provider);
    if (what instanceof Error) throw what;
    return `${what} from ${provider}`;
  };
  return { calls, transports: Object.fromEntries(Object.keys(calls).map((p) => [p, make(p)])) };
}

/** A source like a ChainClient: the document, plus what the router tells it. */
function source(document, { part = () => true } = {}) {
  const told = { attempts: [], drills: [], served: [], openings: [] };
  return {
    told,
    registry,
    current: () => document,
    record_served: (provider) => told.served.push(provider),
    record_attempt: (attempt) => told.attempts.push(attempt),
    record_breaker_opened: (provider) => told.openings.push(provider),
    takesPart: (d) => part(d),
    recordDrill: (d, request) => told.drills.push({ id: d.id, ...request }),
  };
}

const parsed = (more) => parseDocument(doc(more), { registry });

describe("the document's drill", () => {
  test("the wire's drill constants and the service digest are the contract's", () => {
    assert.deepEqual([...DRILL_FAULTS], ["server_error", "rate_limited", "timeout", "first_chunk_late", "stream_cut_before_first_chunk", "invalid_answer"]);
    assert.deepEqual([DRILL_SHARE_MIN_BP, DRILL_SHARE_MAX_BP, DRILL_REPORT_INTERVAL_S], [10, 2500, 10]);
    assert.equal(DRILL_SERVICE_CONTEXT, "chainclient-drill/1\n");
    assert.equal(sha256Hex(TOKEN), TOKEN_SHA256);
    assert.equal(drillServiceDigest(7, TOKEN_SHA256), DIGEST_7);
    assert.notEqual(drillServiceDigest(8, TOKEN_SHA256), DIGEST_7);
  });

  test("a drill is parsed with its instants; a document without one has none", () => {
    const d = parsed({ drill: drill({ services: [DIGEST_7] }) }).drill;
    assert.deepEqual(
      { id: d.id, hop: d.hop, fault: d.fault, share_bp: d.share_bp, services: [...d.services], starts_at_s: d.starts_at_s, ends_at_s: d.ends_at_s },
      { id: 7, hop: 1, fault: "server_error", share_bp: 1000, services: [DIGEST_7], starts_at_s: Date.parse(STARTS) / 1000, ends_at_s: Date.parse(ENDS) / 1000 },
    );
    assert.equal(parsed().drill, null);
    assert.equal(parsed().drill_ignored, null);
  });

  for (const [name, bad] of [
    ["an unknown fault (a newer server's)", { fault: "dns_failure" }],
    ["the last hop", { hop: 3 }],
    ["a hop past the chain", { hop: 4 }],
    ["hop 0", { hop: 0 }],
    ["a share below the minimum", { share_bp: 5 }],
    ["a share above the maximum", { share_bp: 2501 }],
    ["a share in percent with a fraction", { share_bp: 10.5 }],
    ["an id of 0", { id: 0 }],
    ["services not a list", { services: "all" }],
    ["an unparseable end", { ends_at: "soon" }],
    ["an end before the start", { starts_at: ENDS, ends_at: STARTS }],
  ]) {
    test(`a drill with ${name} is ignored and logged; the document is still valid`, () => {
      const document = parseDocument(doc({ drill: drill(bad) }), { registry });
      assert.equal(document.drill, null);
      assert.equal(document.version, 3);
      assert.match(document.drill_ignored, /^drill\./);
    });
  }

  test("a drill that is not an object is ignored too; null is no drill", () => {
    for (const bad of ["drill", 7, [drill()]]) {
      assert.equal(parsed({ drill: bad }).drill, null);
      assert.match(parsed({ drill: bad }).drill_ignored, /^'drill' must be an object, got (str|int|list)$/);
    }
    assert.equal(parsed({ drill: null }).drill_ignored, null);
  });

  test("the messages are the Python SDK's: the unknown fault and the last hop", () => {
    assert.equal(parsed({ drill: drill({ fault: "dns_failure" }) }).drill_ignored, "drill.fault 'dns_failure' is not one this client knows");
    assert.equal(parsed({ drill: drill({ hop: 3 }) }).drill_ignored, "drill.hop must be a step of the chain but its last (1..2), got 3");
  });
});

describe("injection", () => {
  test("the share is exact to one request: with 1000 bp, requests 9, 19, 29 ... reaching the hop are drilled", () => {
    const drilled = [...Array(100).keys()].filter((n) => drilledAt(n, 1000));
    assert.deepEqual(drilled, [9, 19, 29, 39, 49, 59, 69, 79, 89, 99]);
    assert.equal([...Array(10000).keys()].filter((n) => drilledAt(n, 10)).length, 10);
    assert.equal([...Array(400).keys()].filter((n) => drilledAt(n, 2500)).length, 100);
  });

  test("a drilled request makes no call at the hop, falls back, and its receipt says it was a drill", async () => {
    const s = source(parsed({ drill: drill() }));
    const t = transports();
    const router = new Router(s, { transports: t.transports, wallClock: () => DURING, clock: fakeClock(), logger: quiet });
    const results = [];
    for (let i = 0; i < 20; i++) results.push(await router.complete("hi"));
    const drilledIndices = results.flatMap((r, i) => (r.provider === "vendor_b" ? [i] : []));
    assert.deepEqual(drilledIndices, [9, 19]);
    assert.deepEqual(t.calls, { vendor_a: 18, vendor_b: 2, self_hosted: 0 });
    const [first, second] = results[9].attempts;
    assert.deepEqual(
      { provider: first.provider, dispatch: first.dispatch, outcome: first.outcome, status: first.status, drill: first.drill, reason: first.reason },
      { provider: "vendor_a", dispatch: "not_dispatched", outcome: "failed", status: 500, drill: 7, reason: "drill 7: server_error injected (no call was made)" },
    );
    assert.equal(second.drill, null);
    assert.match(attemptLine(first), / drill=7 -> drill 7: server_error injected \(no call was made\)$/);
    assert.doesNotMatch(attemptLine(second), /drill=/);
    assert.equal(results[9].recovered, true);
    // The provider health never sees a drilled attempt; the router's served counts do.
    assert.equal(s.told.attempts.length, 20);
    assert.ok(s.told.attempts.every((a) => a.drill === null));
    assert.equal(s.told.served.length, 20);
    // What the client is told, per request.
    assert.equal(s.told.drills.length, 20);
    assert.deepEqual(
      s.told.drills.filter((r) => r.drilled).map(({ id, ended_on, error, fallback_attempts, fallback_failures }) => ({ id, ended_on, error, fallback_attempts, fallback_failures })),
      [1, 2].map(() => ({ id: 7, ended_on: 2, error: null, fallback_attempts: 1, fallback_failures: 0 })),
    );
    assert.ok(s.told.drills.filter((r) => !r.drilled).every((r) => r.ended_on === 1 && r.fallback_attempts === 0));
  });

  const OUTCOMES = {
    server_error: ["failed", 500],
    rate_limited: ["failed", 429],
    timeout: ["timeout", null],
    first_chunk_late: ["timeout", null],
    stream_cut_before_first_chunk: ["failed", null],
    invalid_answer: ["verify_failed", null],
  };
  for (const [fault, [outcome, status]] of Object.entries(OUTCOMES)) {
    test(`fault ${fault}: ${outcome}${status ? ` ${status}` : ""}, and the next step serves`, async () => {
      const clock = fakeClock();
      const router = new Router(source(parsed({ drill: drill({ fault, share_bp: 2500 }) })), {
        transports: transports().transports, wallClock: () => DURING, clock, logger: quiet,
      });
      for (let i = 0; i < 3; i++) await router.complete("hi");
      const started = clock();
      const result = await router.complete("hi", { sideEffects: true });
      const [drilled] = result.attempts;
      assert.equal(result.provider, "vendor_b", "with side effects too: nothing was dispatched");
      assert.deepEqual([drilled.outcome, drilled.status, drilled.dispatch, drilled.drill], [outcome, status, "not_dispatched", 7]);
      const waited = outcome === "timeout" ? 20 : 0;
      assert.equal(drilled.elapsed_s, waited);
      assert.equal(clock() - started, waited);
    });
  }

  test("a timeout fault waits the attempt's timeout, within the request's deadline", async () => {
    const clock = fakeClock();
    const router = new Router(source(parsed({ drill: drill({ fault: "timeout", share_bp: 2500 }) })), {
      transports: transports().transports, wallClock: () => DURING, clock, deadlineS: 8, logger: quiet,
    });
    for (let i = 0; i < 3; i++) await router.complete("hi");
    const error = await router.complete("hi").catch((e) => e);
    assert.ok(error instanceof DeadlineExceeded, String(error));
    assert.equal(error.receipt.attempts[0].timeout_s, 8);
    assert.equal(error.receipt.attempts[0].elapsed_s, 8);
  });

  test("a drilled attempt never counts against the breaker, and a half-open breaker's probe slot goes back", async () => {
    const clock = fakeClock();
    let failing = true;
    const t = transports((provider) => (provider === "vendor_a" && failing ? new ProviderError(503) : "answer"));
    const s = source(parsed({ drill: drill({ share_bp: 2500 }) }));
    const router = new Router(s, {
      transports: t.transports, wallClock: () => DURING, clock, logger: quiet, breaker: { failureThreshold: 1, windowS: 60, cooldownS: 30 },
    });
    // n = 0: not drilled, a real 503 opens the breaker.
    await router.complete("hi");
    assert.equal(router.breakerState("vendor_a"), "open");
    clock.advance(31);
    failing = false;
    // Half-open: n = 1 reaches the hop as the probe, is not drilled, and closes it.
    await router.complete("hi");
    assert.equal(router.breakerState("vendor_a"), "closed");
    // With a threshold of 1, any drilled failure counted would open it again.
    for (let i = 0; i < 8; i++) await router.complete("hi");
    assert.equal(router.breakerState("vendor_a"), "closed");
    assert.deepEqual(s.told.openings, ["vendor_a"]);
    assert.equal(s.told.drills.filter((r) => r.drilled).length, 2);
  });

  test("a half-open probe taken by a drilled request is released for the next request", async () => {
    const clock = fakeClock();
    let failing = true;
    const t = transports((provider) => (provider === "vendor_a" && failing ? new ProviderError(503) : "answer"));
    const router = new Router(source(parsed({ drill: drill({ share_bp: 2500 }) })), {
      transports: t.transports, wallClock: () => DURING, clock, logger: quiet, breaker: { failureThreshold: 1, windowS: 60, cooldownS: 30 },
    });
    for (let i = 0; i < 3; i++) {
      await router.complete("hi"); // n = 0, 1, 2: real failures (each opens the breaker again once half-open)
      clock.advance(31);
    }
    failing = false;
    const drilled = await router.complete("hi"); // n = 3: drilled, admitted as the half-open probe
    assert.equal(drilled.attempts[0].drill, 7);
    assert.equal(router.breakerState("vendor_a"), "half_open");
    const next = await router.complete("hi"); // the probe slot came back: this one probes and closes it
    assert.equal(next.provider, "vendor_a");
    assert.equal(router.breakerState("vendor_a"), "closed");
  });

  test("requests that do not reach the hop are not counted; outside the window or the services nothing is drilled", async () => {
    for (const [name, document, wall, part] of [
      ["before the start", parsed({ drill: drill({ share_bp: 2500 }) }), Date.parse(STARTS) / 1000 - 1, () => true],
      ["at the end", parsed({ drill: drill({ share_bp: 2500 }) }), Date.parse(ENDS) / 1000, () => true],
      ["not taking part", parsed({ drill: drill({ share_bp: 2500, services: [DIGEST_7] }) }), DURING, () => false],
    ]) {
      const t = transports();
      const s = source(document, { part });
      const router = new Router(s, { transports: t.transports, wallClock: () => wall, clock: fakeClock(), logger: quiet });
      for (let i = 0; i < 8; i++) await router.complete("hi");
      assert.deepEqual(t.calls, { vendor_a: 8, vendor_b: 0, self_hosted: 0 }, name);
      assert.equal(s.told.drills.length, 0, name);
    }
    // Hop 2: a request served at hop 1 never reaches it, and is not counted.
    const t = transports((provider) => (provider === "vendor_a" ? new ProviderError(500) : "answer"));
    const s = source(parsed({ drill: drill({ hop: 2, share_bp: 2500 }) }));
    const router = new Router(s, { transports: t.transports, wallClock: () => DURING, clock: fakeClock(), logger: quiet });
    const served = [];
    for (let i = 0; i < 4; i++) served.push((await router.complete("hi")).provider);
    assert.deepEqual(served, ["vendor_b", "vendor_b", "vendor_b", "self_hosted"]);
    assert.deepEqual(t.calls, { vendor_a: 4, vendor_b: 3, self_hosted: 1 });
    assert.deepEqual(s.told.drills.map((r) => [r.drilled, r.ended_on, r.fallback_attempts]), [[false, 2, 0], [false, 2, 0], [false, 2, 0], [true, 3, 1]]);
  });

  test("a router without a client's takesPart takes part only in a drill for every service", async () => {
    for (const [services, expected] of [[[], 1], [[DIGEST_7], 0]]) {
      const t = transports();
      const router = new Router(parsed({ drill: drill({ services, share_bp: 2500 }) }), { transports: t.transports, registry, wallClock: () => DURING, clock: fakeClock(), logger: quiet });
      for (let i = 0; i < 4; i++) await router.complete("hi");
      assert.equal(t.calls.vendor_b, expected);
    }
  });

  test("a drilled request whose fallback fails too fails for the caller, and the client is told", async () => {
    const t = transports((provider) => (provider === "vendor_a" ? "answer" : new ProviderError(503)));
    const s = source(parsed({ drill: drill({ share_bp: 2500 }) }));
    const router = new Router(s, { transports: t.transports, wallClock: () => DURING, clock: fakeClock(), logger: quiet });
    for (let i = 0; i < 3; i++) await router.complete("hi");
    const error = await router.complete("hi").catch((e) => e);
    assert.equal(error.name, "AllProvidersFailed");
    assert.match(error.message, /vendor_a\/large \(HTTP 500\)/);
    const last = s.told.drills.at(-1);
    assert.deepEqual([last.drilled, last.ended_on, last.error, last.fallback_attempts, last.fallback_failures], [true, null, "AllProvidersFailed", 1, 1]);
  });

  test("a drilled stream attempt never opens a stream; the next step streams", async () => {
    const opened = { vendor_a: 0, vendor_b: 0 };
    const streamer = (provider) => async function* () {
      opened[provider] += 1;
      yield `chunk from ${provider}`;
    };
    const s = source(parsed({ drill: drill({ fault: "stream_cut_before_first_chunk", share_bp: 2500 }) }));
    const router = new Router(s, {
      transports: {}, streamTransports: { vendor_a: streamer("vendor_a"), vendor_b: streamer("vendor_b") },
      wallClock: () => DURING, clock: fakeClock(), logger: quiet,
    });
    const seen = [];
    let stream;
    for (let i = 0; i < 4; i++) {
      stream = router.stream("hi");
      for await (const chunk of stream) seen.push(chunk);
    }
    assert.deepEqual(opened, { vendor_a: 3, vendor_b: 1 });
    assert.equal(seen.at(-1), "chunk from vendor_b");
    const [drilled] = stream.receipt.attempts;
    assert.deepEqual([drilled.outcome, drilled.status, drilled.dispatch, drilled.drill, drilled.chunks], ["failed", null, "not_dispatched", 7, 0]);
    assert.deepEqual(s.told.drills.map((r) => r.drilled), [false, false, false, true]);
    assert.equal(s.told.drills.at(-1).ended_on, 2);
  });

  test("first_chunk_late in a stream waits the first-chunk bound, then falls back", async () => {
    const clock = fakeClock();
    const router = new Router(source(parsed({ drill: drill({ fault: "first_chunk_late", share_bp: 2500 }) })), {
      transports: {}, streamTransports: { vendor_a: async function* () { yield "a"; }, vendor_b: async function* () { yield "b"; } },
      wallClock: () => DURING, clock, logger: quiet,
    });
    for (let i = 0; i < 3; i++) for await (const _ of router.stream("hi"));
    const stream = router.stream("hi", { firstChunkS: 2 });
    const seen = [];
    for await (const chunk of stream) seen.push(chunk);
    assert.deepEqual(seen, ["b"]);
    assert.deepEqual([stream.receipt.attempts[0].outcome, stream.receipt.attempts[0].elapsed_s, stream.receipt.attempts[0].timeout_s], ["timeout", 2, 2]);
  });
});

// --- the client: takesPart and the usage report's drill section --------------------------------

function fakePlane(documents) {
  const plane = { reports: [], status: 202, document: documents };
  plane.fetch = async (url, init) => {
    if (init.method === "POST") {
      plane.reports.push({ at: Date.now(), body: JSON.parse(init.body) });
      return new Response("{}", { status: plane.status });
    }
    return new Response(JSON.stringify(plane.document), { status: 200, headers: { ETag: `"${plane.document.version}"` } });
  };
  return plane;
}

function client(plane, { clock, token = TOKEN, ...more } = {}) {
  return new ChainClient("http://control-plane.test", {
    chain: "chat", token, registry, default: [CHAIN[0]], stateDir: null, longPoll: false, logger: quiet,
    clock, fetch: plane.fetch, ...more,
  });
}

describe("the client's part", () => {
  test("takesPart: every service for an empty list, else only the service its digest names", async () => {
    const plane = fakePlane(doc());
    const named = client(plane, { clock: () => DURING });
    const other = client(plane, { clock: () => DURING, token: "cpt_someone_else" });
    const d = (services) => parsed({ drill: drill({ services }) }).drill;
    assert.equal(named.takesPart(d([])), true);
    assert.equal(named.takesPart(d([DIGEST_7])), true);
    assert.equal(other.takesPart(d([DIGEST_7])), false);
    assert.equal(other.takesPart(d([])), true);
  });

  test("a malformed drill is logged once per document and the document is applied", async () => {
    const warnings = [];
    const plane = fakePlane(doc({ drill: drill({ fault: "dns_failure" }) }));
    const c = client(plane, { clock: () => DURING, logger: { ...quiet, warn: (m) => warnings.push(m) } });
    await c.pollOnce();
    assert.equal(c.current().version, 3);
    assert.equal(c.current().drill, null);
    plane.document = doc({ version: 4, drill: drill({ fault: "dns_failure" }) });
    await c.pollOnce();
    assert.equal(c.current().version, 4);
    await c.pollOnce(); // v4 again: not applied again, not logged again
    assert.equal(warnings.filter((w) => w.includes("drill")).length, 2, warnings.join("\n"));
    assert.equal(warnings[0], "chain chat: ignoring the failover drill in v3: drill.fault 'dns_failure' is not one this client knows; the document itself is applied");
  });

  test("a document bringing a drill says so once, in words", async () => {
    const infos = [];
    const plane = fakePlane(doc({ drill: drill() }));
    const c = client(plane, { clock: () => DURING, logger: { ...quiet, info: (m) => infos.push(m) } });
    await c.pollOnce();
    plane.document = doc({ version: 4, drill: drill() });
    await c.pollOnce();
    assert.deepEqual(infos.filter((m) => m.includes("carries")), [
      `chain chat: v3 carries failover drill 7: hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests, from ${STARTS} to ${ENDS}`,
    ]);
  });

  test("the report's drill section: counts while active, zero counts too, merged back on failure, none without a drill", async () => {
    let now = DURING;
    const plane = fakePlane(doc({ drill: drill({ services: [DIGEST_7], share_bp: 2500 }) }));
    const c = client(plane, { clock: () => now });
    await c.pollOnce();
    // Active and taking part: a report even with nothing else to say.
    await c.flushUsage();
    assert.deepEqual(plane.reports.at(-1).body.drill, {
      id: 7, requests: 0, drilled: 0, ended_on: {}, failed: 0, deadline: 0, refusals: 0, fallback_attempts: 0, fallback_failures: 0,
      latency_ms: { drilled: [0, 0, 0, 0, 0, 0, 0, 0, 0], other: [0, 0, 0, 0, 0, 0, 0, 0, 0] },
    });
    const t = transports((provider) => (provider === "vendor_b" ? new ProviderError(503) : "answer"));
    const mono = fakeClock();
    const router = new Router(c, { transports: t.transports, wallClock: () => now, clock: mono, logger: quiet });
    for (let i = 0; i < 8; i++) await router.complete("hi").catch(() => undefined);
    plane.status = 503;
    await c.flushUsage();
    plane.status = 202;
    await c.flushUsage();
    const body = plane.reports.at(-1).body;
    assert.deepEqual(body.drill, {
      id: 7, requests: 8, drilled: 2, ended_on: { 3: 2 }, failed: 0, deadline: 0, refusals: 0, fallback_attempts: 2, fallback_failures: 2,
      latency_ms: { drilled: [2, 0, 0, 0, 0, 0, 0, 0, 0], other: [6, 0, 0, 0, 0, 0, 0, 0, 0] },
    });
    // The drilled attempts are not in the provider health: vendor_a has 6 served, no failure.
    const health = Object.fromEntries(body.health.steps.map((s) => [s.provider, s.outcomes]));
    assert.deepEqual(health.vendor_a, { served: 6 });
    assert.deepEqual(health.vendor_b, { server_error: 2 });

    // Once the drill is over, one last report carries it; then none.
    now = Date.parse(ENDS) / 1000 + 3;
    await c.flushUsage();
    assert.equal(plane.reports.at(-1).body.drill.id, 7);
    const sent = plane.reports.length;
    await c.flushUsage();
    assert.equal(plane.reports.length, sent, "nothing more to say: no report");

    // A client the drill does not name sends no drill section.
    const other = client(plane, { clock: () => DURING, token: "cpt_someone_else" });
    await other.pollOnce();
    const before = plane.reports.length;
    await other.flushUsage();
    assert.equal(plane.reports.length, before);
  });

});

// Real time: the report loop's cadence (about 15 s, the two at once).
describe("the drill's report cadence", { concurrency: true }, () => {
  const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const I = DRILL_REPORT_INTERVAL_S;

  test("while a drill runs a client reports at least every DRILL_REPORT_INTERVAL_S, and once within it after the end", { timeout: 40000 }, async () => {
    const start = Date.now();
    const endsAfter = 9;
    const plane = fakePlane(doc({ drill: drill({ starts_at: new Date(start - 60000).toISOString(), ends_at: new Date(start + endsAfter * 1000).toISOString() }) }));
    const c = client(plane, { usageInterval: 3600, pollInterval: 3600 }).start();
    await sleep(endsAfter + I + 0.5);
    await c.stop(0.1);
    const at = plane.reports.filter((r) => r.body.drill !== undefined).map((r) => (r.at - start) / 1000);
    const shown = JSON.stringify(at);
    assert.ok(at.length >= 2 && at[0] < 0.2 * I + 1, shown);
    const during = at.filter((t) => t < endsAfter);
    assert.ok([...during, endsAfter].slice(1).every((t, i) => t - during[i] <= I), `gaps over ${I} s while it ran: ${shown}`);
    assert.ok(at.slice(1).every((t, i) => t - at[i] >= 0.75 * I - 0.1), `reports closer than the per-minute limit allows: ${shown}`);
    const afterEnd = at.filter((t) => t >= endsAfter);
    assert.equal(afterEnd.length, 1, shown);
    assert.ok(afterEnd[0] < endsAfter + I, shown);
  });

  test("a drill the control plane ends early gets its last report within DRILL_REPORT_INTERVAL_S, then none", { timeout: 40000 }, async () => {
    const start = Date.now();
    const plane = fakePlane(doc({ drill: drill({ starts_at: new Date(start - 60000).toISOString(), ends_at: new Date(start + 600000).toISOString() }) }));
    const c = client(plane, { usageInterval: 3600, pollInterval: 3600 }).start();
    while (!plane.reports.some((r) => r.body.drill)) await sleep(0.02);
    plane.document = doc({ version: 4 });
    await c.pollOnce();
    const ended = Date.now();
    const sent = plane.reports.length;
    while (plane.reports.length === sent && Date.now() - ended < I * 1000 + 500) await sleep(0.02);
    assert.equal(plane.reports.length, sent + 1);
    assert.equal(plane.reports.at(-1).body.drill.id, 7);
    assert.ok(Date.now() - ended < I * 1000, `${Date.now() - ended} ms`);
    await sleep(3);
    assert.equal(plane.reports.length, sent + 1, "no drill section once its last report was accepted");
    await c.stop(0.1);
  });
});
