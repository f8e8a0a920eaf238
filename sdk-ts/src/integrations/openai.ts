/**
 * Transports on the official `openai` library (npm; an optional peer dependency): chat
 * completions, whole or streamed, from OpenAI or any OpenAI-compatible server (`baseURL`).
 *
 * ```ts
 * import OpenAI from "openai";
 * import { OpenAIChat } from "chainclient/openai";
 *
 * const chat = new OpenAIChat(new OpenAI());
 * const router = new Router(client, { transports: { openai: chat.complete }, streamTransports: { openai: chat.stream } });
 * ```
 *
 * A request is the body of `chat.completions.create()` without `model` and `stream`, which
 * the adapter sets (a stream also gets `stream_options: {include_usage: true}` unless the
 * request sets it, so the receipt gets the usage). The client's own retries are off; the
 * attempt's timeout and signal go with each request. How the library's failures become the
 * router's errors (read in openai 7.60's `client.mjs`, `core/error.mjs` and
 * `core/streaming.mjs`), as the Python adapter maps them:
 *
 * - `APIError` with a status (a 4xx or 5xx): `ProviderError(status)`, its message naming the
 *   error's type and code, `retryAfterS` from `retry-after-ms` or `Retry-After`; a 400 whose
 *   code is `context_length_exceeded` (or whose words name the context length):
 *   `ContextLengthExceeded`; a 400 whose code is `content_policy_violation` (OpenAI) or
 *   `content_filter` (Azure OpenAI): `ContentPolicyRefusal`;
 * - `APIConnectionError`, `APIConnectionTimeoutError`, and the bare `TypeError: terminated`
 *   of a stream cut mid-body: by their undici cause (`networkFailure` in `./library.js`);
 *   the library's own timeout is `ProviderTimeout(true)` unless undici says the connection
 *   never opened;
 * - a body or an event that is not JSON (`SyntaxError`), an answer of the wrong shape:
 *   ProviderError `"malformed answer: ..."`, with no status;
 * - an error object inside the stream (the library throws an `APIError` with no status):
 *   `ProviderError(null)`;
 * - `finish_reason: "content_filter"` or a `refusal` from the model: `ContentPolicyRefusal`.
 */

import { APIConnectionError, APIConnectionTimeoutError, APIError, OpenAIError } from "openai";
import type OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";

import type { Step } from "../document.js";
import { ContentPolicyRefusal, ContextLengthExceeded, ProviderError, ProviderTimeout, TransportError } from "../errors.js";
import { Answer } from "../receipts.js";
import {
  LibraryTransport,
  StreamState,
  count,
  decodingFailure,
  describe,
  malformed,
  networkFailure,
  requestArguments,
  requestOptions,
  retryAfterS,
  text,
} from "./library.js";

// OpenAI-compatible servers (vLLM, llama.cpp) say it in words rather than with the code.
const CONTEXT_LENGTH_WORDS = ["maximum context length", "context length", "context window"];
// A 400 refusing the content: OpenAI's safety system, Azure OpenAI's content filter.
const CONTENT_POLICY_CODES = new Set(["content_policy_violation", "content_filter"]);

/** The router's error for what the openai library threw; null for anything that is not a
 * provider failure (a programming error: it is thrown as it is). */
export function providerFailure(error: unknown): TransportError | null {
  if (error instanceof TransportError) return error;
  if (error instanceof APIConnectionError) {
    // APIConnectionTimeoutError is one too: the library's timeout (the request was sent,
    // unless undici says the connection never opened).
    const network = networkFailure(error);
    if (network !== null && !(error instanceof APIConnectionTimeoutError && network instanceof ProviderError)) return network;
    if (error instanceof APIConnectionTimeoutError) return new ProviderTimeout(true, describe(error));
    return new ProviderError(null, true, `connection error (${describe(error.cause ?? error)})`);
  }
  if (error instanceof APIError && typeof error.status === "number") return statusError(error);
  if (error instanceof APIError) {
    // A chunk carrying {"error": ...} mid-stream: an APIError with no status; the provider
    // was answering, so the outcome is unknown.
    const labels = [error.type, error.code].filter((label) => typeof label === "string" && label).join(" ");
    const text = errorText(error);
    return new ProviderError(null, true, `error in the stream: ${labels ? `${labels}: ` : ""}${text}`);
  }
  const failure = decodingFailure(error) ?? networkFailure(error);
  if (failure !== null) return failure;
  if (error instanceof OpenAIError) return new ProviderError(null, true, describe(error));
  return null;
}

function errorText(error: APIError): string {
  const message = (error.error as { message?: unknown } | undefined)?.message;
  return typeof message === "string" && message ? message : error.message;
}

function statusError(error: APIError): TransportError {
  const status = error.status as number;
  const text = errorText(error);
  const type = typeof error.type === "string" ? error.type : "";
  const code = typeof error.code === "string" ? error.code : "";
  const label = type && code ? `${type} (${code})` : type || code || error.constructor.name;
  const message = `${label}: ${text}`;
  if (status === 400 && CONTENT_POLICY_CODES.has(code)) {
    return new ContentPolicyRefusal(`the provider refused the request on policy grounds (${message})`);
  }
  if (status === 400 && (code === "context_length_exceeded" || namesContextLength(text))) {
    return new ContextLengthExceeded(`context length exceeded: ${message}`);
  }
  return new ProviderError(status, true, message, { retryAfterS: retryAfterS(error.headers) });
}

function namesContextLength(text: string): boolean {
  const lowered = text.toLowerCase();
  return CONTEXT_LENGTH_WORDS.some((words) => lowered.includes(words));
}

interface Choice {
  finish_reason?: unknown;
  message?: { refusal?: unknown };
  delta?: { content?: unknown; refusal?: unknown; tool_calls?: { function?: { arguments?: unknown } }[]; function_call?: { arguments?: unknown } };
}

interface Usage {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
}


/** `completion` as the router's Answer; a refusal or a malformed answer throws. */
function answer(completion: unknown, step: Step): Answer {
  if (completion === null || typeof completion !== "object" || Symbol.asyncIterator in completion) {
    throw malformed(`expected a chat.completion, got ${describe(completion)}`);
  }
  // Read every field defensively: the library hands over the JSON it got, unvalidated.
  const { choices, model, usage } = completion as { choices?: unknown; model?: unknown; usage?: Usage | null };
  if (!Array.isArray(choices) || choices.length === 0) throw malformed("a chat.completion without choices");
  for (const choice of choices as Choice[]) {
    if (choice?.finish_reason === "content_filter") {
      throw new ContentPolicyRefusal("the provider's content filter stopped the answer (finish_reason content_filter)");
    }
    const refusal = choice?.message?.refusal;
    if (refusal) throw new ContentPolicyRefusal(`the model refused: ${String(refusal)}`);
    if (!choice?.finish_reason) throw malformed("a choice without a finish_reason");
  }
  return new Answer(completion, text(model) || step.model, count(usage?.prompt_tokens), count(usage?.completion_tokens));
}

/** What a chat completion stream has said so far. */
class ChatState implements StreamState<ChatCompletionChunk> {
  readonly terminal = "a chunk with a finish_reason";
  input_tokens: number | null = null;
  output_tokens: number | null = null;
  complete = false;

  constructor(public model_id: string) {}

  observe(chunk: ChatCompletionChunk): void {
    const { model, usage, choices } = chunk as { model?: unknown; usage?: Usage | null; choices?: unknown };
    if (text(model)) this.model_id = text(model);
    if (usage) {
      this.input_tokens = count(usage.prompt_tokens);
      this.output_tokens = count(usage.completion_tokens);
    }
    for (const choice of (Array.isArray(choices) ? choices : []) as Choice[]) {
      const refusal = choice?.delta?.refusal;
      if (refusal) throw new ContentPolicyRefusal(`the model refused: ${String(refusal)}`);
      if (choice?.finish_reason === "content_filter") {
        throw new ContentPolicyRefusal("the provider's content filter stopped the stream (finish_reason content_filter)");
      }
      if (choice?.finish_reason) this.complete = true;
    }
  }

  text(chunk: ChatCompletionChunk): string {
    const choices = (chunk as { choices?: unknown }).choices;
    let parts = "";
    for (const choice of (Array.isArray(choices) ? choices : []) as Choice[]) {
      const delta = choice?.delta;
      parts += text(delta?.content);
      for (const call of Array.isArray(delta?.tool_calls) ? delta.tool_calls : []) parts += text(call?.function?.arguments);
      parts += text(delta?.function_call?.arguments);
    }
    return parts;
  }
}

/**
 * Chat completions on an `OpenAI` client (OpenAI's API, Azure OpenAI, or an OpenAI-compatible
 * server at `baseURL`): `chat.complete` for `transports`, `chat.stream` for
 * `streamTransports`. The stream yields the library's `ChatCompletionChunk` objects (the usage
 * chunk too, whose `text()` is empty).
 */
export class OpenAIChat extends LibraryTransport<OpenAI, ChatCompletionChunk> {
  protected create(body: Record<string, unknown>, options: ReturnType<typeof requestOptions>): Promise<unknown> {
    return this.client.chat.completions.create(body as never, options);
  }

  protected failure(error: unknown): TransportError | null {
    return providerFailure(error);
  }

  protected answer(response: unknown, step: Step): Answer {
    return answer(response, step);
  }

  protected streamState(step: Step): StreamState<ChatCompletionChunk> {
    return new ChatState(step.model);
  }

  protected override streamArguments(step: Step, request: unknown): Record<string, unknown> {
    const body = requestArguments(request, { model: step.model, stream: true });
    // Usage arrives in a last chunk only when asked for; the receipt wants it.
    if (!("stream_options" in body)) body.stream_options = { include_usage: true };
    return body;
  }
}
