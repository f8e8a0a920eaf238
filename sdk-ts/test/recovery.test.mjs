// Recovery: a breaker whose failed probe reopens it for the probe interval, not a whole
// cooldown (a primary down for a minute is used again within a probe interval of its
// recovery), and a context-length rejection that goes on to a step with a larger window
// (skipping those no larger) instead of stopping the walk.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  AllProvidersFailed,
  ContextLengthExceeded,
  DEFAULT_BREAKER,
  ProviderError,
  Registry,
  RequestRejected,
  Router,
  classify,
  step,
} from "../dist/index.js";

const quiet = { warn() {}, error() {} };

/** A fake monotonic clock: `clock.set(t)` moves it. */
function fakeClock(start = 0) {
  let now = start;
  const clock = () => now;
  clock.set = (t) => (now = t);
  return clock;
}

describe("breaker recovery", () => {
  const registry = new Registry({
    primary: { destination: "primary-us", models: { large: ["text"] } },
    backup: { destination: "backup-eu", models: { large: ["text"] } },
  });
  const chain = [step("primary", "large", 20000), step("backup", "large", 20000)];

  /** The primary fails every request before `recoversAt`, then answers; the backup always answers. */
  function setup(recoversAt, breaker) {
    const clock = fakeClock();
    const primaryCalls = [];
    let router = null;
    const states = [];
    const transports = {
      primary: async () => {
        primaryCalls.push(clock());
        states.push(router.breakerState("primary"));
        if (clock() < recoversAt) throw new ProviderError(503);
        return "from primary";
      },
      backup: async () => "from backup",
    };
    router = new Router(chain, { transports, registry, clock, logger: quiet, ...(breaker ? { breaker } : {}) });
    return { clock, router, primaryCalls, states };
  }

  test("the defaults: a 10 s cooldown when the breaker opens, then a probe every 5 s", () => {
    assert.deepEqual({ ...DEFAULT_BREAKER }, { failureThreshold: 5, windowS: 60, cooldownS: 10, probeIntervalS: 5 });
  });

  test("a primary down for 60 s, a request every second for 90 s: all served, one probe per interval, back within a probe interval", async () => {
    const recoversAt = 60;
    const { clock, router, primaryCalls } = setup(recoversAt);
    const served = [];
    let openedAt = null;
    for (let t = 0; t < 90; t++) {
      clock.set(t);
      const result = await router.complete({ prompt: "hi" });
      served.push([t, result.provider]);
      if (openedAt === null && router.breakerState("primary") === "open") openedAt = t;
    }
    // (a) every request is served (complete() resolved 90 times): by the backup while the primary is down.
    assert.equal(served.length, 90);
    assert.deepEqual(served.filter(([t, provider]) => t < recoversAt && provider !== "backup"), []);
    // (b) while the primary is down, at most one request reaches it per probe interval after the breaker opened.
    assert.equal(openedAt, 4, "five failures in a row open the breaker");
    const probes = [];
    for (let from = openedAt; from < recoversAt; from += DEFAULT_BREAKER.probeIntervalS) {
      const calls = primaryCalls.filter((t) => t > from && t <= from + DEFAULT_BREAKER.probeIntervalS && t < recoversAt);
      assert.ok(calls.length <= 1, `${calls.length} calls to the primary within (${from}, ${from + 5}]: ${calls}`);
      probes.push(...calls);
    }
    assert.deepEqual(probes, [14, 19, 24, 29, 34, 39, 44, 49, 54, 59], "the first probe after the cooldown, then one per probe interval");
    // (c) the first request the primary serves comes within a probe interval (and a request's spacing) of its recovery.
    const back = served.find(([, provider]) => provider === "primary")[0];
    assert.ok(back >= recoversAt && back <= recoversAt + DEFAULT_BREAKER.probeIntervalS + 1, `the primary served again at ${back} s`);
    assert.ok(served.filter(([t]) => t >= back).every(([, provider]) => provider === "primary"), "and every request after it");
    assert.equal(router.breakerState("primary"), "closed");
  });

  test("a failed probe reopens the breaker for probeIntervalS: open, then half-open only after 5 s", async () => {
    const { clock, router, primaryCalls, states } = setup(Infinity);
    for (let t = 0; t < 5; t++) {
      clock.set(t);
      await router.complete({});
    }
    assert.equal(router.breakerState("primary"), "open");
    clock.set(13.9);
    let result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([s, why]) => [s.provider, why]), [["primary", "circuit breaker open (0.1s of cooldown left)"]]);
    clock.set(14);
    await router.complete({});
    assert.deepEqual([primaryCalls.at(-1), states.at(-1)], [14, "half_open"], "the probe after the 10 s cooldown");
    assert.equal(router.breakerState("primary"), "open", "the failed probe reopened it");
    clock.set(14.1);
    result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([, why]) => why), ["circuit breaker open (4.9s of cooldown left)"]);
    clock.set(18.9);
    result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([, why]) => why), ["circuit breaker open (0.1s of cooldown left)"]);
    assert.equal(router.breakerState("primary"), "open");
    assert.equal(primaryCalls.length, 6);
    clock.set(19);
    await router.complete({});
    assert.deepEqual([primaryCalls.length, primaryCalls.at(-1), states.at(-1)], [7, 19, "half_open"]);
  });

  test("a probe interval of its own; a Retry-After on a probe still opens the breaker for that long", async () => {
    const clock = fakeClock();
    let answer = new ProviderError(503);
    const router = new Router(chain, {
      transports: {
        primary: async () => {
          throw answer;
        },
        backup: async () => "from backup",
      },
      registry,
      clock,
      logger: quiet,
      breaker: { failureThreshold: 1, cooldownS: 30, probeIntervalS: 2 },
    });
    await router.complete({});
    let result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([, why]) => why), ["circuit breaker open (30.0s of cooldown left)"]);
    clock.set(30);
    await router.complete({});
    result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([, why]) => why), ["circuit breaker open (2.0s of cooldown left)"]);
    clock.set(32);
    answer = new ProviderError(429, true, "", { retryAfterS: 20 });
    await router.complete({});
    result = await router.complete({});
    assert.deepEqual(result.receipt.refused.map(([, why]) => why), ["circuit breaker open (20.0s of cooldown left)"]);
  });

  test("probeIntervalS must be positive", () => {
    for (const breaker of [{ probeIntervalS: 0 }, { probeIntervalS: -1 }, { probeIntervalS: Number.NaN }, { cooldownS: 0 }]) {
      assert.throws(
        () => new Router(chain, { transports: { primary: async () => "x", backup: async () => "x" }, registry, logger: quiet, breaker }),
        (error) => error instanceof RangeError && error.message === "windowS, cooldownS and probeIntervalS must be positive",
      );
    }
  });
});

describe("context length", () => {
  const chain = [step("a", "small", 20000), step("b", "small", 20000), step("c", "large", 20000)];
  const REASON = "HTTP 400: context length exceeded; trying a step with a larger context window";
  const SKIPPED_B = "context window of 8000 tokens is not larger than a/small's 8000; the request would not fit";

  function registry(windows = { a: 8000, b: 8000, c: 128000 }) {
    const spec = (provider, model) => ({
      destination: `${provider}-us`,
      models: { [model]: ["text"] },
      ...(windows[provider] !== undefined ? { contextWindows: { [model]: windows[provider] } } : {}),
    });
    return new Registry({ a: spec("a", "small"), b: spec("b", "small"), c: spec("c", "large") });
  }

  /** Transports counting their calls; `behaviour[provider]` is what each does (an Error is thrown). */
  function transports(behaviour) {
    const calls = { a: 0, b: 0, c: 0 };
    const make = (provider) => async () => {
      calls[provider] += 1;
      const what = behaviour[provider] ?? "answer";
      if (what instanceof Error) throw what;
      return `${what} from ${provider}`;
    };
    return { calls, transports: Object.fromEntries(Object.keys(calls).map((p) => [p, make(p)])) };
  }

  const tooLong = () => new ContextLengthExceeded("prompt is 9000 tokens, the maximum is 8000");
  const steps = (receipt) => receipt.attempts.map((a) => [`${a.provider}/${a.model}`, a.outcome]);
  const refused = (receipt) => receipt.refused.map(([s, why]) => [`${s.provider}/${s.model}`, why]);

  test("ContextLengthExceeded is a ProviderError with status 400, dispatched, classified as a rejection that goes on", () => {
    const error = tooLong();
    assert.ok(error instanceof ProviderError);
    assert.deepEqual([error.name, error.status, error.dispatched, error.retryAfterS], ["ContextLengthExceeded", 400, true, null]);
    assert.equal(error.message, "HTTP 400: prompt is 9000 tokens, the maximum is 8000");
    assert.equal(new ContextLengthExceeded().message, "HTTP 400: context length exceeded");
    const v = classify(error, { timeoutS: 20, sideEffects: true, fallThroughOnContentPolicy: false });
    assert.deepEqual([v.outcome, v.dispatch, v.action, v.status, v.countsAsFailure, v.reason], ["rejected", "dispatched_known", "next", 400, false, REASON]);
  });

  test("a(8k) too long: b(8k) is skipped, c(128k) serves; a's breaker stays closed", async () => {
    const { calls, transports: t } = transports({ a: tooLong() });
    const router = new Router(chain, { transports: t, registry: registry(), clock: fakeClock(), logger: quiet });
    for (let i = 0; i < 20; i++) {
      const result = await router.complete({ prompt: "long" });
      assert.equal(result.provider, "c");
      assert.deepEqual(steps(result.receipt), [["a/small", "rejected"], ["c/large", "ok"]]);
      const [a] = result.receipt.attempts;
      assert.deepEqual([a.dispatch, a.status, a.reason, a.error], ["dispatched_known", 400, REASON, "HTTP 400: prompt is 9000 tokens, the maximum is 8000"]);
      assert.deepEqual(refused(result.receipt), [["b/small", SKIPPED_B]]);
    }
    assert.deepEqual(calls, { a: 20, b: 0, c: 20 });
    assert.equal(router.breakerState("a"), "closed");
    assert.equal(router.report().recovered_success, 20);
  });

  test("with unknown windows every step is tried in order", async () => {
    const { calls, transports: t } = transports({ a: tooLong(), b: tooLong() });
    const router = new Router(chain, { transports: t, registry: registry({}), clock: fakeClock(), logger: quiet });
    const result = await router.complete({});
    assert.equal(result.provider, "c");
    assert.deepEqual(steps(result.receipt), [["a/small", "rejected"], ["b/small", "rejected"], ["c/large", "ok"]]);
    assert.deepEqual(refused(result.receipt), []);
    assert.deepEqual(calls, { a: 1, b: 1, c: 1 });
  });

  test("a failed step's unknown window skips nothing; a later step's unknown window is tried", async () => {
    let { calls, transports: t } = transports({ a: tooLong(), b: tooLong() });
    let router = new Router(chain, { transports: t, registry: registry({ b: 8000, c: 128000 }), clock: fakeClock(), logger: quiet });
    let result = await router.complete({});
    assert.deepEqual(steps(result.receipt), [["a/small", "rejected"], ["b/small", "rejected"], ["c/large", "ok"]]);
    ({ calls, transports: t } = transports({ a: tooLong() }));
    router = new Router(chain, { transports: t, registry: registry({ a: 8000, c: 128000 }), clock: fakeClock(), logger: quiet });
    result = await router.complete({});
    assert.deepEqual(steps(result.receipt), [["a/small", "rejected"], ["b/small", "ok"]]);
    assert.deepEqual(calls, { a: 1, b: 1, c: 0 });
  });

  test("every step too long: RequestRejected (400), not AllProvidersFailed", async () => {
    const { calls, transports: t } = transports({ a: tooLong(), b: tooLong(), c: new ContextLengthExceeded() });
    const router = new Router(chain, { transports: t, registry: registry(), clock: fakeClock(), logger: quiet });
    await assert.rejects(router.complete({}), (error) => {
      assert.ok(error instanceof RequestRejected);
      assert.equal(error.status, 400);
      assert.equal(
        error.headline,
        "c/large rejected the request: context length exceeded, and no later step has a larger context window (HTTP 400: context length exceeded)",
      );
      assert.deepEqual(steps(error.receipt), [["a/small", "rejected"], ["c/large", "rejected"]]);
      assert.deepEqual(refused(error.receipt), [["b/small", SKIPPED_B]]);
      return true;
    });
    assert.deepEqual(calls, { a: 1, b: 0, c: 1 });
    assert.equal(router.report().rejections, 1);
    // With unknown windows too: the last attempt was a context-length rejection.
    const unknown = new Router(chain, { transports: t, registry: registry({}), clock: fakeClock(), logger: quiet });
    await assert.rejects(unknown.complete({}), (error) => error instanceof RequestRejected && error.status === 400 && error.receipt.attempts.length === 3);
  });

  test("the chain's only larger step skipped: the walk ends in RequestRejected naming the step that rejected", async () => {
    const { transports: t } = transports({ a: tooLong() });
    const router = new Router([chain[0], chain[1]], { transports: t, registry: registry(), clock: fakeClock(), logger: quiet });
    await assert.rejects(router.complete({}), (error) => {
      assert.ok(error instanceof RequestRejected);
      assert.match(error.headline, /^a\/small rejected the request: context length exceeded, and no later step has a larger context window \(HTTP 400: prompt is 9000/);
      assert.deepEqual(refused(error.receipt), [["b/small", SKIPPED_B]]);
      return true;
    });
  });

  test("a later failure of another kind ends in AllProvidersFailed", async () => {
    const { transports: t } = transports({ a: tooLong(), c: new ProviderError(503) });
    const router = new Router(chain, { transports: t, registry: registry(), clock: fakeClock(), logger: quiet });
    await assert.rejects(router.complete({}), AllProvidersFailed);
  });

  /** a and b reject the request as too long; d (16k) comes before c (128k): is d skipped? */
  async function fourSteps(windowA, windowB) {
    const four = [chain[0], step("b", "small", 20000), step("d", "medium", 20000), chain[2]];
    const reg = new Registry({
      a: { destination: "a-us", models: { small: ["text"] }, contextWindows: { small: windowA } },
      b: { destination: "b-us", models: { small: ["text"] }, ...(windowB ? { contextWindows: { small: windowB } } : {}) },
      c: { destination: "c-us", models: { large: ["text"] }, contextWindows: { large: 128000 } },
      d: { destination: "d-us", models: { medium: ["text"] }, contextWindows: { medium: 16000 } },
    });
    const { calls, transports: t } = transports({ a: tooLong(), b: tooLong() });
    const router = new Router(four, { transports: { ...t, d: async () => "from d" }, registry: reg, clock: fakeClock(), logger: quiet });
    const result = await router.complete({});
    assert.equal(result.provider, "c");
    assert.deepEqual(calls, { a: 1, b: 1, c: 1 });
    return result;
  }

  test("each context-length rejection sets the window to beat: the latest failed step's", async () => {
    const result = await fourSteps(8000, 32000);
    assert.deepEqual(steps(result.receipt), [["a/small", "rejected"], ["b/small", "rejected"], ["c/large", "ok"]]);
    assert.deepEqual(refused(result.receipt), [["d/medium", "context window of 16000 tokens is not larger than b/small's 32000; the request would not fit"]]);
  });

  test("a later rejection by a step of no known window keeps the larger known window to beat", async () => {
    const result = await fourSteps(32000, null);
    assert.deepEqual(refused(result.receipt), [["d/medium", "context window of 16000 tokens is not larger than a/small's 32000; the request would not fit"]]);
  });

  test("stream(): the same walk, the error coming when the stream is opened", async () => {
    const opens = { a: 0, b: 0, c: 0 };
    const stream = (provider, error = null) =>
      async function* () {
        opens[provider] += 1;
        if (error) throw error;
        yield `hello from ${provider}`;
      };
    const router = new Router(chain, {
      transports: {},
      streamTransports: { a: stream("a", tooLong()), b: stream("b"), c: stream("c") },
      registry: registry(),
      clock: fakeClock(),
      logger: quiet,
    });
    const seen = [];
    const routed = router.stream({});
    for await (const chunk of routed) seen.push(chunk);
    assert.deepEqual(seen, ["hello from c"]);
    assert.equal(routed.provider, "c");
    assert.deepEqual(steps(routed.receipt), [["a/small", "rejected"], ["c/large", "ok"]]);
    assert.equal(routed.receipt.attempts[0].reason, REASON);
    assert.deepEqual(refused(routed.receipt), [["b/small", SKIPPED_B]]);
    assert.deepEqual(opens, { a: 1, b: 0, c: 1 });
    assert.equal(router.breakerState("a"), "closed");

    const rejecting = new Router(chain, {
      transports: {},
      streamTransports: { a: stream("a", tooLong()), b: stream("b", tooLong()), c: stream("c", new ContextLengthExceeded()) },
      registry: registry(),
      clock: fakeClock(),
      logger: quiet,
    });
    await assert.rejects(
      (async () => {
        for await (const chunk of rejecting.stream({})) seen.push(chunk);
      })(),
      (error) => error instanceof RequestRejected && error.status === 400 && /^c\/large rejected the request: context length exceeded/.test(error.headline),
    );
  });

  test("the registry's context windows: positive integers, for the provider's own models", () => {
    const reg = registry();
    assert.equal(reg.contextWindow("a", "small"), 8000);
    assert.equal(reg.contextWindow("c", "large"), 128000);
    assert.equal(reg.contextWindow("c", "small"), undefined);
    assert.equal(reg.contextWindow("nobody", "small"), undefined);
    assert.equal(registry({}).contextWindow("a", "small"), undefined);
    for (const tokens of [0, -8000, 1.5, "8000", null]) {
      assert.throws(
        () => new Registry({ a: { destination: "a-us", models: { small: [] }, contextWindows: { small: tokens } } }),
        (error) => error instanceof TypeError && error.message === "registry: provider 'a': the context window of 'small' must be a positive integer (tokens)",
      );
    }
    assert.throws(
      () => new Registry({ a: { destination: "a-us", models: { small: [] }, contextWindows: { large: 8000 } } }),
      (error) => error instanceof TypeError && error.message === "registry: provider 'a' gives a context window for 'large', which is not one of its models",
    );
    assert.throws(() => new Registry({ a: { destination: "a-us", models: { small: [] }, contextWindows: 8000 } }), TypeError);
  });
});
