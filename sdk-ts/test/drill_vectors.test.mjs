// The failover-drill vectors every chainclient shares (../sdk/tests/vectors/drills.json, built
// from the drill contract by sdk/tests/drill_vectors.py), run against this client: the service
// digests, what a client makes of a document's drill, and the routing cases: a ChainClient
// holding the document (or, without a token, a bare source as published copies have) routes
// each case's requests at its wall-clock instant on a test clock; which requests were drilled,
// the calls each fake provider received, every attempt and the usage report's drill section
// must be the vector's. The Python SDK runs the same file (sdk/tests/test_drill_vectors.py);
// the last line printed is the count both report.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, describe, test } from "node:test";

import {
  ChainClient,
  DrillTally,
  ProviderError,
  ProviderTimeout,
  Registry,
  Router,
  RoutingError,
  documentJson,
  drillBody,
  drillServiceDigest,
  parseDocument,
  sha256Hex,
  takesPartIn,
} from "../dist/index.js";

const VECTORS = JSON.parse(readFileSync(new URL("../../sdk/tests/vectors/drills.json", import.meta.url), "utf8"));
const REGISTRY = new Registry(VECTORS.registry);
const DEFAULT = [
  { provider: "vendor_a", model: "large", timeout_ms: 20000 },
  { provider: "vendor_b", model: "large", timeout_ms: 20000 },
];
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const ran = { digests: 0, documents: 0, cases: 0 };

describe("drill digest vectors", () => {
  for (const vector of VECTORS.digests) {
    test(`digest ${vector.id}`, () => {
      assert.equal(sha256Hex(vector.token), vector.token_sha256);
      assert.equal(drillServiceDigest(vector.id, vector.token_sha256), vector.digest);
      ran.digests += 1;
    });
  }
});

describe("drill document vectors", () => {
  for (const vector of VECTORS.documents) {
    test(vector.name, () => {
      const document = parseDocument(vector.document, { registry: REGISTRY });
      const expect = vector.expect;
      assert.equal(document.version, vector.document.version, "applied either way");
      assert.equal(document.drill_ignored, expect.ignored);
      if (expect.drill === null) {
        assert.equal(document.drill, null);
      } else {
        const { id, hop, fault, share_bp, services, starts_at, ends_at, starts_at_s, ends_at_s } = document.drill;
        assert.deepEqual({ id, hop, fault, share_bp, services: [...services], starts_at, ends_at, starts_at_s, ends_at_s }, expect.drill);
        // Kept as received, for the state file and the signature.
        assert.deepEqual(documentJson(document).drill, vector.document.drill);
      }
      ran.documents += 1;
    });
  }
});

/** A monotonic test clock the fakes and the drilled timeouts advance. */
function fakeClock() {
  let now = 1000;
  const clock = () => now;
  clock.advance = (seconds) => (now += seconds);
  return clock;
}

/** Each provider does, call by call, what the case's behaviours say (the last one repeats). */
class Scripted {
  constructor(behaviours, clock) {
    this.behaviours = behaviours;
    this.clock = clock;
    this.calls = {};
  }

  next(step) {
    const made = this.calls[step.provider] ?? 0;
    this.calls[step.provider] = made + 1;
    const specs = this.behaviours[step.provider];
    return specs[Math.min(made, specs.length - 1)];
  }

  call = async (step) => {
    const spec = this.next(step);
    this.clock.advance(spec.takes_s ?? 0);
    if (spec.raise === "ProviderError") throw new ProviderError(spec.status, spec.dispatched ?? true);
    if (spec.raise === "ProviderTimeout") throw new ProviderTimeout(spec.dispatched ?? true);
    return spec.return;
  };

  open = (step) => {
    const spec = this.next(step);
    const clock = this.clock;
    return (async function* () {
      for (const [i, chunk] of spec.stream.entries()) {
        if (i === 0 && spec.takes_s) clock.advance(spec.takes_s);
        yield chunk;
      }
    })();
  };
}

/** The source of a client without a token (published copies): its document, and what its routers record of a drill; no takesPart. */
class Recorder {
  constructor(document) {
    this.document = document;
    this.tally = new DrillTally();
  }

  current() {
    return this.document;
  }

  recordDrill(drill, request) {
    this.tally.record(drill.id, request);
  }
}

/** A ChainClient holding the case's document (one poll of a scripted control plane), whose usage reports are kept. */
async function holding(vector, wallClock) {
  const reports = [];
  const client = new ChainClient("http://control-plane.test", {
    chain: "chat",
    token: vector.token,
    registry: REGISTRY,
    default: DEFAULT,
    stateDir: null,
    longPoll: false,
    service: "checkout",
    instance: "web-1",
    logger: quiet,
    clock: wallClock,
    fetch: async (url, init) => {
      if (init.method === "POST") {
        reports.push(JSON.parse(init.body));
        return new Response("{}", { status: 202 });
      }
      return new Response(JSON.stringify(vector.document), { status: 200, headers: { ETag: `"${vector.document.version}"` } });
    },
  });
  await client.pollOnce();
  assert.equal(client.current().version, vector.document.version);
  return { client, reports };
}

async function route(router, kind, options) {
  const asked = { sideEffects: options.side_effects ?? false };
  if (kind === "complete") return router.complete("hello", asked);
  const stream = router.stream("hello", { ...asked, firstChunkS: options.first_chunk_s });
  for await (const _ of stream);
  return stream.result;
}

function seen(attempt) {
  return {
    step: `${attempt.provider}/${attempt.model}`,
    outcome: attempt.outcome,
    status: attempt.status,
    dispatch: attempt.dispatch,
    drill: attempt.drill,
    reason: attempt.reason,
    elapsed_s: Math.round(attempt.elapsed_s * 1e6) / 1e6, // the test clock's float sums, to the microsecond
    timeout_s: attempt.timeout_s,
    chunks: attempt.chunks,
  };
}

describe("drill routing vectors", () => {
  for (const vector of VECTORS.cases) {
    test(vector.name, async () => {
      const now = Date.parse(vector.now) / 1000;
      const wallClock = () => now;
      let source;
      let held = null;
      if (vector.token === null) {
        source = new Recorder(parseDocument(vector.document, { registry: REGISTRY }));
      } else {
        held = await holding(vector, wallClock);
        source = held.client;
      }
      const clock = fakeClock();
      const scripted = new Scripted(vector.behaviours, clock);
      const settings = vector.router;
      const providers = Object.keys(VECTORS.registry);
      const router = new Router(source, {
        transports: Object.fromEntries(providers.map((p) => [p, scripted.call])),
        streamTransports: vector.kind === "stream" ? Object.fromEntries(providers.map((p) => [p, scripted.open])) : undefined,
        registry: REGISTRY,
        clock,
        wallClock,
        deadlineS: settings.deadline_s ?? 30,
        breaker: "breaker" in settings && settings.breaker === null ? null : undefined,
        logger: quiet,
      });
      const expect = vector.expect;
      const drill = source.current().drill;
      assert.notEqual(drill, null);
      assert.equal(held !== null ? held.client.takesPart(drill) : takesPartIn(drill, null), expect.takes_part);

      const drilled = [];
      for (const [index, wanted] of expect.requests.entries()) {
        const where = `${vector.name} request ${index}`;
        let outcome;
        try {
          outcome = await route(router, vector.kind, vector.options);
        } catch (error) {
          if (!(error instanceof RoutingError)) throw error;
          outcome = error;
        }
        if (wanted.error === null) {
          assert.ok(!(outcome instanceof RoutingError), `${where}: ${outcome}`);
          assert.equal(`${outcome.provider}/${outcome.model}`, wanted.served_by, where);
        } else {
          assert.equal(outcome.name, wanted.error, `${where}: ${outcome}`);
        }
        const attempts = outcome.receipt.attempts;
        assert.deepEqual(
          attempts.slice(0, wanted.attempts.length).map((a, i) => Object.fromEntries(Object.keys(wanted.attempts[i]).map((k) => [k, seen(a)[k]]))),
          wanted.attempts.slice(0, attempts.length),
          `${where}\n${outcome.receipt}`,
        );
        assert.equal(attempts.length, wanted.attempts.length, `${where}\n${outcome.receipt}`);
        if (attempts.some((a) => a.drill !== null)) drilled.push(index);
      }

      assert.deepEqual(drilled, expect.drilled);
      assert.deepEqual(scripted.calls, expect.calls);
      for (const [provider, state] of Object.entries(expect.breakers_after ?? {})) assert.equal(router.breakerState(provider), state);
      // The usage report's drill section: what the client sends (or, without a token, what its source tallied).
      if (held === null) {
        const pending = source.tally.pending();
        if (expect.report === null) assert.deepEqual(pending, []);
        else {
          assert.deepEqual(pending, [drill.id]);
          assert.deepEqual(drillBody(drill.id, source.tally.take(drill.id)), expect.report);
        }
      } else {
        await held.client.flushUsage();
        const sent = held.reports.at(-1) ?? {};
        assert.deepEqual(sent.drill ?? null, expect.report);
      }
      ran.cases += 1;
    });
  }
});

after(() => {
  // Read by tests/test_typescript_client.py, which compares it with the vectors drills.json holds.
  console.log(`drill vectors: ${ran.digests} digests, ${ran.documents} documents, ${ran.cases} cases passed`);
});
