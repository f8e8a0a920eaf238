/**
 * `Router`: routes one request along the live chain with the Python SDK's semantics (its
 * README's failure table; the shared vectors run every row against both clients). One
 * snapshot of the chain per request; admission before each attempt (the contract's
 * capabilities and destinations, `allowFallback`, the provider's circuit breaker); one
 * deadline; each failure classified once (`classify`); side effects never retried
 * elsewhere after an unknown outcome; a receipt for every request.
 *
 * Streams (`stream()`) may fall back only before their commit point: once a chunk reached
 * the caller, a break is `StreamInterrupted`, never a second answer.
 *
 * The document's failure policy (the snapshot's `failurePolicy`) sets a stream's commit point
 * and bounds and the same-step retry, unless the call's options say otherwise; the receipt
 * names it.
 *
 * Failover drills: while the snapshot carries an active drill this client takes part in, a
 * share of the requests admitted at the drilled hop get its fault injected there, with no
 * call to the transport (nor to its breaker, nor to the provider health), and fall back.
 */

import { randomBytes } from "node:crypto";
import { setTimeout as delay } from "node:timers/promises";

import { ChainDocument, Drill, FailurePolicy, Registry, Step, compiledDefault, describeFailurePolicy, stepName } from "./document.js";
import { DrillRequest, drilledAt, takesPartIn } from "./drills.js";
import {
  AllProvidersFailed,
  ContentPolicyRefusal,
  ContentPolicyRejected,
  ContextLengthExceeded,
  DeadlineExceeded,
  NoEligibleRoute,
  OutcomeUnknown,
  ProviderError,
  ProviderTimeout,
  ProviderUnavailable,
  RequestRejected,
  RoutingError,
  StreamInterrupted,
  VerificationFailed,
} from "./errors.js";
import { Answer, Attempt, CredentialAlert, DispatchState, Outcome, Receipt, RouteResult } from "./receipts.js";
import { FAILURE_POLICY_RETRY_MAX_WAIT_MS, g, pyList, pyRepr } from "./wire.js";

export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 500, 502, 503, 504, 529]);
export const REJECTING_STATUSES: ReadonlySet<number> = new Set([400, 422]);
export const CREDENTIAL_STATUSES: ReadonlySet<number> = new Set([401, 403]);
export const UNKNOWN_OUTCOME_STATUSES: ReadonlySet<number> = new Set([502, 504]);
export const MAX_RETRY_AFTER_S = 600;
/** The statuses a same-step retry may follow (a failure known not to have acted; see `RequestOptions.retrySameStep`). */
export const SAME_STEP_RETRY_STATUSES: ReadonlySet<number> = new Set([429, 500, 503, 529]);

export type Action = "served" | "next" | "stop_rejected" | "stop_content" | "stop_unknown" | "stop_unverified";

/** One attempt, classified: its line in the receipt and what the walk does next. */
export interface Verdict {
  readonly outcome: Outcome;
  readonly dispatch: DispatchState;
  readonly action: Action;
  readonly reason: string;
  readonly status: number | null;
  readonly error: string;
  readonly countsAsFailure: boolean;
  readonly retryAfterS: number | null;
}

function verdict(outcome: Outcome, dispatch: DispatchState, action: Action, reason: string, more: Partial<Verdict> = {}): Verdict {
  return { outcome, dispatch, action, reason, status: null, error: "", countsAsFailure: true, retryAfterS: null, ...more };
}

const SERVED: Verdict = Object.freeze(verdict("ok", "dispatched_known", "served", "", { countsAsFailure: false }));

/** Classify one provider call: what it threw (undefined when it returned `value`). */
export function classify(
  raised: unknown,
  options: { value?: unknown; verify?: ((value: unknown) => boolean) | null; timeoutS: number; sideEffects: boolean; fallThroughOnContentPolicy: boolean },
  threw = raised !== undefined,
): Verdict {
  if (!threw) return answered(options.value, options.verify ?? null, options.sideEffects);
  const v = failed(raised, options.timeoutS, options.fallThroughOnContentPolicy);
  if (v.dispatch !== "dispatched_unknown") return v;
  if (options.sideEffects) {
    return { ...v, action: "stop_unknown", reason: `${v.reason}; outcome unknown and the request has side effects: stopped` };
  }
  return { ...v, reason: `${v.reason}; outcome unknown, no side effects: safe to try the next step` };
}

function answered(value: unknown, verify: ((value: unknown) => boolean) | null, sideEffects: boolean): Verdict {
  if (verify === null) return SERVED;
  let error = "";
  try {
    if (verify(value)) return SERVED;
    error = "verify() returned false";
  } catch (e) {
    error = `verify() raised ${(e as Error)?.name ?? "Error"}: ${(e as Error)?.message ?? String(e)}`;
  }
  if (sideEffects) {
    return verdict("verify_failed", "dispatched_known", "stop_unverified", "the answer failed verify(); the provider acted and the request has side effects: stopped", { error });
  }
  return verdict("verify_failed", "dispatched_known", "next", "the answer failed verify()", { error });
}

function failed(raised: unknown, timeoutS: number, fallThroughOnContentPolicy: boolean): Verdict {
  if (raised instanceof ProviderError) return providerError(raised);
  const error = raised instanceof Error ? raised.message : String(raised);
  if (raised instanceof ProviderTimeout) {
    return verdict("timeout", raised.dispatched ? "dispatched_unknown" : "not_dispatched", "next", `timed out after ${g(timeoutS)}s`, { error });
  }
  if (raised instanceof ProviderUnavailable) {
    return verdict("unavailable", "not_dispatched", "next", "provider unavailable (nothing was sent)", { error });
  }
  if (raised instanceof ContentPolicyRefusal) {
    const [action, reason]: [Action, string] = fallThroughOnContentPolicy
      ? ["next", "content-policy refusal (fall_through_on_content_policy=True)"]
      : ["stop_content", "content-policy refusal; not tried elsewhere (fall_through_on_content_policy=False)"];
    return verdict("refused", "dispatched_known", action, reason, { error, countsAsFailure: false });
  }
  const name = raised instanceof Error ? raised.name : typeof raised;
  return verdict("error", "dispatched_unknown", "next", `unexpected ${name} from the transport`, { error: `${name}: ${error}` });
}

function providerError(raised: ProviderError): Verdict {
  const status = raised.status;
  const error = raised.message;
  if (status === null) {
    return verdict("failed", raised.dispatched ? "dispatched_unknown" : "not_dispatched", "next", "no HTTP status", { error });
  }
  let dispatch: DispatchState = "not_dispatched";
  if (raised.dispatched) dispatch = UNKNOWN_OUTCOME_STATUSES.has(status) ? "dispatched_unknown" : "dispatched_known";
  // Too long for this model, not wrong everywhere: a larger window may serve it (the walk
  // skips the steps whose window is no larger). The provider answered: no breaker failure.
  if (raised instanceof ContextLengthExceeded) {
    return verdict("rejected", dispatch, "next", `HTTP ${status}: context length exceeded; trying a step with a larger context window`, {
      status,
      error,
      countsAsFailure: false,
    });
  }
  if (REJECTING_STATUSES.has(status)) {
    return verdict("rejected", dispatch, "stop_rejected", `HTTP ${status}: the request itself was rejected; not tried elsewhere`, {
      status,
      error,
      countsAsFailure: false,
    });
  }
  let reason: string;
  if (dispatch === "dispatched_unknown") reason = `HTTP ${status}: a gateway answered for an upstream that may have acted`;
  else if (RETRYABLE_STATUSES.has(status)) reason = `HTTP ${status} is retryable`;
  else if (CREDENTIAL_STATUSES.has(status)) reason = `HTTP ${status}: credentials rejected (credential alert raised)`;
  else reason = `HTTP ${status} (unclassified: treated as a provider failure)`;
  const retryAfterS = raised.retryAfterS;
  if (retryAfterS !== null) reason += `; the provider asked to retry after ${g(retryAfterS)}s (breaker open until then)`;
  return verdict("failed", dispatch, "next", reason, { status, error, retryAfterS });
}

// --- breakers ----------------------------------------------------------------------------

/**
 * `failureThreshold` counted failures within `windowS` open a provider's breaker for
 * `cooldownS`; then one probe may try, and a failed probe opens it again for
 * `probeIntervalS`, not a whole cooldown: a provider that is still down gets one request per
 * probe interval, and one that came back is used again within a probe interval of its
 * recovery (a whole cooldown after each failed probe could miss the end of a minute's outage
 * by most of a cooldown and keep traffic on the fallback).
 */
export interface BreakerSettings {
  failureThreshold: number;
  windowS: number;
  cooldownS: number;
  probeIntervalS: number;
}

export const DEFAULT_BREAKER: BreakerSettings = Object.freeze({ failureThreshold: 5, windowS: 60, cooldownS: 10, probeIntervalS: 5 });
export type BreakerState = "closed" | "open" | "half_open";

/** One provider's breaker: counted failures within a window open it; after a cooldown one probe may try, then one per probe interval. */
export class CircuitBreaker {
  state: BreakerState = "closed";
  private failures: number[] = [];
  private openedAt = 0;
  private cooldownS: number;
  private probeInFlight = false;

  constructor(
    readonly provider: string,
    readonly settings: BreakerSettings,
  ) {
    this.cooldownS = settings.cooldownS;
  }

  admit(now: number): string | null {
    if (this.state === "closed") return null;
    if (this.state === "open") {
      // The instant it may close, compared with now: waiting exactly a Retry-After admits.
      const left = this.openedAt + this.cooldownS - now;
      if (left > 0) return `circuit breaker open (${left.toFixed(1)}s of cooldown left)`;
      this.state = "half_open";
      this.probeInFlight = false;
    }
    if (this.probeInFlight) return "circuit breaker half-open (a probe request is in flight)";
    this.probeInFlight = true;
    return null;
  }

  recordSuccess(): void {
    if (this.state === "half_open") {
      this.state = "closed";
      this.probeInFlight = false;
    }
  }

  /** Count a failure; true when this opened the breaker. */
  recordFailure(now: number, retryAfterS: number | null): boolean {
    if (retryAfterS !== null && retryAfterS > 0) {
      const seconds = Math.min(retryAfterS, MAX_RETRY_AFTER_S);
      if (this.state === "open" && this.openedAt + this.cooldownS >= now + seconds) return false;
      const opened = this.state !== "open";
      this.open(now, seconds);
      return opened;
    }
    if (this.state === "half_open") {
      this.open(now, this.settings.probeIntervalS);
      return true;
    }
    if (this.state === "closed") {
      this.failures.push(now);
      const horizon = now - this.settings.windowS;
      while (this.failures.length && this.failures[0] <= horizon) this.failures.shift();
      if (this.failures.length >= this.settings.failureThreshold) {
        this.open(now, this.settings.cooldownS);
        return true;
      }
    }
    return false;
  }

  release(): void {
    this.probeInFlight = false;
  }

  reset(): void {
    this.state = "closed";
    this.failures = [];
    this.probeInFlight = false;
  }

  private open(now: number, cooldownS: number): void {
    this.state = "open";
    this.openedAt = now;
    this.cooldownS = cooldownS;
    this.failures = [];
    this.probeInFlight = false;
  }
}

// --- contracts ---------------------------------------------------------------------------

/** What a request needs from whichever step serves it. */
export interface Contract {
  /** Capabilities the step's model must all have. */
  requires?: Iterable<string>;
  /** Where the request's data may go; undefined means anywhere. */
  destinations?: Iterable<string> | null;
  /** What the service calls this contract, shown in receipts. */
  name?: string;
}

function contractIdentity(contract: Contract | undefined): string {
  if (!contract) return "none";
  const requires = [...new Set(contract.requires ?? [])].sort();
  const terms = requires.length ? [`requires [${requires.join(", ")}]`] : [];
  if (contract.destinations != null) terms.push(`destinations [${[...new Set(contract.destinations)].sort().join(", ")}]`);
  const described = terms.join("; ") || "no terms";
  if (contract.name) return `${pyRepr(contract.name)} (${described})`;
  return terms.length ? `(${described})` : "none";
}

// --- the router --------------------------------------------------------------------------

/** `transport(step, request, timeoutS)`: call the provider, throw a ProviderError & co. on failure. */
export type Transport = (step: Step, request: any, timeoutS: number, signal: AbortSignal) => Promise<unknown>;

/** A streaming transport: an async iterable of chunks; `content(chunk)` says how much text a chunk carries. */
export type StreamTransport = (step: Step, request: any, timeoutS: number, signal: AbortSignal) => AsyncIterable<unknown>;

export interface ChainSource {
  current(): ChainDocument;
  registry?: Registry;
  record_served?(provider: string): void;
  record_attempt?(attempt: Attempt): void;
  record_breaker_opened?(provider: string): void;
  /** Whether this service takes part in `drill` (without it: only when the drill names no service). */
  takesPart?(drill: Drill): boolean;
  /** How one request routed while `drill` was active ended, for the usage report's `drill` section. */
  recordDrill?(drill: Drill, request: DrillRequest): void;
}

/** A monotonic clock in seconds; a test clock may have `advance(seconds)`, which a drill's timeout fault calls instead of waiting. */
export interface Clock {
  (): number;
  advance?(seconds: number): void;
}

export interface RouterOptions {
  transports: Readonly<Record<string, Transport>>;
  streamTransports?: Readonly<Record<string, StreamTransport>>;
  registry?: Registry | null;
  deadlineS?: number;
  fallThroughOnContentPolicy?: boolean;
  onAlert?: (alert: CredentialAlert) => void;
  /** A monotonic clock in seconds (tests pass a fake one, with `advance(seconds)` for drills' timeout faults). */
  clock?: Clock;
  /** The wall clock in epoch seconds a drill's window is read on (tests pass their own). */
  wallClock?: () => number;
  /** Per-provider circuit breakers; null turns them off. */
  breaker?: Partial<BreakerSettings> | null;
  logger?: { warn(message: string): void; error(message: string): void };
}

export interface RequestOptions {
  contract?: Contract;
  sideEffects?: boolean;
  allowFallback?: boolean;
  verify?: (value: any) => boolean;
  deadlineS?: number;
  taskId?: string;
  /**
   * Retry a failed attempt once on the same step before moving on: a 429, 500, 503 or 529
   * known not to have acted, or an unavailable provider, whose `Retry-After` (none: 0) is at
   * most the policy's `retryMaxWaitMs` (without one, `FAILURE_POLICY_RETRY_MAX_WAIT_MS`) and
   * ends before the deadline. Default: the document's failure policy (on when it has
   * `retry_same_step`); false turns it off, true on.
   */
  retrySameStep?: boolean;
}

export interface StreamOptions extends RequestOptions {
  /**
   * Chunks are held back until this many characters arrived: the commit point. Default: the
   * failure policy's commit (`complete`: the whole answer, Infinity), else 1.
   */
  commitAfterChars?: number;
  /** The first chunk's bound, in seconds. Default: the policy's `firstChunkMs`, else the step's timeout. */
  firstChunkS?: number;
  /** The bound between chunks, in seconds. Default: the policy's `idleMs`, else the step's timeout. */
  idleS?: number;
  /**
   * The text a chunk carries. Default: the stream's own `text(chunk)` when the stream
   * transport's iterable has one (the adapters in `chainclient/openai` and
   * `chainclient/anthropic` do), else the chunk itself if a string, else its `text` or `content`.
   */
  content?: (chunk: unknown) => string;
}

export const REPORT_KEYS = [
  "first_attempt_success",
  "recovered_success",
  "refusals",
  "rejections",
  "all_failed",
  "deadline",
  "unresolved",
  "verify_failed",
  "credential_alerts",
  "skipped_no_transport",
  "interrupted",
] as const;
export type ReportKey = (typeof REPORT_KEYS)[number];

interface Walk {
  taskId: string;
  document: ChainDocument;
  contract: Contract | undefined;
  contractId: string;
  requires: Set<string>;
  destinations: Set<string> | null;
  sideEffects: boolean;
  allowFallback: boolean;
  verify: ((value: unknown) => boolean) | null;
  deadline: number;
  budgetS: number;
  cutByDeadline: boolean;
  attempts: Attempt[];
  refused: [Step, string][];
  /**
   * Once the request did not fit a step's context window: the step with the largest such
   * window the registry knows (or the last that rejected it, none being known) and that
   * window, and the last context-length rejection: later steps whose known window is no
   * larger are skipped, and if no attempt follows that rejection the walk ends in
   * RequestRejected.
   */
  tooLong: { attempt: Attempt; step: Step; window: number | undefined } | null;
  started: number;
  /** The active drill this request may be drilled by, and whether it was. */
  drill: Drill | null;
  drilled: boolean;
  /** The snapshot's failure policy, and the receipt's line naming it ("" without one). */
  policy: FailurePolicy | null;
  policyLine: string;
  /** The longest Retry-After a same-step retry waits, in seconds; null: no same-step retry. */
  retryMaxWaitS: number | null;
  /** The steps (indexes) retried once already. */
  retried: Set<number>;
  /** Set by `settle` when the attempt it recorded is retried: the step and how long to wait first. */
  retry: { index: number; waitS: number } | null;
}

/** The call's options that override a failure policy, in the order the receipt names them. */
const POLICY_OPTIONS = ["commitAfterChars", "firstChunkS", "idleS", "retrySameStep"] as const;

interface Turn {
  step: Step;
  timeoutS: number;
  breaker: CircuitBreaker | null;
  started: number;
}

const monotonic = () => performance.now() / 1000;

export class Router {
  private readonly source: () => ChainDocument;
  private readonly hooks: ChainSource | null;
  private readonly transports: Readonly<Record<string, Transport>>;
  private readonly streamTransports: Readonly<Record<string, StreamTransport>>;
  private readonly registry: Registry | null;
  private readonly deadlineS: number;
  private readonly fallThroughOnContentPolicy: boolean;
  private readonly onAlert: ((alert: CredentialAlert) => void) | null;
  private readonly now: () => number;
  private readonly clock: Clock | null;
  private readonly wallClock: () => number;
  private readonly realClock: boolean;
  private readonly breakers = new Map<string, CircuitBreaker>();
  private readonly untransported = new Set<string>();
  /** Every provider with a transport of either kind (fixed at construction, read per attempt). */
  private readonly transported: ReadonlySet<string>;
  private readonly log: { warn(message: string): void; error(message: string): void };
  private counts: Record<ReportKey, number> = Object.fromEntries(REPORT_KEYS.map((k) => [k, 0])) as Record<ReportKey, number>;
  /** Per drill id: how many requests reached its hop (drilled or not). */
  private readonly drillCounters = new Map<number, number>();

  constructor(source: ChainSource | ChainDocument | readonly Step[], options: RouterOptions) {
    if (Array.isArray(source)) {
      if (source.length === 0) throw new TypeError("a chain given as a list must be a non-empty list of steps");
      const document = compiledDefault("router", source as readonly Step[]);
      this.source = () => document;
      this.hooks = null;
    } else if (typeof (source as ChainSource).current === "function") {
      this.hooks = source as ChainSource;
      this.source = () => (source as ChainSource).current();
    } else if (source && typeof source === "object" && "chain" in source) {
      const document = source as ChainDocument;
      this.source = () => document;
      this.hooks = null;
    } else {
      throw new TypeError("a router needs a ChainClient (anything with current()), a ChainDocument or a list of steps");
    }
    const deadlineS = options.deadlineS ?? 30;
    if (!(deadlineS > 0)) throw new RangeError("deadlineS must be positive");
    this.transports = { ...options.transports };
    this.streamTransports = { ...(options.streamTransports ?? {}) };
    for (const [name, call] of [...Object.entries(this.transports), ...Object.entries(this.streamTransports)]) {
      if (typeof call !== "function") throw new TypeError(`transport for ${pyRepr(name)} must be a function`);
    }
    this.transported = new Set([...Object.keys(this.transports), ...Object.keys(this.streamTransports)]);
    this.registry = options.registry ?? (this.hooks?.registry instanceof Registry ? this.hooks.registry : null);
    this.deadlineS = deadlineS;
    this.fallThroughOnContentPolicy = Boolean(options.fallThroughOnContentPolicy);
    this.onAlert = options.onAlert ?? null;
    this.now = options.clock ?? monotonic;
    this.clock = options.clock ?? null;
    this.wallClock = options.wallClock ?? (() => Date.now() / 1000);
    this.realClock = options.clock === undefined;
    this.log = options.logger ?? { warn: (m) => console.warn(m), error: (m) => console.error(m) };
    if (options.breaker !== null) {
      const settings = { ...DEFAULT_BREAKER, ...(options.breaker ?? {}) };
      if (!(settings.failureThreshold >= 1)) throw new RangeError("failureThreshold must be at least 1 (use breaker: null to disable)");
      if (!(settings.windowS > 0 && settings.cooldownS > 0 && settings.probeIntervalS > 0)) {
        throw new RangeError("windowS, cooldownS and probeIntervalS must be positive");
      }
      for (const name of this.transported) this.breakers.set(name, new CircuitBreaker(name, settings));
    }
    const known = new Set([...(this.registry?.names() ?? []), ...this.source().chain.map((s) => s.provider)]);
    const missing = [...known].filter((name) => !this.transported.has(name)).sort();
    if (missing.length) {
      missing.forEach((name) => this.untransported.add(name));
      this.log.warn(
        `chainclient: no transport for provider(s) ${missing.join(", ")}: a chain step on them is skipped (transports given: ${[...this.transported].sort().join(", ") || "none"})`,
      );
    }
  }

  /** Counts since start (or `resetReport()`) by how requests ended. */
  report(): Record<ReportKey, number> {
    return { ...this.counts };
  }

  resetReport(): void {
    this.counts = Object.fromEntries(REPORT_KEYS.map((k) => [k, 0])) as Record<ReportKey, number>;
  }

  health(): { providers_without_transport: string[]; breakers: Record<string, BreakerState> } {
    return {
      providers_without_transport: [...this.untransported].sort(),
      breakers: Object.fromEntries([...this.breakers].sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, b]) => [name, b.state])),
    };
  }

  breakerState(provider: string): BreakerState {
    return this.breakers.get(provider)?.state ?? "closed";
  }

  resetBreakers(): void {
    for (const breaker of this.breakers.values()) breaker.reset();
  }

  /** Route one request along the chain; resolves with the result or rejects with a RoutingError. */
  async complete<T = unknown>(request: unknown, options: RequestOptions = {}): Promise<RouteResult<T>> {
    const walk = this.begin(options, ["retrySameStep"]);
    if (walk.drill === null) return this.completing<T>(walk, request);
    let failure: unknown = null;
    try {
      return await this.completing<T>(walk, request);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      this.drillDone(walk, failure);
    }
  }

  private async completing<T>(walk: Walk, request: unknown): Promise<RouteResult<T>> {
    for (let index = 0; index < walk.document.chain.length; index++) {
      const retrying = await this.retrying(walk, index);
      const turn = this.turn(walk, index, false);
      if (turn === null) continue;
      // A retry is the same request at the same hop: a drill does not count it again.
      if (!retrying && this.drills(walk, index)) {
        await this.inject(walk, turn, false);
        continue;
      }
      const controller = new AbortController();
      let raised: unknown;
      let threw = false;
      let value: unknown;
      try {
        const call = this.transports[turn.step.provider](turn.step, request, turn.timeoutS, controller.signal);
        // A transport that forgets its timeout cannot hold the request past its budget: the
        // attempt is aborted and recorded as a timeout after dispatch (with a test's clock,
        // time does not pass on its own, so nothing is enforced).
        value = this.realClock ? await withBound(call, turn.timeoutS, controller, () => new ProviderTimeout(true, "the attempt ran out of its time")) : await call;
      } catch (error) {
        threw = true;
        raised = error;
      }
      const result = this.settle(walk, turn, threw, raised, value, undefined, index);
      if (result !== null) return result as RouteResult<T>;
      if (walk.retry !== null) index -= 1;
    }
    throw this.ended(this.exhausted(walk));
  }

  /**
   * Route one streamed request: `for await (const chunk of router.stream(request))` yields the
   * serving provider's chunks. Before the commit point a failure falls through as in
   * `complete()`; after it, a break rejects the iteration with `StreamInterrupted`. Once the
   * stream is complete, `.result` (the provider, the receipt) says who served it.
   */
  stream(request: unknown, options: StreamOptions = {}): RouteStream {
    return new RouteStream((route) => this.streamWalk(route, request, options));
  }

  /**
   * The walk of a streamed request, as one async generator that `route` hands to the caller
   * as is (each layer of generator between the provider's stream and the caller costs every
   * chunk promise turns of its own): it sets `route.result` once the stream is complete.
   */
  private async *streamWalk(route: RouteStream, request: unknown, options: StreamOptions): AsyncGenerator<unknown, void, undefined> {
    const walk = this.begin(options, POLICY_OPTIONS);
    let failure: unknown = null;
    let handedOver = false;
    try {
      // The call's options, else the snapshot's failure policy, else the defaults.
      const policy = walk.policy;
      const commitAfter =
        options.commitAfterChars !== undefined ? Math.max(1, options.commitAfterChars) : policy?.commit === "complete" ? Infinity : 1;
      const firstChunkBound = options.firstChunkS ?? (policy?.firstChunkMs != null ? policy.firstChunkMs / 1000 : undefined);
      const idleBound = options.idleS ?? (policy?.idleMs != null ? policy.idleMs / 1000 : undefined);
      for (let index = 0; index < walk.document.chain.length; index++) {
        const retrying = await this.retrying(walk, index);
        const turn = this.turn(walk, index, true, firstChunkBound);
        if (turn === null) continue;
        if (!retrying && this.drills(walk, index)) {
          // A drilled attempt never opens a stream.
          await this.inject(walk, turn, true);
          continue;
        }
        const controller = new AbortController();
        const bounds = new ChunkBounds(controller);
        const held: unknown[] = [];
        let chars = 0;
        let delivered = 0;
        let firstChunkS: number | null = null;
        let opened: AsyncIterable<unknown> | null = null;
        let iterator: AsyncIterator<unknown> | null = null;
        let finished = false;
        const idleS = idleBound ?? turn.step.timeout_ms / 1000;
        try {
          opened = this.streamTransports[turn.step.provider](turn.step, request, turn.timeoutS, controller.signal);
          iterator = opened[Symbol.asyncIterator]();
          // The call's measure, else the stream's own (an adapter's `text(chunk)`), as in Python.
          const content = options.content ?? streamText(opened) ?? defaultContent;
          for (;;) {
            // The first chunk with content is due within the attempt's timeout (its first-chunk
            // bound) of its start; each chunk after it within idleS of asking for it, committed
            // or not, inside the request's deadline.
            let next: IteratorResult<unknown>;
            if (this.realClock) {
              // The router's clock is the bounds' own: one reading a chunk.
              next = await bounds.wait(iterator.next(), firstChunkS === null ? turn.started + turn.timeoutS : null, idleS, walk.deadline);
            } else {
              const asked = this.now();
              const due = firstChunkS === null ? turn.started + turn.timeoutS : Math.min(asked + idleS, walk.deadline);
              next = await bounds.wait(iterator.next(), monotonic() + (due - asked), idleS, Infinity);
              // With a test's clock, the only way a bound is enforced: a chunk that comes
              // after its bound passed (on that clock) is not delivered.
              if (this.now() > due) throw new BoundPassed(`no chunk within ${g(due - asked)}s`);
            }
            if (next.done) break;
            if (delivered > 0) {
              // Committed: straight to the caller.
              delivered += 1;
              yield next.value;
              continue;
            }
            const length = content(next.value).length;
            if (firstChunkS === null && length > 0) firstChunkS = this.now() - turn.started;
            held.push(next.value);
            chars += length;
            if (chars < commitAfter) continue;
            turn.breaker?.recordSuccess();
            for (const chunk of held.splice(0)) {
              delivered += 1;
              yield chunk;
            }
            if (this.realClock) {
              // Committed: the rest goes straight from the provider's stream to the caller,
              // without this generator between them (`committed`).
              handedOver = true;
              route.handOver(this.committed(route, walk, turn, { iterator, opened, bounds, controller, delivered, firstChunkS, idleS }));
              return;
            }
          }
          if (delivered === 0 && held.length) {
            // Ended before the commit point (with commit "complete", always): the provider's
            // whole answer came, and what came is the answer.
            for (const chunk of held.splice(0)) {
              delivered += 1;
              yield chunk;
            }
          }
          finished = true;
        } catch (error) {
          finished = true;
          controller.abort();
          if (delivered > 0) throw this.broken(walk, turn, error, delivered, firstChunkS);
          const result = this.settle(
            walk,
            turn,
            true,
            error instanceof BoundPassed ? new ProviderTimeout(true, error.message) : error,
            undefined,
            { chunks: 0, firstChunkS },
            index,
          );
          if (result !== null) {
            route.result = result as RouteResult<null>;
            return;
          }
          if (walk.retry !== null) index -= 1;
          continue;
        } finally {
          if (handedOver) return;
          bounds.close();
          if (delivered > 0 && iterator?.return) await iterator.return().catch(() => undefined);
          // The caller left the stream early (a break, return()): the provider's stream is
          // closed, and the attempt counts as served.
          if (!finished && delivered > 0) this.settle(walk, turn, false, undefined, null, { chunks: delivered, firstChunkS, ...streamReport(opened) });
        }
        const result = this.settle(walk, turn, false, undefined, null, { chunks: delivered, firstChunkS, ...streamReport(opened) });
        if (result !== null) {
          route.result = result as RouteResult<null>;
          return;
        }
      }
      throw this.ended(this.exhausted(walk));
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      // Also when the caller left the stream early: the attempt counted as served.
      if (walk.drill !== null && !handedOver) this.drillDone(walk, failure);
    }
  }

  /**
   * A stream attempt past its commit point, on the real clock: each chunk straight from the
   * provider's stream to the caller (one promise turn a chunk, within the idle bound), then
   * what the walk does at its end: the receipt (`route.result`), the drill's record; a break
   * or a bound passed is `StreamInterrupted`; the caller leaving early closes the provider's
   * stream and the attempt counts as served.
   */
  private committed(route: RouteStream, walk: Walk, turn: Turn, attempt: Committed): AsyncIterator<unknown> {
    const { iterator, opened, bounds, controller, idleS, firstChunkS } = attempt;
    let delivered = attempt.delivered;
    let closed = false;
    const finish = async (complete: boolean): Promise<IteratorResult<unknown>> => {
      closed = true;
      bounds.close();
      if (iterator.return) await iterator.return().catch(() => undefined);
      const result = this.settle(walk, turn, false, undefined, null, { chunks: delivered, firstChunkS, ...streamReport(opened) });
      if (complete) route.result = result as RouteResult<null>;
      if (walk.drill !== null) this.drillDone(walk, null);
      return { done: true, value: undefined };
    };
    const chunk = (next: IteratorResult<unknown>): IteratorResult<unknown> | Promise<IteratorResult<unknown>> => {
      if (next.done) return finish(true);
      delivered += 1;
      return next;
    };
    const broke = async (error: unknown): Promise<never> => {
      closed = true;
      controller.abort();
      bounds.close();
      const interrupted = this.broken(walk, turn, error, delivered, firstChunkS);
      if (iterator.return) await iterator.return().catch(() => undefined);
      if (walk.drill !== null) this.drillDone(walk, interrupted);
      throw interrupted;
    };
    return {
      next: () => (closed ? Promise.resolve({ done: true, value: undefined }) : bounds.wait(iterator.next(), null, idleS, walk.deadline).then(chunk, broke)),
      return: () => (closed ? Promise.resolve({ done: true, value: undefined }) : finish(false)),
    };
  }

  /**
   * Whether the attempt at step `index` is a same-step retry (`settle` chose one): then its
   * Retry-After is waited out first, on the router's clock (a test clock with `advance()` is
   * advanced). The breaker the Retry-After opened admits the retry as its probe at that instant.
   */
  private async retrying(walk: Walk, index: number): Promise<boolean> {
    const retry = walk.retry;
    if (retry === null || retry.index !== index) return false;
    walk.retry = null;
    const until = this.now() + retry.waitS;
    await this.pause(retry.waitS);
    // A real timer may fire a hair before the monotonic clock reaches the instant.
    while (this.realClock && this.now() < until) await delay(Math.max(1, Math.ceil((until - this.now()) * 1000)));
    return true;
  }

  /**
   * How long to wait before retrying the attempt `v` at step `index` on the same step, or
   * null to move on: once per step and request, for a failure that may pass on a second try
   * (`SAME_STEP_RETRY_STATUSES` known not to have acted, or an unavailable provider) whose
   * Retry-After is within the policy's wait and ends before the deadline.
   */
  private sameStepRetry(walk: Walk, index: number, v: Verdict): number | null {
    if (walk.retryMaxWaitS === null || walk.retried.has(index) || v.action !== "next") return null;
    const retryable =
      (v.outcome === "failed" && v.status !== null && SAME_STEP_RETRY_STATUSES.has(v.status) && v.dispatch !== "dispatched_unknown") ||
      v.outcome === "unavailable";
    if (!retryable) return null;
    const waitS = Math.max(0, v.retryAfterS ?? 0);
    if (!(waitS <= walk.retryMaxWaitS) || !(this.now() + waitS < walk.deadline)) return null;
    return waitS;
  }

  // --- a request, step by step -------------------------------------------------------

  private begin(options: RequestOptions, overriding: readonly (typeof POLICY_OPTIONS)[number][]): Walk {
    if (options.deadlineS !== undefined && !(options.deadlineS > 0)) throw new RangeError("deadlineS must be positive");
    const budgetS = options.deadlineS ?? this.deadlineS;
    const contract = options.contract;
    const document = this.source();
    const now = this.now();
    const policy = document.failurePolicy ?? null;
    let policyLine = "";
    if (policy !== null) {
      policyLine = `failure policy of preset ${pyRepr(document.preset)}: ${describeFailurePolicy(policy)}`;
      const given = overriding.filter((name) => (options as StreamOptions)[name] !== undefined);
      if (given.length) policyLine += `; the call set ${given.join(", ")}`;
    }
    const retry = options.retrySameStep ?? (policy !== null && policy.retryMaxWaitMs !== null);
    const maxWaitMs = policy?.retryMaxWaitMs ?? FAILURE_POLICY_RETRY_MAX_WAIT_MS;
    return {
      taskId: options.taskId ?? randomBytes(16).toString("hex"),
      document,
      contract,
      contractId: contractIdentity(contract),
      requires: new Set(contract?.requires ?? []),
      destinations: contract?.destinations != null ? new Set(contract.destinations) : null,
      sideEffects: Boolean(options.sideEffects),
      allowFallback: options.allowFallback ?? true,
      verify: options.verify ?? null,
      deadline: now + budgetS,
      budgetS,
      cutByDeadline: false,
      attempts: [],
      refused: [],
      tooLong: null,
      started: now,
      drill: this.activeDrill(document),
      drilled: false,
      policy,
      policyLine,
      retryMaxWaitS: retry ? maxWaitMs / 1000 : null,
      retried: new Set(),
      retry: null,
    };
  }

  // --- failover drills ---------------------------------------------------------------

  /** The document's drill, if it is active now (wall clock) and this client takes part in it. */
  private activeDrill(document: ChainDocument): Drill | null {
    const drill = document.drill;
    if (drill === null || drill === undefined || drill.hop >= document.chain.length) return null;
    const now = this.wallClock();
    if (!(drill.starts_at_s <= now && now < drill.ends_at_s)) return null;
    const part = this.hooks?.takesPart;
    if (part === undefined) return takesPartIn(drill, null) ? drill : null;
    try {
      return part.call(this.hooks, drill) ? drill : null;
    } catch (error) {
      this.log.error(`chainclient: takesPart threw: ${(error as Error)?.message ?? String(error)}`);
      return null;
    }
  }

  /** Whether this request, admitted at step `index`, is drilled there (counted per drill). */
  private drills(walk: Walk, index: number): boolean {
    const drill = walk.drill;
    if (drill === null || index !== drill.hop - 1) return false;
    const n = this.drillCounters.get(drill.id) ?? 0;
    if (n === 0) this.drillCounters.clear(); // a new drill: the counts of earlier ones are done with
    this.drillCounters.set(drill.id, n + 1);
    walk.drilled = drilledAt(n, drill.share_bp);
    return walk.drilled;
  }

  /**
   * The drill's fault, instead of a call: no transport, no breaker (a probe slot admission
   * took goes back unused), no provider health, no alert; the walk moves on. A timeout
   * costs what a real one costs: the attempt's timeout is waited out first.
   */
  private async inject(walk: Walk, turn: Turn, streaming: boolean): Promise<void> {
    const drill = walk.drill as Drill;
    turn.breaker?.release();
    const fault = drill.fault;
    if (fault === "timeout" || fault === "first_chunk_late") await this.pause(turn.timeoutS);
    const reason = `drill ${drill.id}: ${fault} injected (no call was made)`;
    const v =
      fault === "server_error"
        ? verdict("failed", "not_dispatched", "next", reason, { status: 500 })
        : fault === "rate_limited"
          ? verdict("failed", "not_dispatched", "next", reason, { status: 429 })
          : fault === "invalid_answer"
            ? verdict("verify_failed", "not_dispatched", "next", reason)
            : fault === "stream_cut_before_first_chunk"
              ? verdict("failed", "not_dispatched", "next", reason)
              : verdict("timeout", "not_dispatched", "next", reason);
    this.record(walk, turn, v, "", [null, null], streaming ? { chunks: 0, firstChunkS: null } : undefined, drill.id);
    walk.cutByDeadline = v.outcome === "timeout" && (streaming ? this.now() >= walk.deadline : turn.timeoutS < turn.step.timeout_ms / 1000);
  }

  /** Let `seconds` pass: a test clock with `advance()` is advanced, a real one waited on. */
  private async pause(seconds: number): Promise<void> {
    if (!(seconds > 0)) return;
    if (typeof this.clock?.advance === "function") this.clock.advance(seconds);
    else if (this.realClock) await delay(seconds * 1000);
  }

  /** Tell the client how a request routed while a drill was active ended. */
  private drillDone(walk: Walk, failure: unknown): void {
    const drill = walk.drill;
    const record = this.hooks?.recordDrill;
    if (drill === null || record === undefined) return;
    const chain = walk.document.chain;
    const at = (a: Attempt): number => chain.findIndex((s) => s.provider === a.provider && s.model === a.model);
    const served = walk.attempts.find((a) => a.outcome === "ok");
    const fallbacks = walk.drilled ? walk.attempts.filter((a) => at(a) === drill.hop) : [];
    const request: DrillRequest = {
      drilled: walk.drilled,
      ended_on: failure === null && served !== undefined ? at(served) + 1 : null,
      error: failure === null ? null : failure instanceof Error ? failure.name : String(failure),
      fallback_attempts: fallbacks.length,
      fallback_failures: fallbacks.filter((a) => a.outcome !== "ok").length,
      elapsed_s: this.now() - walk.started,
    };
    this.safely(() => record.call(this.hooks, drill, request), "recordDrill");
  }

  private turn(walk: Walk, index: number, streaming: boolean, firstChunkS?: number): Turn | null {
    const s = walk.document.chain[index];
    const breaker = this.breakers.get(s.provider) ?? null;
    const why = this.refusal(walk, s, breaker, index > 0 && !walk.allowFallback, streaming);
    if (why !== null) {
      walk.refused.push([s, why]);
      if (!this.transported.has(s.provider)) this.noTransport(s, walk.document);
      return null;
    }
    const now = this.now();
    const left = walk.deadline - now;
    if (left <= 0) {
      breaker?.release();
      throw this.ended(this.outOfTime(walk, walk.document.chain.slice(index)));
    }
    const timeoutS = firstChunkS ?? s.timeout_ms / 1000;
    return { step: s, timeoutS: timeoutS <= left ? timeoutS : left, breaker, started: now };
  }

  private refusal(walk: Walk, s: Step, breaker: CircuitBreaker | null, fallbackBarred: boolean, streaming: boolean): string | null {
    let why = this.contractRefusal(walk, s);
    if (why === null) why = this.windowRefusal(walk, s);
    if (why === null && streaming && !(s.provider in this.streamTransports)) {
      why = "no stream transport for this provider (it can serve complete() only)";
    } else if (why === null && !streaming && !(s.provider in this.transports)) {
      why = "no transport for complete() for this provider (it can serve stream() only)";
    }
    if (why === null && fallbackBarred) why = "fallback not permitted (allow_fallback=False)";
    if (why === null && breaker !== null) why = breaker.admit(this.now());
    return why;
  }

  /** A step whose context window is known and no larger than the one the request was too long for (both known). */
  private windowRefusal(walk: Walk, s: Step): string | null {
    const failed = walk.tooLong;
    const window = this.registry?.contextWindow(s.provider, s.model);
    if (failed === null || failed.window === undefined || window === undefined || window > failed.window) return null;
    return `context window of ${window} tokens is not larger than ${stepName(failed.step)}'s ${failed.window}; the request would not fit`;
  }

  private contractRefusal(walk: Walk, s: Step): string | null {
    if (!this.transported.has(s.provider)) return `no transport for provider ${pyRepr(s.provider)}`;
    const registry = this.registry;
    if (registry === null) {
      return walk.requires.size || walk.destinations !== null ? "no registry to check the request's contract against" : null;
    }
    if (!registry.has(s.provider)) return `provider ${pyRepr(s.provider)} is not in the registry`;
    if (!registry.hasModel(s.provider, s.model)) return `model ${pyRepr(s.model)} is not in the registry for ${pyRepr(s.provider)}`;
    const capabilities = registry.capabilities(s.provider, s.model);
    const missing = [...walk.requires].filter((c) => !capabilities.has(c)).sort();
    if (missing.length) return `model lacks required capabilities ${pyList(missing)}`;
    const destination = registry.destination(s.provider) as string;
    if (walk.destinations !== null && !walk.destinations.has(destination)) {
      return `destination ${pyRepr(destination)} is not allowed (allowed: ${pyList([...walk.destinations].sort())})`;
    }
    return null;
  }

  private settle(
    walk: Walk,
    turn: Turn,
    threw: boolean,
    raised: unknown,
    value: unknown,
    stream?: { chunks: number; firstChunkS: number | null; modelId?: string; tokens?: [number | null, number | null] },
    index?: number,
  ): RouteResult | null {
    let modelId = stream?.modelId ?? "";
    let tokens: [number | null, number | null] = stream?.tokens ?? [null, null];
    if (value instanceof Answer) {
      modelId = value.model_id;
      // Only whole numbers of at least 0, as the Python SDK counts them: the usage report sums
      // them, and the control plane refuses a whole report over one bad count.
      tokens = [tokenCount(value.input_tokens), tokenCount(value.output_tokens)];
      value = value.value;
    }
    let v = classify(
      raised,
      { value, verify: stream ? null : walk.verify, timeoutS: turn.timeoutS, sideEffects: walk.sideEffects, fallThroughOnContentPolicy: this.fallThroughOnContentPolicy },
      threw,
    );
    const waitS = index === undefined ? null : this.sameStepRetry(walk, index, v);
    if (waitS !== null && index !== undefined) {
      // Recorded (the breaker told, a Retry-After holding it until the retry) before the retry.
      v = { ...v, reason: `${v.reason}; retrying the same step after ${waitS}s` };
      walk.retried.add(index);
      walk.retry = { index, waitS };
    }
    const attempt = this.record(walk, turn, v, modelId, tokens, stream);
    if (v.action === "served") {
      this.count(walk.attempts.length > 1 ? "recovered_success" : "first_attempt_success");
      this.safely(() => this.hooks?.record_served?.(turn.step.provider), "record_served");
      return new RouteResult(value, turn.step.provider, turn.step.model, walk.document.marking, this.receipt(walk));
    }
    if (v.action !== "next") throw this.ended(this.stopped(walk, v.action));
    if (raised instanceof ContextLengthExceeded) {
      // The largest window the request is known not to fit bounds the later steps (this
      // step's if it is known and larger than an earlier one's), as in the Python SDK.
      const window = this.registry?.contextWindow(turn.step.provider, turn.step.model);
      const known = walk.tooLong;
      const larger = known === null || known.window === undefined || (window !== undefined && window > known.window);
      walk.tooLong = larger ? { attempt, step: turn.step, window } : { ...known, attempt };
    }
    walk.cutByDeadline = attempt.outcome === "timeout" && (stream ? this.now() >= walk.deadline : turn.timeoutS < turn.step.timeout_ms / 1000);
    return null;
  }

  private record(
    walk: Walk,
    turn: Turn,
    v: Verdict,
    modelId: string,
    tokens: [number | null, number | null],
    stream?: { chunks: number; firstChunkS: number | null },
    drill: number | null = null,
  ): Attempt {
    const now = this.now();
    const breaker = drill === null ? turn.breaker : null;
    if (breaker !== null) {
      if (v.countsAsFailure) {
        if (breaker.recordFailure(now, v.retryAfterS)) {
          this.log.warn(`chainclient: circuit breaker for ${turn.step.provider} opened; cooling down`);
          this.safely(() => this.hooks?.record_breaker_opened?.(turn.step.provider), "record_breaker_opened");
        }
      } else {
        breaker.recordSuccess();
      }
    }
    const document = walk.document;
    const attempt: Attempt = Object.freeze({
      task_id: walk.taskId,
      attempt_id: `${walk.taskId}-${walk.attempts.length + 1}`,
      provider: turn.step.provider,
      model: turn.step.model,
      dispatch: v.dispatch,
      outcome: v.outcome,
      status: v.status,
      elapsed_s: now - turn.started,
      timeout_s: turn.timeoutS,
      reason: v.reason,
      error: v.error,
      destination: this.registry?.destination(turn.step.provider) ?? "unknown",
      model_id: modelId || stepName(turn.step),
      contract: walk.contractId,
      epoch: document.epoch,
      version: document.version,
      chunks: stream ? stream.chunks : null,
      first_chunk_s: stream ? stream.firstChunkS : null,
      input_tokens: tokens[0],
      output_tokens: tokens[1],
      drill,
    });
    walk.attempts.push(attempt);
    // A drilled attempt is no evidence about the provider: never in its health.
    if (drill !== null) return attempt;
    this.safely(() => this.hooks?.record_attempt?.(attempt), "record_attempt");
    if (v.status !== null && CREDENTIAL_STATUSES.has(v.status)) this.credentialAlert(attempt);
    return attempt;
  }

  private broken(walk: Walk, turn: Turn, error: unknown, chunks: number, firstChunkS: number | null): RoutingError {
    const why = error instanceof Error ? error.message : String(error);
    const status = error instanceof ProviderError && !(error instanceof BoundPassed) ? error.status : null;
    const v = verdict("interrupted", "dispatched_known", "stop_rejected", `stream interrupted after ${chunks} chunk(s) reached the caller; nothing else was tried`, {
      status,
      error: why,
    });
    const attempt = this.record(walk, turn, v, "", [null, null], { chunks, firstChunkS });
    return this.ended(
      new StreamInterrupted(
        `${stepName(turn.step)} broke off its stream after ${chunks} chunk(s) had reached the caller (${why}); not a success, and no fallback (it would show a second answer)`,
        this.receipt(walk),
        chunks,
        attempt.provider,
        attempt.model,
      ),
    );
  }

  private receipt(walk: Walk): Receipt {
    return new Receipt(
      walk.taskId,
      [...walk.attempts],
      [...walk.refused],
      walk.document.preset,
      walk.document.version,
      walk.document.epoch,
      walk.contractId,
      walk.policyLine,
    );
  }

  private stopped(walk: Walk, action: Action): RoutingError {
    const a = walk.attempts[walk.attempts.length - 1];
    const s = `${a.provider}/${a.model}`;
    if (action === "stop_unknown") {
      return new OutcomeUnknown(
        `outcome unknown at ${s} for a request with side effects (${a.error || a.outcome}); it may have acted, so nothing else was tried`,
        this.receipt(walk),
      );
    }
    if (action === "stop_unverified") {
      return new VerificationFailed(
        `${s} answered but the answer failed verify() (${a.error}); the request has side effects and the provider acted, so nothing else was tried`,
        this.receipt(walk),
      );
    }
    if (action === "stop_content") {
      return new ContentPolicyRejected(`${s} refused the content on policy grounds (${a.error})`, this.receipt(walk), a.status);
    }
    return new RequestRejected(`${s} rejected the request (${a.error})`, this.receipt(walk), a.status);
  }

  private exhausted(walk: Walk): RoutingError {
    if (walk.attempts.length === 0) {
      return new NoEligibleRoute(
        `no step of the chain is eligible for this request (${walk.refused.length} refused); nothing was attempted`,
        this.receipt(walk),
      );
    }
    if (walk.cutByDeadline) return this.outOfTime(walk, []);
    const last = walk.attempts[walk.attempts.length - 1];
    if (last === walk.tooLong?.attempt) {
      return new RequestRejected(
        `${last.provider}/${last.model} rejected the request: context length exceeded, and no later step has a larger context window (${last.error})`,
        this.receipt(walk),
        last.status,
      );
    }
    const summary = walk.attempts.map((a) => `${a.provider}/${a.model} (${shortError(a)})`).join(", ");
    return new AllProvidersFailed(`all providers failed: ${summary}`, this.receipt(walk));
  }

  private outOfTime(walk: Walk, notStarted: readonly Step[]): DeadlineExceeded {
    const tried = walk.attempts.map((a) => `${a.provider}/${a.model} (${shortError(a)})`).join(", ") || "nothing";
    const untried = notStarted.length ? `; not started: ${notStarted.map(stepName).join(", ")}` : "";
    return new DeadlineExceeded(
      `deadline of ${g(walk.budgetS)}s exceeded after ${walk.attempts.length} attempt(s): ${tried}${untried}`,
      this.receipt(walk),
      walk.budgetS,
    );
  }

  private ended(error: RoutingError): RoutingError {
    const key: ReportKey | null =
      error instanceof StreamInterrupted
        ? "interrupted"
        : error instanceof OutcomeUnknown
          ? "unresolved"
          : error instanceof VerificationFailed
            ? "verify_failed"
            : error instanceof RequestRejected
              ? "rejections"
              : error instanceof NoEligibleRoute
                ? "refusals"
                : error instanceof DeadlineExceeded
                  ? "deadline"
                  : error instanceof AllProvidersFailed
                    ? "all_failed"
                    : null;
    if (key !== null) this.count(key);
    return error;
  }

  private noTransport(s: Step, document: ChainDocument): void {
    this.count("skipped_no_transport");
    if (this.untransported.has(s.provider)) return;
    this.untransported.add(s.provider);
    this.log.warn(`chainclient: chain ${document.name} v${document.version} routes to ${stepName(s)} but this router has no transport for ${pyRepr(s.provider)}: skipped`);
  }

  private credentialAlert(attempt: Attempt): void {
    this.count("credential_alerts");
    this.log.error(
      `chainclient: ${attempt.provider} rejected our credentials (HTTP ${attempt.status}) on attempt ${attempt.attempt_id}; check this provider's API key`,
    );
    const alert: CredentialAlert = {
      provider: attempt.provider,
      model: attempt.model,
      status: attempt.status ?? 0,
      task_id: attempt.task_id,
      attempt_id: attempt.attempt_id,
      message: attempt.error,
    };
    this.safely(() => this.onAlert?.(alert), "onAlert");
  }

  private count(key: ReportKey): void {
    this.counts[key] += 1;
  }

  private safely(call: () => void, what: string): void {
    try {
      call();
    } catch (error) {
      // Accounting and alert hooks must never cost a request its answer (nor its error).
      this.log.error(`chainclient: ${what} threw: ${(error as Error)?.message ?? String(error)}`);
    }
  }
}

/** What a stream attempt past its commit point carries on with (`Router.committed`). */
interface Committed {
  readonly iterator: AsyncIterator<unknown>;
  readonly opened: AsyncIterable<unknown>;
  readonly bounds: ChunkBounds;
  readonly controller: AbortController;
  readonly delivered: number;
  readonly firstChunkS: number | null;
  readonly idleS: number;
}

/** A routed stream: its chunks, then (`result`) who served it, with the receipt. */
export class RouteStream implements AsyncIterable<unknown>, AsyncIterator<unknown> {
  /** Set once the stream is complete: the provider that served it and the receipt. */
  result: RouteResult<null> | null = null;
  private readonly walk: AsyncGenerator<unknown, void, undefined>;
  private committed: AsyncIterator<unknown> | null = null;

  constructor(walk: (route: RouteStream) => AsyncGenerator<unknown, void, undefined>) {
    this.walk = walk(this);
  }

  /** @internal The walk's attempt past its commit point, which serves the rest of the stream. */
  handOver(committed: AsyncIterator<unknown>): void {
    this.committed = committed;
  }

  get provider(): string | null {
    return this.result?.provider ?? null;
  }

  get receipt(): Receipt | null {
    return this.result?.receipt ?? null;
  }

  [Symbol.asyncIterator](): AsyncIterator<unknown> {
    return this;
  }

  next(): Promise<IteratorResult<unknown>> {
    if (this.committed !== null) return this.committed.next();
    return this.walk.next().then(this.after);
  }

  /** Leaving a for-await early closes the provider's stream; the attempt counts as served. */
  return(): Promise<IteratorResult<unknown>> {
    if (this.committed !== null) return this.committed.return?.() ?? Promise.resolve({ done: true, value: undefined });
    return this.walk.return(undefined);
  }

  /** The walk ended: by handing the stream over at its commit point, or for good. */
  private readonly after = (next: IteratorResult<unknown>): IteratorResult<unknown> | Promise<IteratorResult<unknown>> =>
    next.done && this.committed !== null ? this.committed.next() : next;
}

/**
 * What a provider stream said of itself once read, as the Python SDK reads it: the model that
 * served (`model_id`) and its tokens (`input_tokens`, `output_tokens`), properties a stream
 * transport's iterable may carry (an adapter sets them from the library's usage event).
 */
function streamReport(stream: unknown): { modelId: string; tokens: [number | null, number | null] } {
  const said = (stream ?? {}) as { model_id?: unknown; input_tokens?: unknown; output_tokens?: unknown };
  return {
    modelId: typeof said.model_id === "string" ? said.model_id : "",
    tokens: [tokenCount(said.input_tokens), tokenCount(said.output_tokens)],
  };
}

/** A stream's own `text(chunk)` (the adapters on the vendors' libraries have one), bound to it. */
function streamText(stream: unknown): ((chunk: unknown) => string) | null {
  const text = (stream as { text?: unknown } | null)?.text;
  return typeof text === "function" ? (chunk) => String(text.call(stream, chunk) ?? "") : null;
}

function tokenCount(count: unknown): number | null {
  return Number.isInteger(count) && (count as number) >= 0 ? (count as number) : null;
}

function shortError(a: Attempt): string {
  if (a.status !== null) return `HTTP ${a.status}`;
  return a.error ? `${a.outcome}: ${a.error}` : a.outcome;
}

function defaultContent(chunk: unknown): string {
  if (typeof chunk === "string") return chunk;
  if (chunk && typeof chunk === "object") {
    const { text, content } = chunk as { text?: unknown; content?: unknown };
    if (typeof text === "string") return text;
    if (typeof content === "string") return content;
  }
  return "";
}

class BoundPassed extends Error {
  override name = "BoundPassed";
}

/**
 * A stream attempt's bounds on its chunks, on the monotonic clock, with one timer for the
 * whole attempt rather than one per chunk: `wait(next, due, idleS, deadline)` moves the due
 * time (`due`, or `idleS` from now within `deadline`) and races the chunk against it; the
 * timer, when it fires early (the due time moved on since it was set), sets itself again for
 * what is left. Past the due time the attempt is aborted and the wait rejected with
 * BoundPassed.
 */
class ChunkBounds {
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private due = Infinity;
  private seconds = 0;
  private reject: ((error: Error) => void) | null = null;

  constructor(private readonly controller: AbortController) {}

  wait<T>(promise: Promise<T>, due: number | null, idleS: number, deadline: number): Promise<T> {
    const now = monotonic();
    this.due = due ?? (now + idleS < deadline ? now + idleS : deadline);
    this.seconds = this.due - now;
    if (!(this.seconds > 0)) {
      this.controller.abort();
      promise.catch(() => undefined);
      return Promise.reject(new BoundPassed(`no chunk within ${g(Math.max(0, this.seconds))}s`));
    }
    if (this.due < this.timerAt) this.arm(now);
    return new Promise<T>((resolve, reject) => {
      this.reject = reject;
      promise.then(resolve, reject);
    });
  }

  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.reject = null;
  }

  private arm(now: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAt = this.due;
    this.timer = setTimeout(this.fire, Math.max(0, (this.due - now) * 1000));
  }

  private readonly fire = (): void => {
    this.timer = null;
    this.timerAt = Infinity;
    const now = monotonic();
    if (now < this.due) {
      this.arm(now);
      return;
    }
    this.controller.abort();
    this.reject?.(new BoundPassed(`no chunk within ${g(this.seconds)}s`));
  };
}

/** `promise`, or a BoundPassed rejection once `seconds` pass (the attempt is aborted). */
function withBound<T>(
  promise: Promise<T>,
  seconds: number,
  controller: AbortController,
  late: () => Error = () => new BoundPassed(`no chunk within ${g(seconds)}s`),
): Promise<T> {
  if (!(seconds > 0)) {
    controller.abort();
    promise.catch(() => undefined);
    return Promise.reject(late());
  }
  let timer: NodeJS.Timeout | undefined;
  const passed = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      promise.catch(() => undefined);
      reject(late());
    }, seconds * 1000);
  });
  return Promise.race([promise, passed]).finally(() => clearTimeout(timer));
}
