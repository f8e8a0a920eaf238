// The client contract every chainclient shares (../sdk/tests/vectors/client_contract.json),
// run against this client: the poller vectors step by step with a scripted fetch and a fake
// clock, the router vectors with scripted transports. The Python SDK runs the same file
// (sdk/tests/test_client_contract.py); the last line printed is the count both report.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import {
  Answer,
  ChainClient,
  ContentPolicyRefusal,
  ProviderError,
  ProviderTimeout,
  ProviderUnavailable,
  REPORT_KEYS,
  Registry,
  Router,
  RoutingError,
  outcomeClass,
} from "../dist/index.js";

const CONTRACT = JSON.parse(readFileSync(new URL("../../sdk/tests/vectors/client_contract.json", import.meta.url), "utf8"));
const REGISTRY = new Registry(CONTRACT.registry);
const DEFAULT = CONTRACT.default;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const epochS = (text) => Date.parse(text) / 1000;
const ran = { poller: 0, router: 0 };

function attempt(spec) {
  return {
    task_id: "t",
    attempt_id: "t-1",
    provider: spec.provider,
    model: spec.model,
    dispatch: "dispatched_known",
    outcome: spec.outcome,
    status: spec.status,
    elapsed_s: spec.elapsed_s,
    timeout_s: 20,
    reason: "",
    error: "",
    destination: "",
    model_id: "",
    contract: "none",
    epoch: 0,
    version: 0,
    chunks: null,
    first_chunk_s: spec.first_chunk_s ?? null,
    input_tokens: null,
    output_tokens: null,
  };
}

function checkReport(expect, body) {
  const wanted = expect.report;
  if (wanted === null) {
    assert.equal(body, null, "no report is sent with nothing to report");
    return;
  }
  const ahead = { ...(body.ahead_of_server ?? {}) };
  delete ahead.since;
  const seen = {
    ...body,
    providers: Object.fromEntries(Object.entries(body.providers).map(([name, entry]) => [name, entry.requests])),
    rejected: body.rejected.map((entry) => [entry.version, entry.reason]),
    ahead_of_server: ahead,
    health: body.health ?? null,
  };
  assert.deepEqual(Object.fromEntries(Object.keys(wanted).map((k) => [k, seen[k]])), wanted);
}

class PollerRun {
  constructor(vector, directory) {
    this.options = vector.options;
    this.now = epochS(this.options.clock ?? CONTRACT.clock);
    this.stateDir = this.options.state_dir ? directory : null;
    this.client = this.build();
  }

  build() {
    return new ChainClient("http://control-plane.test", {
      chain: CONTRACT.chain,
      token: CONTRACT.token,
      registry: REGISTRY,
      default: DEFAULT,
      stateDir: this.stateDir,
      longPoll: this.options.long_poll ?? true,
      service: CONTRACT.service,
      instance: CONTRACT.instance,
      aheadAfterS: this.options.ahead_after_s ?? 30,
      trustedKeys: this.options.trusted_keys ?? null,
      published: this.options.published ?? false,
      logger: quiet,
      clock: () => this.now,
      fetch: (url, init) => this.answer(url, init),
    });
  }

  async step(step) {
    this.now += step.advance_s ?? 0;
    if (step.edit_state_file) {
      const path = join(this.stateDir, `${CONTRACT.chain}.json`);
      const saved = JSON.parse(readFileSync(path, "utf8"));
      Object.assign(saved.document, step.edit_state_file);
      writeFileSync(path, JSON.stringify(saved));
    }
    if (step.restart) this.client = this.build();
    const recorded = step.record ?? {};
    for (const provider of recorded.served ?? []) this.client.record_served(provider);
    for (const spec of recorded.attempts ?? []) this.client.record_attempt(attempt(spec));
    for (const provider of recorded.breaker_opened ?? []) this.client.record_breaker_opened(provider);
    let sent = {};
    if (step.report) {
      const answer = step.report;
      let body = null;
      this.answer = async (url, init) => {
        sent = { method: init.method, path: new URL(url).pathname };
        for (const [name, value] of Object.entries(init.headers)) sent[name.toLowerCase()] = value;
        body = JSON.parse(init.body);
        if (answer.error) throw new TypeError("fetch failed", { cause: Object.assign(new Error(answer.error), { code: "ECONNREFUSED" }) });
        return new Response("{}", { status: answer.status, headers: answer.retry_after ? { "Retry-After": answer.retry_after } : {} });
      };
      await this.client.flushUsage();
      checkReport(step.expect, body);
    }
    if (step.answer) {
      const answer = step.answer;
      const fetch = async (url, init) => {
        const parsed = new URL(url);
        sent = { path: parsed.pathname + parsed.search };
        for (const [name, value] of Object.entries(init.headers)) sent[name.toLowerCase()] = value;
        if (answer.error) throw new TypeError("fetch failed", { cause: Object.assign(new Error(answer.error), { code: "ECONNREFUSED" }) });
        const body = answer.document !== undefined ? JSON.stringify(answer.document) : (answer.body ?? "");
        const headers = { ...(answer.etag ? { ETag: answer.etag } : {}), ...(answer.retry_after ? { "Retry-After": answer.retry_after } : {}) };
        return new Response(answer.status === 304 ? null : body, { status: answer.status, headers });
      };
      this.answer = fetch;
      const delay = await this.client.pollOnce();
      if (step.expect.next_s) {
        const [low, high] = step.expect.next_s;
        assert.ok(low - 1e-9 <= delay && delay <= high + 1e-9, `next poll in ${delay} s, not within [${low}, ${high}]`);
      }
    }
    this.check(step.expect, sent);
  }

  check(expect, sent) {
    const names = { if_none_match: "if-none-match", applied_version: "x-chain-applied-version", client: "x-chain-client" };
    for (const [key, value] of Object.entries(expect.sent ?? {})) assert.equal(sent[names[key] ?? key], value, key);
    const document = this.client.current();
    if (expect.current) {
      assert.deepEqual(Object.fromEntries(Object.keys(expect.current).map((k) => [k, document[k]])), expect.current);
    }
    if (expect.chain) assert.deepEqual(document.chain.map((s) => `${s.provider}/${s.model}`), expect.chain);
    const health = this.client.health();
    const shown = {
      ...health,
      expired_pin: health.expired_pin !== null,
      ahead_of_server: health.ahead_of_server !== null,
      state_file_refused: health.state_file_refused !== null,
      signature_refused: health.signatures.refused,
      signature_key_id: health.signatures.key_id,
    };
    const wanted = expect.health ?? {};
    assert.deepEqual(Object.fromEntries(Object.keys(wanted).map((k) => [k, shown[k]])), wanted);
  }
}

describe("poller vectors", () => {
  const directories = [];
  after(() => directories.forEach((d) => rmSync(d, { recursive: true, force: true })));
  for (const vector of CONTRACT.poller) {
    test(vector.name, async () => {
      const directory = mkdtempSync(join(tmpdir(), "chainclient-contract-"));
      directories.push(directory);
      const run = new PollerRun(vector, directory);
      for (const [index, step] of vector.steps.entries()) {
        try {
          await run.step(step);
        } catch (error) {
          error.message = `${vector.name} step ${index}: ${error.message}`;
          throw error;
        }
      }
      ran.poller += 1;
    });
  }
});

function raised(spec) {
  switch (spec.raise) {
    case "ProviderError":
      return new ProviderError(spec.status, spec.dispatched ?? true, "", { retryAfterS: spec.retry_after_s ?? null });
    case "ProviderTimeout":
      return new ProviderTimeout(spec.dispatched ?? true);
    case "ProviderUnavailable":
      return new ProviderUnavailable("connection refused");
    case "ContentPolicyRefusal":
      return new ContentPolicyRefusal("flagged");
    default:
      return new RangeError("boom");
  }
}

describe("router vectors", () => {
  for (const vector of CONTRACT.router) {
    test(vector.name, async () => {
      const options = vector.router;
      let now = 1000;
      let calls = {};
      const unexpected = [];
      const transport = async (step) => {
        const queue = calls[step.provider];
        if (!queue?.length) {
          unexpected.push(`${step.provider}/${step.model}`);
          throw new Error(`unexpected call to ${step.provider}/${step.model}`);
        }
        const spec = queue.shift();
        now += spec.takes_s ?? 0;
        if (spec.raise) throw raised(spec);
        return spec.model_id ? new Answer(spec.return, spec.model_id) : spec.return;
      };
      const providers = options.transports ?? Object.keys(CONTRACT.registry);
      const settings = options.breaker && {
        failureThreshold: options.breaker.failure_threshold,
        windowS: options.breaker.window_s,
        cooldownS: options.breaker.cooldown_s,
        probeIntervalS: options.breaker.probe_interval_s,
      };
      // A setting the vector leaves out is the default, as in the Python SDK's BreakerSettings(**breaker).
      const breaker = settings ? Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined)) : undefined;
      const router = new Router(vector.chain, {
        transports: Object.fromEntries(providers.map((p) => [p, transport])),
        registry: REGISTRY,
        clock: () => now,
        deadlineS: options.deadline_s ?? 30,
        fallThroughOnContentPolicy: options.fall_through_on_content_policy ?? false,
        breaker,
        logger: quiet,
      });
      for (const [index, request] of vector.requests.entries()) {
        now += request.advance_s ?? 0;
        calls = Object.fromEntries(Object.entries(request.calls).map(([p, specs]) => [p, [...specs]]));
        const ask = request.options;
        const where = `${vector.name} request ${index}`;
        let outcome;
        try {
          outcome = await router.complete("hello", {
            contract: ask.contract,
            sideEffects: ask.side_effects ?? false,
            allowFallback: ask.allow_fallback ?? true,
            verify: "verify" in ask ? (value) => value === ask.verify : undefined,
          });
        } catch (error) {
          if (!(error instanceof RoutingError)) throw error;
          outcome = error;
        }
        const expect = request.expect;
        assert.deepEqual(unexpected, [], where);
        assert.ok(Object.values(calls).every((q) => q.length === 0), `${where}: calls not made ${JSON.stringify(calls)}`);
        if (expect.error === null) {
          assert.ok(!(outcome instanceof RoutingError), `${where}: ${outcome.message}`);
          assert.equal(`${outcome.provider}/${outcome.model}`, expect.served_by, where);
        } else {
          assert.equal(outcome.name, expect.error, `${where}: ${outcome.message ?? outcome}`);
        }
        const attempts = outcome.receipt.attempts;
        assert.equal(attempts.length, expect.attempts.length, `${where}: ${outcome.receipt}`);
        attempts.forEach((attempt, i) => {
          const wanted = Object.fromEntries(Object.entries(expect.attempts[i]).filter(([, v]) => v !== null));
          const seen = {
            step: `${attempt.provider}/${attempt.model}`,
            outcome: attempt.outcome,
            dispatch: attempt.dispatch,
            status: attempt.status,
            class: outcomeClass(attempt),
            reason: attempt.reason,
            timeout_s: attempt.timeout_s,
            elapsed_s: attempt.elapsed_s,
            model_id: attempt.model_id,
            destination: attempt.destination,
          };
          assert.deepEqual(Object.fromEntries(Object.keys(wanted).map((k) => [k, seen[k]])), wanted, where);
        });
        assert.deepEqual(
          outcome.receipt.refused.map(([s, why]) => [`${s.provider}/${s.model}`, why]),
          expect.skipped,
          where,
        );
      }
      assert.deepEqual(router.report(), Object.fromEntries(REPORT_KEYS.map((k) => [k, vector.report[k] ?? 0])));
      for (const [provider, state] of Object.entries(options.breakers_after ?? {})) assert.equal(router.breakerState(provider), state);
      ran.router += 1;
    });
  }
});

after(() => {
  // Read by tests/test_typescript_client.py, which compares it with the vectors the Python SDK ran.
  console.log(`client contract: ${ran.poller} poller vectors, ${ran.router} router vectors passed`);
});
