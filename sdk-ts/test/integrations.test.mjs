// The adapters on the official npm libraries (chainclient/openai, chainclient/anthropic), against
// the Python SDK's fault provider, and what they make of the failures the fault provider cannot
// stage (an undici connect timeout, an OpenAI-compatible server's wording, Azure's code). The
// conformance table (conformance.test.mjs) has every scenario through the Router.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";

import Anthropic, * as anthropicLibrary from "@anthropic-ai/sdk";
import OpenAI, * as openaiLibrary from "openai";

import { ContentPolicyRefusal, ContextLengthExceeded, ProviderError, ProviderTimeout, ProviderUnavailable, Router, step } from "chainclient";
import { AnthropicMessages, providerFailure as anthropicFailure } from "chainclient/anthropic";
import { OpenAIChat, providerFailure as openaiFailure } from "chainclient/openai";

import { FaultServer } from "../test-support/fault_server.mjs";
import { quiet } from "../test-support/fixtures.mjs";

const server = await FaultServer.start(["vendor"]);
after(() => server.close());

const where = server.providers.vendor;
const chat = () => new OpenAIChat(new OpenAI({ baseURL: where.openai_base_url, apiKey: "t", logLevel: "off" }));
const messages = () => new AnthropicMessages(new Anthropic({ baseURL: where.anthropic_base_url, apiKey: "t", logLevel: "off" }));
const ADAPTERS = { openai: chat, anthropic: messages };
const REQUESTS = {
  openai: { messages: [{ role: "user", content: "two words" }] },
  anthropic: { messages: [{ role: "user", content: "two words" }], max_tokens: 64 },
};
const vendor = step("vendor", "model-a", 5000);
const never = new AbortController().signal;

async function drain(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// --- what the main entry loads ------------------------------------------------------------

test("the main entry never imports a vendor library: a service without them never loads them", () => {
  const seen = new Set();
  const imports = [];
  const walk = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(new URL(file, new URL("../dist/", import.meta.url)), "utf8");
    for (const [, specifier] of source.matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)) {
      if (specifier.startsWith("./") || specifier.startsWith("../")) walk(new URL(specifier, new URL(file, "file:///dist/")).pathname.slice("/dist/".length));
      else imports.push(specifier);
    }
  };
  walk("index.js");
  assert.ok(seen.has("router.js") && seen.size > 5, [...seen].join(", "));
  assert.deepEqual(imports.filter((name) => !name.startsWith("node:")), []);
  const package_ = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.deepEqual(package_.dependencies ?? {}, {});
  for (const name of ["openai", "@anthropic-ai/sdk"]) assert.deepEqual(package_.peerDependenciesMeta[name], { optional: true });
});

// --- against the fault provider ------------------------------------------------------------

for (const library of ["openai", "anthropic"]) {
  test(`${library}: the request carries the step's model, and the answer its usage and model`, async () => {
    await server.set("vendor", "ok", { chunks: 3 });
    await server.clear("vendor");
    const adapter = ADAPTERS[library]();
    const answer = await adapter.complete(vendor, REQUESTS[library], 5, never);
    assert.deepEqual([answer.model_id, answer.input_tokens, answer.output_tokens], ["model-a", 2, 3]);
    const stream = adapter.stream(vendor, REQUESTS[library], 5, never);
    const chunks = await drain(stream);
    assert.equal(chunks.map((chunk) => stream.text(chunk)).join(""), "chunk-0 chunk-1 chunk-2");
    assert.deepEqual([stream.model_id, stream.input_tokens, stream.output_tokens], ["model-a", 2, 3]);
    const [whole, streamed] = (await server.requests("vendor")).map((r) => r.body);
    assert.equal(whole.model, "model-a");
    assert.equal("stream" in whole, false);
    assert.equal(streamed.stream, true);
    if (library === "openai") assert.deepEqual(streamed.stream_options, { include_usage: true });
  });

  test(`${library}: a request that sets the model or stream itself is a programming error`, async () => {
    const adapter = ADAPTERS[library]();
    await assert.rejects(adapter.complete(vendor, { ...REQUESTS[library], model: "other" }, 5, never), /the adapter sets model itself/);
    assert.throws(() => adapter.stream(vendor, { ...REQUESTS[library], stream: false }, 5, never), /the adapter sets stream itself/);
  });

  test(`${library}: the library's own retries are off: one request per attempt`, async () => {
    await server.set("vendor", "server_error");
    await server.clear("vendor");
    await assert.rejects(ADAPTERS[library]().complete(vendor, REQUESTS[library], 5, never), (e) => e instanceof ProviderError && e.status === 500);
    assert.equal((await server.requests("vendor")).length, 1);
  });

  test(`${library}: a Retry-After given as an HTTP date is read`, async () => {
    await server.set("vendor", "rate_limited", { retry_after: "Wed, 21 Oct 2099 07:28:00 GMT" });
    await assert.rejects(
      ADAPTERS[library]().complete(vendor, REQUESTS[library], 5, never),
      (e) => e instanceof ProviderError && e.status === 429 && e.retryAfterS > 365 * 24 * 3600,
    );
  });

  test(`${library}: the router's abort is its timeout after dispatch, before the headers and mid-stream, never a user abort or a success`, async () => {
    const adapter = ADAPTERS[library]();
    await server.set("vendor", "no_headers", { hang_s: 10 });
    const started = performance.now();
    await assert.rejects(adapter.complete(vendor, REQUESTS[library], 5, AbortSignal.timeout(100)), (e) => e instanceof ProviderTimeout && e.dispatched);
    await assert.rejects(drain(adapter.stream(vendor, REQUESTS[library], 5, AbortSignal.timeout(100))), (e) => e instanceof ProviderTimeout && e.dispatched);
    await server.set("vendor", "silence_after_first_chunk", { hang_s: 10 });
    const stream = adapter.stream(vendor, REQUESTS[library], 5, AbortSignal.timeout(300));
    const shown = [];
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) shown.push(chunk);
      })(),
      (e) => e instanceof ProviderTimeout && e.dispatched && /router aborted it/.test(e.message),
    );
    assert.ok(shown.some((chunk) => stream.text(chunk)), "the content before the silence came through");
    assert.ok(performance.now() - started < 3000, "each abort ended its call at once");
  });

  test(`${library}: a stream's failure is thrown again by a later next()`, async () => {
    await server.set("vendor", "malformed_chunk");
    const iterator = ADAPTERS[library]().stream(vendor, REQUESTS[library], 5, never)[Symbol.asyncIterator]();
    const first = await iterator.next().catch((e) => e);
    assert.ok(first instanceof ProviderError && /malformed answer/.test(first.message), String(first));
    assert.equal(await iterator.next().catch((e) => e), first);
  });

  test(`${library}: leaving a routed stream early counts as served, and the provider serves the next request`, async () => {
    await server.set("vendor", "ok", { chunks: 2000 });
    const adapter = ADAPTERS[library]();
    const router = new Router([vendor], { transports: { vendor: adapter.complete }, streamTransports: { vendor: adapter.stream }, logger: quiet });
    const route = router.stream(REQUESTS[library]);
    let got = 0;
    for await (const _chunk of route) if (++got === 5) break;
    assert.equal(router.report().first_attempt_success, 1);
    await server.set("vendor", "ok", { chunks: 1 });
    assert.equal((await router.complete(REQUESTS[library])).provider, "vendor");
  });
}

// --- failures the fault provider cannot stage -----------------------------------------------

/** undici's shape of a failure: `TypeError: fetch failed` caused by an error with a code. */
const undici = (code, message = "fetch failed", extra = {}) => Object.assign(new TypeError(message), { cause: Object.assign(new Error(code), { code, ...extra }) });

test("an undici connect timeout is a timeout before dispatch; a reset, a timeout after it; a refusal, unavailable", () => {
  const connectTimeout = new openaiLibrary.APIConnectionTimeoutError();
  connectTimeout.cause = undici("UND_ERR_CONNECT_TIMEOUT");
  const timeout = openaiFailure(connectTimeout);
  assert.ok(timeout instanceof ProviderTimeout && !timeout.dispatched, String(timeout));
  const bare = openaiFailure(new openaiLibrary.APIConnectionTimeoutError());
  assert.ok(bare instanceof ProviderTimeout && bare.dispatched);
  const etimedout = openaiFailure(new openaiLibrary.APIConnectionError({ cause: undici("ETIMEDOUT", "fetch failed", { syscall: "connect" }) }));
  assert.ok(etimedout instanceof ProviderTimeout && !etimedout.dispatched);
  const dns = anthropicFailure(new anthropicLibrary.APIConnectionError({ cause: undici("ENOTFOUND") }));
  assert.ok(dns instanceof ProviderUnavailable);
  const tls = openaiFailure(new openaiLibrary.APIConnectionError({ cause: undici("ERR_TLS_CERT_ALTNAME_INVALID") }));
  assert.ok(tls instanceof ProviderUnavailable);
  const cut = openaiFailure(undici("UND_ERR_SOCKET", "terminated"));
  assert.ok(cut instanceof ProviderError && cut.status === null && cut.dispatched);
  const unexplained = anthropicFailure(new anthropicLibrary.APIConnectionError({ message: "Connection error." }));
  assert.ok(unexplained instanceof ProviderError && unexplained.status === null && unexplained.dispatched);
});

test("a programming error is no provider failure: the adapters leave it as it is", () => {
  assert.equal(openaiFailure(new TypeError("cannot read properties of undefined")), null);
  assert.equal(anthropicFailure(new RangeError("bad argument")), null);
});

const headers = (entries = {}) => new Headers(entries);

test("openai: an OpenAI-compatible server's words for the context length, Azure's content filter, retry-after-ms", () => {
  const words = openaiFailure(new openaiLibrary.BadRequestError(400, { message: "This model's maximum context length is 4096 tokens", type: "BadRequestError", code: null }, undefined, headers()));
  assert.ok(words instanceof ContextLengthExceeded && /context length exceeded/.test(words.message));
  const azure = openaiFailure(new openaiLibrary.BadRequestError(400, { message: "filtered", code: "content_filter" }, undefined, headers()));
  assert.ok(azure instanceof ContentPolicyRefusal);
  const other400 = openaiFailure(new openaiLibrary.BadRequestError(400, { message: "bad field", code: "invalid_value" }, undefined, headers()));
  assert.ok(other400 instanceof ProviderError && !(other400 instanceof ContextLengthExceeded) && other400.status === 400);
  const limited = openaiFailure(new openaiLibrary.RateLimitError(429, { message: "slow down" }, undefined, headers({ "retry-after-ms": "1500", "retry-after": "9" })));
  assert.equal(limited.retryAfterS, 1.5);
  const inStream = openaiFailure(new openaiLibrary.APIError(undefined, { message: "overloaded", type: "server_error" }, undefined, headers()));
  assert.ok(inStream instanceof ProviderError && inStream.status === null && /error in the stream: server_error: overloaded/.test(inStream.message));
});

test("anthropic: an error event stands for its type's status; credentials that cannot be loaded were never sent", () => {
  const event = (type) => new anthropicLibrary.APIError(undefined, { type: "error", error: { type, message: "mid-stream" } }, undefined, headers(), type);
  assert.equal(anthropicFailure(event("rate_limit_error")).status, 429);
  assert.equal(anthropicFailure(event("api_error")).status, 500);
  assert.equal(anthropicFailure(event("something_new")).status, null);
  const credentials = anthropicFailure(new anthropicLibrary.CredentialsError("no API key"));
  assert.ok(credentials instanceof ProviderError && !credentials.dispatched);
});
