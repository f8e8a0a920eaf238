// Conformance: every fault, through the official npm libraries, through the Router.
//
// For each scenario of the Python SDK's fault provider (chainclient.fault_scenarios.SCENARIOS,
// the very server sdk/tests/test_conformance.py runs against, driven over JSON lines) and each
// library (openai, @anthropic-ai/sdk), a two-step chain (vendor, failing as the scenario says,
// then backup, healthy) is asked with Router.complete and Router.stream. Nothing is mocked: the
// libraries talk HTTP to a local server. Each case checks the first attempt's outcome class,
// what the router did (served, fell back, stopped, interrupted) and how long it took to get
// there: at once, or the bound configured (the step's timeout, the first-chunk bound, the idle
// bound), never early and never past it by more than SLACK_S. A cut stream is never a success
// and never followed by a second answer (the backup gets no request).
//
// The table in README.md ("Conformance") is this run's output; the last test fails when it
// differs. CONFORMANCE_WRITE=1 (make conformance) rewrites it. About 10 s, most of it waiting
// out the bounds on purpose; CONFORMANCE_VERBOSE=1 prints each case's time and detail.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

import { ContentPolicyRejected, RequestRejected, Router, RoutingError, StreamInterrupted, outcomeClass, step } from "chainclient";
import { AnthropicMessages } from "chainclient/anthropic";
import { OpenAIChat } from "chainclient/openai";

import { FaultServer } from "../test-support/fault_server.mjs";
import { quiet } from "../test-support/fixtures.mjs";

const README = new URL("../README.md", import.meta.url);
const STEP_TIMEOUT_S = 0.5;
const IDLE_S = 0.3;
/** How far past its bound a case may end on this kind of machine (two busy cores). */
const SLACK_S = 0.5;
/** What "at once" must stay under (an HTTP exchange on loopback, on a busy machine). */
const AT_ONCE_S = 0.5;
const MODEL = "conformance-model";
const CHAIN = [step("vendor", MODEL, STEP_TIMEOUT_S * 1000), step("backup", MODEL, STEP_TIMEOUT_S * 1000)];
const PARAMS = {
  no_headers: { hang_s: 10 },
  first_chunk_late: { delay_s: 3 },
  silence_after_first_chunk: { hang_s: 10 },
  rate_limited: { retry_after: 2 },
};
const LIBRARIES = ["openai", "anthropic"];
const NAMES = { openai: "openai", anthropic: "@anthropic-ai/sdk" };
const WAYS = ["complete", "stream"];
const MESSAGES = [{ role: "user", content: "hello" }];

// What each scenario must become: [complete(), stream()] -> [class, decision, wait]; the
// Python table's (sdk/tests/test_conformance.py, EXPECTED).
const both = (cell) => [cell, cell];
const EXPECTED = {
  ok: both(["served", "served", "at once"]),
  rate_limited: both(["rate_limited", "fell back", "at once"]),
  server_error: both(["server_error", "fell back", "at once"]),
  unavailable: both(["server_error", "fell back", "at once"]),
  overloaded: both(["server_error", "fell back", "at once"]),
  unauthorized: both(["credentials", "fell back", "at once"]),
  context_length: both(["rejected", "fell back", "at once"]),
  content_policy_400: both(["content_policy", "stopped", "at once"]),
  content_filter: both(["content_policy", "stopped", "at once"]),
  connection_refused: both(["unavailable", "fell back", "at once"]),
  reset_before_headers: both(["unknown", "fell back", "at once"]),
  reset_mid_stream: [
    ["unknown", "fell back", "at once"],
    ["interrupted", "interrupted", "at once"],
  ],
  no_headers: both(["timeout", "fell back", "step timeout"]),
  first_chunk_late: [
    ["timeout", "fell back", "step timeout"],
    ["timeout", "fell back", "first-chunk bound"],
  ],
  silence_after_first_chunk: [
    ["timeout", "fell back", "step timeout"],
    ["interrupted", "interrupted", "idle bound"],
  ],
  no_terminal_event: [
    ["unknown", "fell back", "at once"],
    ["interrupted", "interrupted", "at once"],
  ],
  malformed_chunk: both(["unknown", "fell back", "at once"]),
  wrong_model: both(["served", "served", "at once"]),
  error_event: [
    ["served", "served", "at once"],
    ["interrupted", "interrupted", "at once"],
  ],
};
const LIMITS = { "at once": AT_ONCE_S, "step timeout": STEP_TIMEOUT_S, "first-chunk bound": STEP_TIMEOUT_S, "idle bound": IDLE_S };

const server = await FaultServer.start(["vendor", "backup"]);
// logLevel "off": the libraries log a chunk they cannot parse; the receipt says it here.
const adapters = {
  openai: (where) => new OpenAIChat(new OpenAI({ baseURL: where.openai_base_url, apiKey: "conformance", logLevel: "off" })),
  anthropic: (where) => new AnthropicMessages(new Anthropic({ baseURL: where.anthropic_base_url, apiKey: "conformance", logLevel: "off" })),
};

function routerFor(library, options = {}) {
  const vendor = adapters[library](server.providers.vendor);
  const backup = adapters[library](server.providers.backup);
  return new Router(CHAIN, {
    transports: { vendor: vendor.complete, backup: backup.complete },
    streamTransports: { vendor: vendor.stream, backup: backup.stream },
    logger: quiet,
    ...options,
  });
}

const routers = Object.fromEntries(LIBRARIES.map((library) => [library, routerFor(library)]));
const requestFor = (library) => ({ messages: MESSAGES, ...(library === "anthropic" ? { max_tokens: 64 } : {}) });

/** Run one request: the route or result, the error, the chunks the caller got. */
async function decide(way, router, library) {
  if (way === "complete") {
    try {
      return { outcome: await router.complete(requestFor(library)), error: null, got: 0 };
    } catch (error) {
      if (!(error instanceof RoutingError)) throw error;
      return { outcome: null, error, got: 0 };
    }
  }
  const route = router.stream(requestFor(library), { idleS: IDLE_S });
  let got = 0;
  try {
    for await (const _chunk of route) got += 1;
  } catch (error) {
    if (!(error instanceof RoutingError)) throw error;
    return { outcome: route, error, got };
  }
  return { outcome: route, error: null, got };
}

function judge(expectedWait, { outcome, error, got }) {
  const receipt = error ? error.receipt : outcome.receipt;
  const first = receipt.attempts[0];
  let decision;
  if (error === null) decision = outcome.provider === "vendor" ? "served" : "fell back";
  else if (error instanceof StreamInterrupted) decision = "interrupted";
  else if (error instanceof RequestRejected || error instanceof ContentPolicyRejected) decision = "stopped";
  else decision = `unexpected ${error.name}`;
  let elapsed = first.elapsed_s;
  // After the commit point the idle bound runs from the chunk the caller got last.
  if (decision === "interrupted" && first.first_chunk_s !== null) elapsed -= first.first_chunk_s;
  let detail = first.outcome === "ok" ? first.model_id : first.error || first.reason;
  if (decision === "interrupted") detail = `${got} chunk(s) delivered; ${first.error}`;
  return { outcomeClass: outcomeClass(first), decision, wait: expectedWait, elapsed, limit: LIMITS[expectedWait], detail, first, error, got };
}

const observed = new Map();
let passed = 0;

test("the fault provider's scenarios are the ones this table expects", () => {
  assert.deepEqual([...server.scenarios].sort(), Object.keys(EXPECTED).sort());
});

for (const library of LIBRARIES) {
  for (const scenario of server.scenarios) {
    for (const way of WAYS) {
      test(`${library} ${scenario} ${way}`, { timeout: 15_000 }, async () => {
        const expected = EXPECTED[scenario][way === "complete" ? 0 : 1];
        await server.set("vendor", scenario, PARAMS[scenario] ?? {});
        await server.clear("backup");
        const router = routers[library];
        router.resetBreakers();
        const seen = judge(expected[2], await decide(way, router, library));
        seen.backupRequests = (await server.requests("backup")).length;
        observed.set(`${library} ${scenario} ${way}`, seen);
        assert.deepEqual([seen.outcomeClass, seen.decision], expected.slice(0, 2), seen.detail);
        assert.ok(seen.elapsed <= seen.limit + SLACK_S, `${seen.elapsed.toFixed(3)}s past ${seen.wait} (${seen.detail})`);
        if (seen.wait !== "at once") assert.ok(seen.elapsed >= seen.limit - 0.01, `a bound enforced early: ${seen.elapsed.toFixed(3)}s`);
        if (seen.decision === "interrupted") {
          // A cut stream: never a success, never a second answer after the first was shown.
          assert.ok(seen.error instanceof StreamInterrupted && seen.error.chunks === seen.got && seen.got > 0, seen.detail);
          assert.equal(seen.backupRequests, 0, "the backup was asked after chunks reached the caller");
        }
        if (scenario === "wrong_model") assert.equal(seen.first.model_id, "substituted-model-2026", "the receipt names the model that answered");
        if (process.env.CONFORMANCE_VERBOSE) console.log(`  ${library} ${scenario} ${way}: ${seen.elapsed.toFixed(3)}s; ${seen.detail}`);
        passed += 1;
      });
    }
  }
}

for (const library of LIBRARIES) {
  test(`${library}: a Retry-After keeps the provider out until it passes`, async () => {
    let now = 1000;
    const clock = Object.assign(() => now, { advance: (seconds) => (now += seconds) });
    const router = routerFor(library, { clock });
    await server.set("vendor", "rate_limited", { retry_after: 20 });
    await server.clear("vendor");
    const first = await router.complete(requestFor(library));
    assert.equal(first.provider, "backup");
    assert.equal(first.receipt.attempts[0].status, 429);
    await server.set("vendor", "ok");
    clock.advance(19);
    const skipped = await router.complete(requestFor(library));
    assert.equal(skipped.provider, "backup");
    const refused = Object.fromEntries(skipped.receipt.refused.map(([s, why]) => [s.provider, why]));
    assert.match(refused.vendor, /circuit breaker open/);
    assert.equal((await server.requests("vendor")).length, 1, "nothing was sent to the vendor before its Retry-After passed");
    clock.advance(2);
    assert.equal((await router.complete(requestFor(library))).provider, "vendor");
  });
}

/** The README's conformance table, from the run. */
function table() {
  const lines = ["| Scenario | Library | `complete()` | `stream()` |", "| --- | --- | --- | --- |"];
  for (const scenario of server.scenarios) {
    for (const library of LIBRARIES) {
      const cells = WAYS.map((way) => {
        const seen = observed.get(`${library} ${scenario} ${way}`);
        return seen ? `\`${seen.outcomeClass}\`, ${seen.decision}, ${seen.wait}` : "not run";
      });
      lines.push(`| \`${scenario}\` | ${NAMES[library]} | ${cells[0]} | ${cells[1]} |`);
    }
  }
  return lines.join("\n") + "\n";
}

const BLOCK = /(<!-- conformance:start -->\n)([\s\S]*?)(<!-- conformance:end -->)/;

test("the README's table is this run's output", () => {
  const generated = table();
  const readme = readFileSync(README, "utf8");
  const match = BLOCK.exec(readme);
  assert.ok(match, "README.md has no <!-- conformance:start --> ... <!-- conformance:end --> block");
  const start = match.index + match[1].length;
  if (process.env.CONFORMANCE_WRITE === "1") {
    writeFileSync(README, readme.slice(0, start) + generated + readme.slice(start + match[2].length));
    return;
  }
  assert.equal(match[2], generated, "README.md's conformance table is stale: run `make conformance` (CONFORMANCE_WRITE=1 npm test)");
});

after(async () => {
  await server.close();
  // Read by tests/test_typescript_client.py, which compares it with the scenarios x ways x libraries.
  console.log(`conformance: ${passed} cases passed`);
});
