/** What a routed request leaves behind: its attempts, its receipt, its result, its alerts. */

import type { Marking, Step } from "./document.js";
import { g, pyRepr } from "./wire.js";

export type DispatchState = "not_dispatched" | "dispatched_known" | "dispatched_unknown";
export type Outcome = "ok" | "failed" | "rejected" | "refused" | "timeout" | "unavailable" | "verify_failed" | "error" | "interrupted";

/** One try of one step for one request: a line of the recovery receipt. */
export interface Attempt {
  readonly task_id: string;
  readonly attempt_id: string;
  readonly provider: string;
  readonly model: string;
  readonly dispatch: DispatchState;
  readonly outcome: Outcome;
  readonly status: number | null;
  readonly elapsed_s: number;
  readonly timeout_s: number;
  /** Why the router moved on (or stopped) after this attempt; empty when it served. */
  readonly reason: string;
  readonly error: string;
  /** Where the request's data went: the provider's destination in the registry. */
  readonly destination: string;
  /** What the provider said served it (`Answer.model_id`), else `provider/model`. */
  readonly model_id: string;
  readonly contract: string;
  readonly epoch: number;
  readonly version: number;
  /** For a stream: chunks handed to the caller (0 when it failed before its commit point). */
  readonly chunks: number | null;
  readonly first_chunk_s: number | null;
  readonly input_tokens: number | null;
  readonly output_tokens: number | null;
  /** The failover drill whose fault this attempt was (no call was made); null for a real attempt. */
  readonly drill: number | null;
}

export function attemptLine(a: Attempt): string {
  const step = `${a.provider}/${a.model}`;
  const status = a.status !== null ? ` HTTP ${a.status}` : "";
  const resolved = a.model_id && a.model_id !== step ? ` as ${a.model_id}` : "";
  let streamed = "";
  if (a.chunks !== null) {
    const first = a.first_chunk_s !== null ? `, first after ${Math.round(a.first_chunk_s * 1000)} ms` : "";
    streamed = `, ${a.chunks} chunk(s) delivered${first}`;
  }
  let line =
    `${a.attempt_id} ${step}${resolved} @ ${a.destination || "unknown"}: ${a.outcome}${status} ` +
    `(${a.dispatch}, ${Math.round(a.elapsed_s * 1000)} ms of ${g(a.timeout_s)} s${streamed})`;
  if (a.drill != null) line += ` drill=${a.drill}`;
  if (a.reason) line += ` -> ${a.reason}`;
  return line;
}

/** A request's attempt log: every attempt in order, plus the steps admission refused. */
export class Receipt {
  constructor(
    readonly task_id: string,
    readonly attempts: readonly Attempt[],
    readonly refused: readonly (readonly [Step, string])[],
    readonly preset: string,
    readonly version: number,
    readonly epoch: number,
    readonly contract: string,
    /**
     * The failure policy the request followed: "" when the document has none, else
     * `failure policy of preset 'p': commit complete, ...`, with `; the call set idleS, ...`
     * when the call's options overrode some of it.
     */
    readonly policy: string = "",
  ) {
    Object.freeze(this);
  }

  toString(): string {
    const version = this.epoch ? `${this.epoch}.${this.version}` : String(this.version);
    return [
      `task ${this.task_id} (preset ${pyRepr(this.preset)}, version ${version}, contract ${this.contract}): ${this.attempts.length} attempt(s)`,
      ...(this.policy ? [`  ${this.policy}`] : []),
      ...this.attempts.map((a) => `  ${attemptLine(a)}`),
      ...this.refused.map(([s, why]) => `  skipped ${s.provider}/${s.model}: ${why}`),
    ].join("\n");
  }
}

/** A served request: the value and where it came from, with its recovery receipt. */
export class RouteResult<T = unknown> {
  constructor(
    readonly value: T,
    readonly provider: string,
    readonly model: string,
    readonly marking: Marking,
    readonly receipt: Receipt,
  ) {
    Object.freeze(this);
  }

  get attempts(): readonly Attempt[] {
    return this.receipt.attempts;
  }

  get destination(): string {
    return this.receipt.attempts[this.receipt.attempts.length - 1].destination;
  }

  get model_id(): string {
    return this.receipt.attempts[this.receipt.attempts.length - 1].model_id;
  }

  /** True when a fallback served the request. */
  get recovered(): boolean {
    return this.receipt.attempts.length > 1;
  }

  get degraded(): boolean {
    return Boolean(this.marking.degraded);
  }

  toString(): string {
    return `served by ${this.provider}/${this.model}\n${this.receipt.toString()}`;
  }
}

/** What a transport may return instead of a bare value, to name the model that served. */
export class Answer<T = unknown> {
  constructor(
    readonly value: T,
    readonly model_id: string,
    readonly input_tokens: number | null = null,
    readonly output_tokens: number | null = null,
  ) {
    Object.freeze(this);
  }
}

/** A provider rejected our credentials (HTTP 401/403): someone must fix the key. */
export interface CredentialAlert {
  readonly provider: string;
  readonly model: string;
  readonly status: number;
  readonly task_id: string;
  readonly attempt_id: string;
  readonly message: string;
}
