/**
 * Transports on the official `@anthropic-ai/sdk` library (npm; an optional peer dependency):
 * messages, whole or streamed.
 *
 * ```ts
 * import Anthropic from "@anthropic-ai/sdk";
 * import { AnthropicMessages } from "chainclient/anthropic";
 *
 * const messages = new AnthropicMessages(new Anthropic());
 * const router = new Router(client, { transports: { anthropic: messages.complete }, streamTransports: { anthropic: messages.stream } });
 * ```
 *
 * A request is the body of `messages.create()` without `model` and `stream`, which the
 * adapter sets. The client's own retries are off; the attempt's timeout and signal go with
 * each request. How the library's failures become the router's errors (read in
 * @anthropic-ai/sdk 1.17's `client.mjs`, `core/error.mjs` and `core/streaming.mjs`), as the
 * Python adapter maps them:
 *
 * - `APIError` with a status (a 4xx or 5xx, 529 `OverloadedError` included): `ProviderError`
 *   with that status, its message naming the error's type, `retryAfterS` from
 *   `Retry-After`; a 400 "prompt is too long": `ContextLengthExceeded`; a 400 "blocked by
 *   content filtering policy": `ContentPolicyRefusal`;
 * - an `error` event mid-stream: the library throws an `APIError` with no status, so the
 *   status is the one the error's type implies (`overloaded_error` 529, `api_error` 500,
 *   `rate_limit_error` 429, ...; null for a type it does not know);
 * - `APIConnectionError` and `APIConnectionTimeoutError` (before the headers, and mid-body:
 *   this library wraps a stream's read error too): by their undici cause (`networkFailure`
 *   in `./library.js`); the library's own timeout is `ProviderTimeout(true)`;
 * - a body or an event that is not JSON (`SyntaxError`), an answer of the wrong shape:
 *   ProviderError `"malformed answer: ..."`, with no status;
 * - `CredentialsError` (no credentials to send): `ProviderError(null)`, not dispatched;
 * - `stop_reason: "refusal"`: `ContentPolicyRefusal`.
 */

import { APIConnectionError, APIConnectionTimeoutError, APIError, AnthropicError, CredentialsError } from "@anthropic-ai/sdk";
import type Anthropic from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";

import type { Step } from "../document.js";
import { ContentPolicyRefusal, ContextLengthExceeded, ProviderError, ProviderTimeout, TransportError } from "../errors.js";
import { Answer } from "../receipts.js";
import { LibraryTransport, StreamState, count, decodingFailure, describe, malformed, networkFailure, requestOptions, retryAfterS, text } from "./library.js";

/** The HTTP status each of Anthropic's documented error types comes with: what an `error`
 * event in a stream (whose own status was 200) stands for. */
export const ERROR_TYPE_STATUSES: Readonly<Record<string, number>> = Object.freeze({
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
});

/** The router's error for what the Anthropic library threw; null for anything that is not a
 * provider failure (a programming error: it is thrown as it is). */
export function providerFailure(error: unknown): TransportError | null {
  if (error instanceof TransportError) return error;
  if (error instanceof APIConnectionError) {
    // APIConnectionTimeoutError is one too. The library wraps *any* error from sending in
    // APIConnectionError; without an undici cause nobody knows whether the request left.
    const network = networkFailure(error);
    if (network !== null && !(error instanceof APIConnectionTimeoutError && network instanceof ProviderError)) return network;
    if (error instanceof APIConnectionTimeoutError) return new ProviderTimeout(true, describe(error));
    return new ProviderError(null, true, `connection error (${describe(error.cause ?? error)})`);
  }
  if (error instanceof APIError) return statusError(error);
  const failure = decodingFailure(error) ?? networkFailure(error);
  if (failure !== null) return failure;
  // Thrown while building the request's credentials: nothing was sent.
  if (error instanceof CredentialsError) return new ProviderError(null, false, describe(error));
  if (error instanceof AnthropicError) return new ProviderError(null, true, describe(error));
  return null;
}

function statusError(error: APIError): TransportError {
  const kind = typeof error.type === "string" ? error.type : "";
  let status: number | null = typeof error.status === "number" ? error.status : null;
  let headers = error.headers;
  if (status === null || status < 400) {
    // An error event inside a stream that started 200: the event's type says which.
    status = ERROR_TYPE_STATUSES[kind] ?? null;
    headers = undefined;
  }
  const text = typeof error.apiMessage === "string" && error.apiMessage ? error.apiMessage : error.message;
  const message = `${kind || error.constructor.name}: ${text}`;
  const lowered = text.toLowerCase();
  if (status === 400 && lowered.includes("content filtering policy")) {
    return new ContentPolicyRefusal(`the provider refused the request on policy grounds (${message})`);
  }
  if (status === 400 && lowered.includes("prompt is too long")) return new ContextLengthExceeded(`context length exceeded: ${message}`);
  return new ProviderError(status, true, message, { retryAfterS: retryAfterS(headers) });
}

interface Usage {
  input_tokens?: unknown;
  output_tokens?: unknown;
}


/** `message` as the router's Answer; a refusal or a malformed answer throws. */
function answer(message: unknown, step: Step): Answer {
  if (message === null || typeof message !== "object" || Symbol.asyncIterator in message) {
    throw malformed(`expected a message, got ${describe(message)}`);
  }
  // Read every field defensively: the library hands over the JSON it got, unvalidated.
  const { stop_reason, model, usage } = message as { stop_reason?: unknown; model?: unknown; usage?: Usage | null };
  if (stop_reason === "refusal") throw new ContentPolicyRefusal("the model refused on policy grounds (stop_reason refusal)");
  if (!stop_reason) throw malformed("a message without a stop_reason");
  return new Answer(message, text(model) || step.model, count(usage?.input_tokens), count(usage?.output_tokens));
}

/** What a message stream has said so far (the library drops `ping` events itself). */
class MessageState implements StreamState<RawMessageStreamEvent> {
  readonly terminal = "message_stop";
  input_tokens: number | null = null;
  output_tokens: number | null = null;
  complete = false;

  constructor(public model_id: string) {}

  observe(event: RawMessageStreamEvent): void {
    const said = event as { type?: unknown; message?: { model?: unknown; usage?: Usage | null }; delta?: { stop_reason?: unknown }; usage?: Usage | null };
    if (said.type === "message_start") {
      this.model_id = text(said.message?.model) || this.model_id;
      this.input_tokens = count(said.message?.usage?.input_tokens);
      this.output_tokens = count(said.message?.usage?.output_tokens);
    } else if (said.type === "message_delta") {
      if (said.delta?.stop_reason === "refusal") throw new ContentPolicyRefusal("the model refused on policy grounds (stop_reason refusal)");
      // Cumulative counts: the last message_delta has the totals.
      const output = count(said.usage?.output_tokens);
      if (output !== null) this.output_tokens = output;
      const input = count(said.usage?.input_tokens);
      if (input !== null) this.input_tokens = input;
    } else if (said.type === "message_stop") {
      this.complete = true;
    }
  }

  text(event: RawMessageStreamEvent): string {
    const said = event as { type?: unknown; delta?: Record<string, unknown> };
    if (said.type !== "content_block_delta") return "";
    for (const field of ["text", "partial_json", "thinking"]) {
      const value = said.delta?.[field];
      if (typeof value === "string") return value;
    }
    return "";
  }
}

/**
 * Messages on an `Anthropic` client: `messages.complete` for `transports`, `messages.stream`
 * for `streamTransports`. The stream yields the library's raw stream events
 * (`message_start`, `content_block_delta`, ...; never `ping`, which it drops).
 */
export class AnthropicMessages extends LibraryTransport<Anthropic, RawMessageStreamEvent> {
  protected create(body: Record<string, unknown>, options: ReturnType<typeof requestOptions>): Promise<unknown> {
    return this.client.messages.create(body as never, options);
  }

  protected failure(error: unknown): TransportError | null {
    return providerFailure(error);
  }

  protected answer(response: unknown, step: Step): Answer {
    return answer(response, step);
  }

  protected streamState(step: Step): StreamState<RawMessageStreamEvent> {
    return new MessageState(step.model);
  }
}
