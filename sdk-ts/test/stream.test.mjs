// Router.stream: fallback only before the commit point; after it, StreamInterrupted and nothing
// else tried; bounds on the first chunk and between chunks; receipts with chunks delivered.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ProviderError, Registry, Router, StreamInterrupted, AllProvidersFailed, OutcomeUnknown, step } from "../dist/index.js";

const registry = new Registry({
  vendor_a: { destination: "vendor_a-us", models: { large: ["text"] } },
  vendor_b: { destination: "vendor_b-eu", models: { large: ["text"] } },
});
const chain = [step("vendor_a", "large", 2000), step("vendor_b", "large", 2000)];
const quiet = { warn() {}, error() {} };
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function chunks(list, { failAfter = null, error = new ProviderError(null, true, "connection reset"), delayMs = 0, hangAfter = null } = {}) {
  return async function* (_step, _request, _timeoutS, signal) {
    for (const [i, chunk] of list.entries()) {
      if (failAfter === i) throw error;
      if (hangAfter === i) await new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));
      if (delayMs) await pause(delayMs);
      yield chunk;
    }
    if (failAfter === list.length) throw error;
  };
}

function router(streamTransports, options = {}) {
  return new Router(chain, { transports: {}, streamTransports, registry, logger: quiet, ...options });
}

async function collect(stream) {
  const seen = [];
  for await (const chunk of stream) seen.push(chunk);
  return { seen, result: stream.result };
}

test("a stream that fails before its first chunk falls back to the next step", async () => {
  const r = router({ vendor_a: chunks(["x"], { failAfter: 0, error: new ProviderError(503) }), vendor_b: chunks(["he", "llo"]) });
  const { seen, result } = await collect(r.stream({ prompt: "hi" }));
  assert.deepEqual(seen, ["he", "llo"]);
  assert.equal(result.provider, "vendor_b");
  assert.deepEqual(result.receipt.attempts.map((a) => [a.provider, a.outcome, a.chunks]), [["vendor_a", "failed", 0], ["vendor_b", "ok", 2]]);
  assert.deepEqual(r.report().recovered_success, 1);
});

test("leaving a stream early closes the provider's stream, and the attempt counts as served", async () => {
  let closed = false;
  const endless = async function* () {
    try {
      for (let i = 0; ; i++) yield `chunk ${i} `;
    } finally {
      closed = true;
    }
  };
  const r = router({ vendor_a: endless, vendor_b: chunks(["no"]) });
  const stream = r.stream({});
  for await (const chunk of stream) if (chunk === "chunk 2 ") break;
  assert.equal(closed, true);
  assert.equal(r.report().first_attempt_success, 1);
});

test("chunks without content are held until the first content, then handed over together", async () => {
  const r = router({ vendor_a: chunks([{ role: "assistant" }, { text: "" }, { text: "hi" }, { text: "!" }]), vendor_b: chunks(["no"]) });
  const { seen } = await collect(r.stream({}));
  assert.deepEqual(seen, [{ role: "assistant" }, { text: "" }, { text: "hi" }, { text: "!" }]);
});

test("after the commit point a break is StreamInterrupted, and nothing else is tried", async () => {
  let asked = 0;
  const backup = async function* () {
    asked += 1;
    yield "second answer";
  };
  const r = router({ vendor_a: chunks(["one ", "two "], { failAfter: 2 }), vendor_b: backup });
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const chunk of r.stream({})) seen.push(chunk);
    })(),
    (error) => {
      assert.ok(error instanceof StreamInterrupted);
      assert.equal(error.chunks, 2);
      assert.equal(error.provider, "vendor_a");
      assert.match(error.message, /broke off its stream after 2 chunk\(s\)/);
      assert.deepEqual(error.receipt.attempts.map((a) => [a.outcome, a.chunks]), [["interrupted", 2]]);
      return true;
    },
  );
  assert.deepEqual(seen, ["one ", "two "]);
  assert.equal(asked, 0);
  assert.equal(r.report().interrupted, 1);
});

test("commitAfterChars holds chunks back until that many characters came: a break before it still falls back", async () => {
  const r = router({ vendor_a: chunks(["ab", "cd"], { failAfter: 2 }), vendor_b: chunks(["whole answer"]) });
  const { seen, result } = await collect(r.stream({}, { commitAfterChars: 10 }));
  assert.deepEqual(seen, ["whole answer"]);
  assert.equal(result.provider, "vendor_b");
});

test("a first chunk later than firstChunkS is a timeout before the commit point: the next step serves", async () => {
  const r = router({ vendor_a: chunks(["late"], { hangAfter: 0 }), vendor_b: chunks(["on time"]) });
  const { seen, result } = await collect(r.stream({}, { firstChunkS: 0.2 }));
  assert.deepEqual(seen, ["on time"]);
  assert.equal(result.receipt.attempts[0].outcome, "timeout");
  assert.equal(result.receipt.attempts[0].dispatch, "dispatched_unknown");
});

test("with side effects, a silent first chunk is an unknown outcome: OutcomeUnknown, nothing else tried", async () => {
  const r = router({ vendor_a: chunks(["late"], { hangAfter: 0 }), vendor_b: chunks(["no"]) });
  await assert.rejects(collect(r.stream({}, { firstChunkS: 0.2, sideEffects: true })), OutcomeUnknown);
});

test("silence longer than idleS after the commit point interrupts the stream", async () => {
  const r = router({ vendor_a: chunks(["first", "never"], { hangAfter: 1 }), vendor_b: chunks(["no"]) });
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const chunk of r.stream({}, { idleS: 0.2 })) seen.push(chunk);
    })(),
    (error) => error instanceof StreamInterrupted && error.chunks === 1 && /no chunk within 0.2s/.test(error.message),
  );
  assert.deepEqual(seen, ["first"]);
});

test("every step failing before its commit point is AllProvidersFailed, with both attempts in the receipt", async () => {
  const r = router({ vendor_a: chunks([], { failAfter: 0, error: new ProviderError(500) }), vendor_b: chunks([], { failAfter: 0, error: new ProviderError(503) }) });
  await assert.rejects(collect(r.stream({})), (error) => error instanceof AllProvidersFailed && error.receipt.attempts.length === 2);
});

test("a step without a stream transport is skipped for streams, with the reason in the receipt", async () => {
  const r = new Router(chain, { transports: { vendor_a: async () => "x" }, streamTransports: { vendor_b: chunks(["b"]) }, registry, logger: quiet });
  const { result } = await collect(r.stream({}));
  assert.equal(result.provider, "vendor_b");
  assert.deepEqual(result.receipt.refused.map(([s, why]) => [s.provider, why]), [["vendor_a", "no stream transport for this provider (it can serve complete() only)"]]);
});

test("complete() aborts an attempt that outlives its timeout and records a timeout after dispatch", async () => {
  const slow = async (_s, _r, _t, signal) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve("late"), 5000);
      signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(new Error("aborted"));
      });
    });
  const r = new Router([step("vendor_a", "large", 500), step("vendor_b", "large", 500)], {
    transports: { vendor_a: slow, vendor_b: async () => "fast" },
    registry,
    logger: quiet,
  });
  const result = await r.complete({});
  assert.equal(result.value, "fast");
  assert.deepEqual([result.receipt.attempts[0].outcome, result.receipt.attempts[0].dispatch], ["timeout", "dispatched_unknown"]);
});

test("a stream's model and tokens, said on its iterable once read (as an adapter sets them from the usage event), are in its receipt", async () => {
  const withUsage = (_step, _request, _timeoutS, _signal) => {
    const stream = {
      model_id: "",
      input_tokens: null,
      output_tokens: null,
      async *[Symbol.asyncIterator]() {
        yield "he";
        yield "llo";
        // The usage event comes last, after the content.
        stream.model_id = "vendor_a/large-2026";
        stream.input_tokens = 1200;
        stream.output_tokens = 2.5; // not a count: unknown
      },
    };
    return stream;
  };
  const { seen, result } = await collect(router({ vendor_a: withUsage }).stream({}));
  assert.deepEqual(seen, ["he", "llo"]);
  const [attempt] = result.attempts;
  assert.deepEqual([attempt.model_id, attempt.input_tokens, attempt.output_tokens], ["vendor_a/large-2026", 1200, null]);
  const plain = await collect(router({ vendor_a: chunks(["x"]) }).stream({}));
  assert.deepEqual([plain.result.attempts[0].input_tokens, plain.result.attempts[0].output_tokens], [null, null]);
});

test("a stream's own text(chunk) measures its content (the commit point), unless the call gives content", async () => {
  // Chunks as a vendor library yields them: no `text` or `content` of their own.
  const measured = (pieces, { failAfter = null } = {}) => () => ({
    text: (chunk) => chunk.delta,
    async *[Symbol.asyncIterator]() {
      for (const [i, delta] of pieces.entries()) {
        if (failAfter === i) throw new ProviderError(null, true, "connection reset");
        yield { delta };
      }
    },
  });
  // Measured: the role chunk is held, the first content commits, a later break is StreamInterrupted.
  const cut = router({ vendor_a: measured(["", "one", "two"], { failAfter: 2 }), vendor_b: chunks(["second answer"]) });
  const seen = [];
  await assert.rejects(
    (async () => {
      for await (const chunk of cut.stream({})) seen.push(chunk);
    })(),
    (error) => error instanceof StreamInterrupted && error.chunks === 2,
  );
  assert.deepEqual(seen, [{ delta: "" }, { delta: "one" }]);
  // The call's content wins: measured as empty, nothing commits, and the break falls back.
  const held = router({ vendor_a: measured(["", "one", "two"], { failAfter: 2 }), vendor_b: chunks(["second answer"]) });
  const { seen: fallback, result } = await collect(held.stream({}, { content: () => "" }));
  assert.deepEqual(fallback, ["second answer"]);
  assert.equal(result.provider, "vendor_b");
});
