/**
 * What the adapters on the vendors' libraries share (`chainclient/openai`,
 * `chainclient/anthropic`): a network failure in the router's terms, a stream held to the
 * router's contract, and the call itself with the library's retries off and the attempt's
 * timeout and signal passed on. Written once; an adapter says only what differs (its call,
 * its status errors, its answer, what its stream's chunks say).
 *
 * Both libraries send with Node's `fetch` (undici). A network failure reaches the caller
 * wrapped in the library's `APIConnectionError` (`APIConnectionTimeoutError` for the
 * library's own timeout), or bare mid-stream (OpenAI lets a stream's read error out as it
 * is), with undici's error at the end of the `cause` chain: `TypeError: fetch failed`
 * (before the headers) or `TypeError: terminated` (mid-body), caused by an error with a
 * `code`. `networkFailure` reads that code for what it means for dispatch:
 *
 * - `ECONNREFUSED`, DNS (`ENOTFOUND`, `EAI_AGAIN`), unreachable, a TLS certificate or
 *   handshake error: the connection never opened, nothing was sent (`ProviderUnavailable`);
 * - `UND_ERR_CONNECT_TIMEOUT`, or `ETIMEDOUT` while connecting: no connection within the
 *   timeout, nothing was sent (`ProviderTimeout(false)`);
 * - any other timeout (the headers, the body): the request was sent (`ProviderTimeout(true)`);
 * - `ECONNRESET`, `EPIPE`, `UND_ERR_SOCKET` ("other side closed"), ...: the connection broke
 *   after the request was sent (`ProviderError(null)`).
 *
 * The router aborts an attempt's `signal` when its time is up; the libraries then throw
 * `APIUserAbortError` (or the `AbortError` itself, or end a stream as if it were complete).
 * Any of those, once the signal is aborted, is the timeout the router expects
 * (`ProviderTimeout(true)`), never a user's abort and never a success.
 */

import { retryAfterSeconds } from "../client.js";
import { ProviderError, ProviderTimeout, ProviderUnavailable, TransportError } from "../errors.js";
import type { Step } from "../document.js";
import { Answer } from "../receipts.js";
import type { StreamTransport, Transport } from "../router.js";

/** A library's mapping: the router's error for what the library threw, or null when it is
 * not a provider failure (a programming error, which is thrown as it is). */
export type Failure = (error: unknown) => TransportError | null;

const NOT_CONNECTED = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "UND_ERR_CONNECT"]);
const CONNECT_TIMEOUTS = new Set(["UND_ERR_CONNECT_TIMEOUT"]);
const SENT_TIMEOUTS = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);
// A certificate that does not verify: the handshake failed before anything was sent.
const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_)/;

/** `error` and its causes, outermost first (a cycle is cut). */
export function causes(error: unknown): unknown[] {
  const chain: unknown[] = [];
  let current = error;
  while (current !== undefined && current !== null && !chain.includes(current) && chain.length < 16) {
    chain.push(current);
    current = (current as { cause?: unknown }).cause;
  }
  return chain;
}

/** What the error says of itself: its class and message. */
export function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const name = error.constructor?.name && error.constructor.name !== "Error" ? error.constructor.name : error.name;
  return error.message ? `${name}: ${error.message}` : name;
}

/** The router's error for an undici failure found in `error`'s causes; null if there is none. */
export function networkFailure(error: unknown): TransportError | null {
  for (const cause of causes(error)) {
    const { code, syscall } = (cause ?? {}) as { code?: unknown; syscall?: unknown };
    if (typeof code !== "string") continue;
    const detail = `${code}: ${describe(cause)}`;
    if (NOT_CONNECTED.has(code) || TLS_CODES.test(code)) return new ProviderUnavailable(`could not connect (${detail})`);
    if (CONNECT_TIMEOUTS.has(code) || (code === "ETIMEDOUT" && syscall === "connect")) {
      return new ProviderTimeout(false, `no connection within the timeout (${detail})`);
    }
    if (SENT_TIMEOUTS.has(code) || code === "ETIMEDOUT") return new ProviderTimeout(true, detail);
    if (code.startsWith("E") || code.startsWith("UND_ERR_")) {
      return new ProviderError(null, true, `connection broke after the request was sent (${detail})`);
    }
  }
  return null;
}

/** A field the library handed over unvalidated: a number of tokens, else null. */
export const count = (value: unknown): number | null => (typeof value === "number" ? value : null);

/** A field the library handed over unvalidated: a string, else empty. */
export const text = (value: unknown): string => (typeof value === "string" ? value : "");

/** An answer that is not what the API documents: the provider was reached, and what it did is unknown. */
export function malformed(detail: string): ProviderError {
  return new ProviderError(null, true, `malformed answer: ${detail}`);
}

/** A body or an event that is not JSON (the libraries call `JSON.parse` unguarded). */
export function decodingFailure(error: unknown): TransportError | null {
  return error instanceof SyntaxError ? malformed(describe(error)) : null;
}

/** A stream that ended cleanly but early: never a success. */
export function truncated(terminal: string): ProviderError {
  return new ProviderError(null, true, `the stream ended without ${terminal}: the answer is truncated`);
}

/**
 * How long the provider asked us to wait: OpenAI's `retry-after-ms` (which its library
 * prefers, so do we), else `Retry-After` in seconds or as an HTTP date; null when absent or
 * unreadable.
 */
export function retryAfterS(headers: { get(name: string): string | null } | undefined | null): number | null {
  if (!headers || typeof headers.get !== "function") return null;
  const milliseconds = headers.get("retry-after-ms");
  if (milliseconds !== null && /^\s*\d+(\.\d+)?\s*$/.test(milliseconds)) return Number(milliseconds) / 1000;
  return retryAfterSeconds(headers.get("retry-after"));
}

/** The body fields an adapter always sets itself, from the step and the router. */
const ADAPTER_FIELDS = ["model", "stream"];

/**
 * `request` (the library's `create()` body) with the fields the adapter sets; a request
 * that sets `model` or `stream` (or another of those) itself is a programming error
 * (TypeError).
 */
export function requestArguments(request: unknown, setHere: Record<string, unknown>): Record<string, unknown> {
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    throw new TypeError("a request is an object: the library's create() body without model and stream");
  }
  const clash = [...new Set([...ADAPTER_FIELDS, ...Object.keys(setHere)])].filter((name) => name in request).sort();
  if (clash.length) throw new TypeError(`the adapter sets ${clash.join(", ")} itself (from the step and the router): leave it out`);
  return { ...(request as Record<string, unknown>), ...setHere };
}

/** What the router's abort of an attempt becomes: the timeout it expects. */
function abortedByRouter(error: unknown): ProviderTimeout {
  return new ProviderTimeout(true, `the attempt's time ran out and the router aborted it (${describe(error)})`);
}

/** The router's error for what the library threw (`error` itself when `failure` does not map it). */
export function translated(error: unknown, failure: Failure, signal: AbortSignal): unknown {
  if (error instanceof TransportError) return error;
  if (signal.aborted) return abortedByRouter(error);
  return failure(error) ?? error;
}

/**
 * What a vendor's stream learns from its chunks: the model, the usage, whether the terminal
 * event came; `observe` throws ContentPolicyRefusal on a content filter.
 */
export interface StreamState<Chunk> {
  model_id: string;
  input_tokens: number | null;
  output_tokens: number | null;
  complete: boolean;
  /** The terminal event, as the error for a truncated stream names it. */
  readonly terminal: string;
  observe(chunk: Chunk): void;
  text(chunk: Chunk): string;
}

/** The library's stream, as far as the adapters use it. */
export interface LibraryStreamLike<Chunk> extends AsyncIterable<Chunk> {
  controller: AbortController;
}

/**
 * A vendor library's stream for `Router.stream`: it yields the library's own chunk objects
 * and carries `model_id`, `input_tokens` and `output_tokens` (read once the stream ended) and
 * `text(chunk)` (the router's measure of content). It opens the stream on the first
 * `next()` (the headers, within the attempt's timeout), and throws the router's errors for a
 * break, a malformed chunk, an error event or a content filter, and a ProviderError when the
 * stream ends without its terminal event. A failure is thrown again by any later `next()`;
 * `return()` closes the connection.
 */
export class ChunkStream<Chunk> implements AsyncIterable<Chunk>, AsyncIterator<Chunk> {
  private stream: LibraryStreamLike<Chunk> | null = null;
  private chunks: AsyncIterator<Chunk> | null = null;
  private raised: unknown = null;
  private ended = false;

  constructor(
    private readonly open: () => Promise<unknown>,
    private readonly state: StreamState<Chunk>,
    private readonly failure: Failure,
    private readonly signal: AbortSignal,
  ) {}

  /** The model the provider says is serving (the requested one until it says). */
  get model_id(): string {
    return this.state.model_id;
  }

  get input_tokens(): number | null {
    return this.state.input_tokens;
  }

  get output_tokens(): number | null {
    return this.state.output_tokens;
  }

  /** The content `chunk` carries; empty for role, start and usage chunks. */
  text(chunk: Chunk): string {
    return this.state.text(chunk);
  }

  [Symbol.asyncIterator](): AsyncIterator<Chunk> {
    return this;
  }

  next(): Promise<IteratorResult<Chunk>> {
    if (this.raised !== null) return Promise.reject(this.raised);
    if (this.ended) return Promise.resolve({ done: true, value: undefined });
    // Not an async method: every chunk would pay for its promise turns.
    if (this.chunks === null) return this.first();
    return this.chunks.next().then(this.took, this.broke);
  }

  /** Open the stream (the headers, within the attempt's timeout), then its first chunk. */
  private async first(): Promise<IteratorResult<Chunk>> {
    let stream: unknown;
    try {
      stream = await this.open();
    } catch (error) {
      return this.broke(error);
    }
    if (!isLibraryStream<Chunk>(stream)) throw this.fail(malformed(`expected a stream, got ${describe(stream)}`));
    this.stream = stream;
    this.chunks = stream[Symbol.asyncIterator]();
    return this.chunks.next().then(this.took, this.broke);
  }

  private readonly took = (next: IteratorResult<Chunk>): IteratorResult<Chunk> => {
    if (next.done) {
      // The libraries end a stream quietly when its signal is aborted: that is the router's
      // timeout, and a stream without its terminal event is truncated; neither is a success.
      if (this.signal.aborted) throw this.fail(abortedByRouter("the stream ended"));
      if (!this.state.complete) throw this.fail(truncated(this.state.terminal));
      this.ended = true;
      return next;
    }
    try {
      this.state.observe(next.value);
    } catch (error) {
      throw this.fail(error);
    }
    return next;
  };

  private readonly broke = (error: unknown): never => {
    throw this.fail(translated(error, this.failure, this.signal));
  };

  /** Close the connection (the router calls it when the caller leaves a stream early). */
  async return(): Promise<IteratorResult<Chunk>> {
    const finished = this.ended && this.raised === null;
    this.ended = true;
    if (!finished) this.stream?.controller.abort();
    await this.chunks?.return?.().catch(() => undefined);
    return { done: true, value: undefined };
  }

  private fail(error: unknown): unknown {
    this.raised = error;
    this.ended = true;
    // The failure is what the caller needs to hear about: the connection goes, quietly.
    this.stream?.controller.abort();
    return error;
  }
}

function isLibraryStream<Chunk>(value: unknown): value is LibraryStreamLike<Chunk> {
  const stream = value as Partial<LibraryStreamLike<Chunk>> | null;
  return typeof stream?.[Symbol.asyncIterator] === "function" && stream.controller instanceof AbortController;
}

/** The per-request options both libraries take: the attempt's timeout (ms) and signal, no retries. */
export function requestOptions(timeoutS: number, signal: AbortSignal): { timeout: number; signal: AbortSignal; maxRetries: 0 } {
  return { timeout: Math.max(1, Math.ceil(timeoutS * 1000)), signal, maxRetries: 0 };
}

/**
 * What every adapter does, written once: `complete` (a `Transport`) and `stream` (a
 * `StreamTransport`), both bound, for `Router`'s `transports` and `streamTransports`. A
 * library's adapter says what differs: its call, its failures, its answer, its stream state.
 */
export abstract class LibraryTransport<Client, Chunk> {
  readonly client: Client;

  /** `(step, request, timeoutS, signal) => Promise<Answer>`: a whole answer. */
  readonly complete: Transport = async (step, request, timeoutS, signal) => {
    const body = requestArguments(request, { model: step.model });
    let response: unknown;
    try {
      response = await this.create(body, requestOptions(timeoutS, signal));
    } catch (error) {
      throw translated(error, (e) => this.failure(e), signal);
    }
    return this.answer(response, step);
  };

  /** `(step, request, timeoutS, signal) => ChunkStream`: the library's chunks, for `Router.stream`. */
  readonly stream: StreamTransport = (step, request, timeoutS, signal) => {
    const body = this.streamArguments(step, request);
    return new ChunkStream<Chunk>(() => this.create(body, requestOptions(timeoutS, signal)), this.streamState(step), (e) => this.failure(e), signal);
  };

  /** `client` with its own retries off: the router decides what is tried next, and a retry
   * inside the library would spend the attempt's time on the provider that just failed. */
  constructor(client: Client & { withOptions(options: { maxRetries: number }): Client }) {
    this.client = client.withOptions({ maxRetries: 0 });
  }

  /** The library's create() with `body` and the per-request `options`. */
  protected abstract create(body: Record<string, unknown>, options: ReturnType<typeof requestOptions>): Promise<unknown>;

  /** The router's error for what the library threw; null for a programming error. */
  protected abstract failure(error: unknown): TransportError | null;

  /** `response` as the router's Answer; a refusal or a malformed answer throws. */
  protected abstract answer(response: unknown, step: Step): Answer;

  protected abstract streamState(step: Step): StreamState<Chunk>;

  protected streamArguments(step: Step, request: unknown): Record<string, unknown> {
    return requestArguments(request, { model: step.model, stream: true });
  }
}
