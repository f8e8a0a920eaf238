// Streaming through the TypeScript Router next to the raw npm library, in one run, on loopback.
//
// Both sides read the same answers from the Python SDK's fault provider (in a process of its
// own, driven by `python -m chainclient.fault_serve`), with the official npm library: the raw
// side iterates `client.chat.completions.create({stream: true})` (`client.messages.create`)
// itself; the routed side iterates `Router.stream` over the library's adapter
// (`chainclient/openai`, `chainclient/anthropic`), which adds the commit point, the bounds
// and the receipt. Runs alternate raw/routed so the machine's noise falls on both alike, as
// bench/stream_overhead.py does for Python.
//
// Figures, each with its spread:
// - `rate_ratio`: chunks per second routed / raw for streams of --chunks chunks: the median
//   over --repeats adjacent raw/routed pairs of their ratio (the quartiles of those ratios);
//   `wire_per_chunk_us`: the routed side's extra time per chunk, the same way.
// - `ttfc_extra_ms`: the time to the first chunk with content, routed minus raw, at p50 and
//   p99, over --streams short streams each.
// - `per_chunk_us`: the router's own cost per chunk, from an in-memory stream of 200,000
//   chunks read directly and through Router.stream (no socket, no network noise; best of 7).
//
// Run from the repository root after `cd sdk-ts && npm ci && npm run build`:
//   node bench/ts_stream_overhead.mjs [--chunks 2000] [--repeats 201] [--streams 1000]
import { parseArgs } from "node:util";

import Anthropic from "../sdk-ts/node_modules/@anthropic-ai/sdk/index.mjs";
import OpenAI from "../sdk-ts/node_modules/openai/index.mjs";

import { Router, step } from "../sdk-ts/dist/index.js";
import { AnthropicMessages } from "../sdk-ts/dist/integrations/anthropic.js";
import { OpenAIChat } from "../sdk-ts/dist/integrations/openai.js";
import { FaultServer } from "../sdk-ts/test-support/fault_server.mjs";

const { values } = parseArgs({
  options: { chunks: { type: "string", default: "2000" }, repeats: { type: "string", default: "201" }, streams: { type: "string", default: "1000" } },
});
const CHUNKS = Number(values.chunks);
const REPEATS = Number(values.repeats);
const STREAMS = Number(values.streams);
const MODEL = "bench-model";
const MESSAGES = [{ role: "user", content: "hello" }];
const TIMEOUT_MS = 60_000;
const quiet = { warn() {}, error: (m) => console.error(m) };

const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (sorted.length - 1) * q;
  const low = Math.floor(at);
  return sorted[low] + (sorted[Math.ceil(at)] - sorted[low]) * (at - low);
};
const median = (values) => quantile(values, 0.5);
const spread = (values, digits) => `${median(values).toFixed(digits)} (quartiles ${quantile(values, 0.25).toFixed(digits)}..${quantile(values, 0.75).toFixed(digits)}, n=${values.length})`;

async function timed(read) {
  const started = performance.now();
  await read();
  return (performance.now() - started) / 1000;
}

async function count(stream) {
  let n = 0;
  for await (const _chunk of stream) n += 1;
  return n;
}

/** Whether a raw library chunk carries text: what the caller waits for. */
function hasContent(chunk) {
  if (Array.isArray(chunk.choices)) return Boolean(chunk.choices[0]?.delta?.content);
  return chunk.type === "content_block_delta";
}

/** Seconds from opening a stream to holding its first chunk with content; the rest is read. */
async function firstContent(open) {
  const started = performance.now();
  const iterator = (await open())[Symbol.asyncIterator]();
  let elapsed = null;
  for (;;) {
    const next = await iterator.next();
    if (next.done) break;
    if (elapsed === null && hasContent(next.value)) elapsed = (performance.now() - started) / 1000;
  }
  return elapsed;
}

/** Per library: how the raw side opens a stream (what the adapter sends), the router over the adapter, its request. */
function sides(where) {
  const openai = new OpenAI({ baseURL: where.openai_base_url, apiKey: "bench", maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: where.anthropic_base_url, apiKey: "bench", maxRetries: 0 });
  const s = step("vendor", MODEL, TIMEOUT_MS);
  const routed = (adapter) => new Router([s], { transports: { vendor: adapter.complete }, streamTransports: { vendor: adapter.stream }, logger: quiet });
  return {
    openai: {
      raw: () => openai.chat.completions.create({ model: MODEL, messages: MESSAGES, stream: true, stream_options: { include_usage: true } }, { timeout: TIMEOUT_MS }),
      router: routed(new OpenAIChat(openai)),
      request: { messages: MESSAGES },
    },
    anthropic: {
      raw: () => anthropic.messages.create({ model: MODEL, max_tokens: 64, messages: MESSAGES, stream: true }, { timeout: TIMEOUT_MS }),
      router: routed(new AnthropicMessages(anthropic)),
      request: { messages: MESSAGES, max_tokens: 64 },
    },
  };
}

async function memoryPerChunkUs() {
  const n = 200_000;
  async function* memory() {
    for (let i = 0; i < n; i++) yield "x";
  }
  const router = new Router([step("memory", "m", TIMEOUT_MS)], { transports: {}, streamTransports: { memory: () => memory() }, logger: quiet });
  const direct = [];
  const routed = [];
  for (let i = 0; i < 7; i++) {
    direct.push(await timed(() => count(memory())));
    routed.push(await timed(() => count(router.stream("x"))));
  }
  return ((Math.min(...routed) - Math.min(...direct)) / n) * 1e6;
}

const server = await FaultServer.start(["long", "short"]);
try {
  await server.set("long", "ok", { chunks: CHUNKS });
  await server.set("short", "ok", { chunks: 3 });
  const lines = [];
  const say = (key, value) => lines.push(`${key.padEnd(28)} ${value}`);
  say("per_chunk_us", `${(await memoryPerChunkUs()).toFixed(3)} (in memory, best of 7)`);
  for (const [name, side] of Object.entries(sides(server.providers.long))) {
    // Warm both paths (connections, JIT) before measuring.
    for (let i = 0; i < 3; i++) {
      await count(await side.raw());
      await count(side.router.stream(side.request));
    }
    const ratios = [];
    const extra = [];
    const readRaw = () => timed(async () => count(await side.raw()));
    const readRouted = () => timed(() => count(side.router.stream(side.request)));
    for (let i = 0; i < REPEATS; i++) {
      // Which side goes first alternates too: the second run of a pair pays for the garbage
      // the first left, and a side always second would be charged for both.
      let raw, routed;
      if (i % 2 === 0) {
        raw = await readRaw();
        routed = await readRouted();
      } else {
        routed = await readRouted();
        raw = await readRaw();
      }
      ratios.push(raw / routed);
      extra.push(((routed - raw) / CHUNKS) * 1e6);
    }
    say(`${name}_rate_ratio`, spread(ratios, 3));
    say(`${name}_wire_per_chunk_us`, spread(extra, 3));
  }
  for (const [name, side] of Object.entries(sides(server.providers.short))) {
    const raw = [];
    const routed = [];
    for (let i = 0; i < STREAMS; i++) {
      raw.push(await firstContent(side.raw));
      routed.push(await firstContent(async () => side.router.stream(side.request)));
    }
    const ms = (values, q) => quantile(values, q) * 1000;
    say(`${name}_ttfc_raw_ms`, `p50 ${ms(raw, 0.5).toFixed(3)}, p99 ${ms(raw, 0.99).toFixed(3)}`);
    say(`${name}_ttfc_extra_ms`, `p50 ${(ms(routed, 0.5) - ms(raw, 0.5)).toFixed(3)}, p99 ${(ms(routed, 0.99) - ms(raw, 0.99)).toFixed(3)}`);
  }
  console.log(`node ${process.version}, ${CHUNKS} chunks x ${REPEATS} pairs, ${STREAMS} short streams`);
  for (const line of lines) console.log(line);
} finally {
  await server.close();
}
