/**
 * What a transport throws to say how a provider call went, and what a request ends with.
 * The names, and what the router does with each, are the Python SDK's (its README's
 * failure table); every routing error carries the request's receipt.
 */

import type { Receipt } from "./receipts.js";

export class ChainClientError extends Error {
  override name = "ChainClientError";
}

/** A transport's failure: the router classifies it. */
export class TransportError extends ChainClientError {
  override name = "TransportError";
}

/**
 * An HTTP-level failure: `status` (null: no status came back, the connection dropped after
 * sending), whether the request was sent, and the provider's `Retry-After` in seconds (its
 * breaker opens that long).
 */
export class ProviderError extends TransportError {
  override name = "ProviderError";
  readonly retryAfterS: number | null;
  constructor(
    readonly status: number | null,
    readonly dispatched: boolean = true,
    readonly detail = "",
    options: { retryAfterS?: number | null } = {},
  ) {
    const label = status === null ? "no HTTP status" : `HTTP ${status}`;
    super(detail ? `${label}: ${detail}` : label);
    this.retryAfterS = options.retryAfterS ?? null;
  }
}

/**
 * A 400 saying the request is over the model's context window. Unlike other rejections it
 * is not the request's fault everywhere: a step with a larger window may serve it, so the
 * router goes on, skipping the steps whose known window is no larger.
 */
export class ContextLengthExceeded extends ProviderError {
  override name = "ContextLengthExceeded";
  constructor(detail = "context length exceeded", options: { retryAfterS?: number | null } = {}) {
    super(400, true, detail, options);
  }
}

/** The call ran out of its time; `dispatched` (the cautious default): the provider may have acted. */
export class ProviderTimeout extends TransportError {
  override name = "ProviderTimeout";
  constructor(
    readonly dispatched = true,
    readonly detail = "",
  ) {
    const where = dispatched ? "after dispatch" : "before dispatch";
    super(detail ? `timed out ${where}: ${detail}` : `timed out ${where}`);
  }
}

/** The connection failed before the request was sent (refused, DNS, TLS handshake). */
export class ProviderUnavailable extends TransportError {
  override name = "ProviderUnavailable";
  readonly dispatched = false;
  constructor(detail = "") {
    super(detail || "provider unavailable (nothing was sent)");
  }
}

/** The provider refused the content on policy grounds. */
export class ContentPolicyRefusal extends TransportError {
  override name = "ContentPolicyRefusal";
  constructor(detail = "") {
    super(detail || "refused by the provider's content policy");
  }
}

/** How a request ended without an answer; `receipt` tells every attempt. */
export class RoutingError extends ChainClientError {
  override name = "RoutingError";
  constructor(
    readonly headline: string,
    readonly receipt: Receipt,
  ) {
    super(`${headline}\n${receipt.toString()}`);
  }

  get attempts() {
    return this.receipt.attempts;
  }
}

/**
 * 400/422: the request itself was rejected; another provider would reject it too. Also the
 * end of a walk whose last attempt was `ContextLengthExceeded` with no larger window left.
 */
export class RequestRejected extends RoutingError {
  override name = "RequestRejected";
  constructor(headline: string, receipt: Receipt, readonly status: number | null) {
    super(headline, receipt);
  }
}

export class ContentPolicyRejected extends RequestRejected {
  override name = "ContentPolicyRejected";
}

export class AllProvidersFailed extends RoutingError {
  override name = "AllProvidersFailed";
}

export class DeadlineExceeded extends RoutingError {
  override name = "DeadlineExceeded";
  constructor(headline: string, receipt: Receipt, readonly deadlineS: number) {
    super(headline, receipt);
  }
}

/** No step may serve this request (its contract, breakers, `allowFallback`): a refusal, not an outage. */
export class NoEligibleRoute extends RoutingError {
  override name = "NoEligibleRoute";
  get reasons(): Record<string, string> {
    return Object.fromEntries(this.receipt.refused.map(([s, why]) => [`${s.provider}/${s.model}`, why]));
  }
}

/** The provider may have acted on a request with side effects: nothing else was tried. */
export class OutcomeUnknown extends RoutingError {
  override name = "OutcomeUnknown";
}

/** A stream broke after chunks reached the caller: not a success, and no fallback. */
export class StreamInterrupted extends RoutingError {
  override name = "StreamInterrupted";
  constructor(
    headline: string,
    receipt: Receipt,
    readonly chunks: number,
    readonly provider: string,
    readonly model: string,
  ) {
    super(headline, receipt);
  }
}

/** The answer failed `verify` on a request with side effects (the provider acted). */
export class VerificationFailed extends RoutingError {
  override name = "VerificationFailed";
}
