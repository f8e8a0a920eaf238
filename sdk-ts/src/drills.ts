/**
 * Failover drills: which requests a router drills, whether a client takes part, and the
 * usage report's `drill` section (what the routers recorded while a drill was active).
 * The document's `drill` is parsed with the document (`document.ts`); the injection itself
 * is the Router's (`router.ts`).
 */

import { type Drill, type Step, stepName } from "./document.js";
import { latencyBucket } from "./health.js";
import { LATENCY_BOUNDS_MS, drillServiceDigest, g } from "./wire.js";

/** Each fault in words, as the control plane describes a drill. */
export const FAULT_WORDS: Readonly<Record<string, string>> = Object.freeze({
  server_error: "a server error (HTTP 500)",
  rate_limited: "rate limiting (HTTP 429)",
  timeout: "no answer (a timeout)",
  first_chunk_late: "a first chunk too late",
  stream_cut_before_first_chunk: "a stream cut before its first chunk",
  invalid_answer: "an empty or invalid answer",
});

/** One line: "hop 1 (vendor_a/large) fails with a server error (HTTP 500) for 10 % of requests". */
export function describeDrill(drill: Drill, chain: readonly Step[]): string {
  const where = drill.hop > 0 && drill.hop <= chain.length ? ` (${stepName(chain[drill.hop - 1])})` : "";
  return `hop ${drill.hop}${where} fails with ${FAULT_WORDS[drill.fault] ?? drill.fault} for ${g(drill.share_bp / 100)} % of requests`;
}

/**
 * Whether request number `n` (0-based, counted per drill among the requests that reached the
 * drilled hop) is drilled: exact to one request over any window.
 */
export function drilledAt(n: number, shareBp: number): boolean {
  return Math.floor(((n + 1) * shareBp) / 10000) !== Math.floor((n * shareBp) / 10000);
}

/**
 * Whether a service takes part in `drill`: every service when `services` is empty, else only
 * those named by their digest; a client without a token (`tokenSha256Hex` null) only then.
 */
export function takesPartIn(drill: Drill, tokenSha256Hex: string | null): boolean {
  if (drill.services.length === 0) return true;
  return tokenSha256Hex !== null && drill.services.includes(drillServiceDigest(drill.id, tokenSha256Hex));
}

/** How one request routed while a drill was active ended, as the Router tells its client (`recordDrill`). */
export interface DrillRequest {
  /** A fault was injected at the drilled hop. */
  readonly drilled: boolean;
  /** The 1-based step of the chain that served it; null when it failed. */
  readonly ended_on: number | null;
  /** The RoutingError's name when it failed (`DeadlineExceeded`, `NoEligibleRoute`, ...); null when served. */
  readonly error: string | null;
  /** Attempts on step `hop + 1` (0 or 1), and those of them that did not serve: drilled requests only. */
  readonly fallback_attempts: number;
  readonly fallback_failures: number;
  /** The whole request's duration, in seconds. */
  readonly elapsed_s: number;
}

export interface DrillCounts {
  requests: number;
  drilled: number;
  ended_on: Map<number, number>;
  failed: number;
  deadline: number;
  refusals: number;
  fallback_attempts: number;
  fallback_failures: number;
  latency_drilled: number[];
  latency_other: number[];
}

/** The most drills whose counts a client keeps at once (a document carries one). */
const MAX_DRILLS = 8;

function histogram(): number[] {
  return new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);
}

export function noDrillCounts(): DrillCounts {
  return {
    requests: 0,
    drilled: 0,
    ended_on: new Map(),
    failed: 0,
    deadline: 0,
    refusals: 0,
    fallback_attempts: 0,
    fallback_failures: 0,
    latency_drilled: histogram(),
    latency_other: histogram(),
  };
}

function merge(into: DrillCounts, from: DrillCounts): void {
  into.requests += from.requests;
  into.drilled += from.drilled;
  for (const [step, count] of from.ended_on) into.ended_on.set(step, (into.ended_on.get(step) ?? 0) + count);
  into.failed += from.failed;
  into.deadline += from.deadline;
  into.refusals += from.refusals;
  into.fallback_attempts += from.fallback_attempts;
  into.fallback_failures += from.fallback_failures;
  from.latency_drilled.forEach((count, i) => (into.latency_drilled[i] += count));
  from.latency_other.forEach((count, i) => (into.latency_other[i] += count));
}

/** The usage report's `drill` section for drill `id`. */
export function drillBody(id: number, counts: DrillCounts): Record<string, unknown> {
  return {
    id,
    requests: counts.requests,
    drilled: counts.drilled,
    ended_on: Object.fromEntries([...counts.ended_on].sort(([a], [b]) => a - b).map(([step, count]) => [String(step), count])),
    failed: counts.failed,
    deadline: counts.deadline,
    refusals: counts.refusals,
    fallback_attempts: counts.fallback_attempts,
    fallback_failures: counts.fallback_failures,
    latency_ms: { drilled: [...counts.latency_drilled], other: [...counts.latency_other] },
  };
}

/** What the routers recorded per drill since the last accepted report. */
export class DrillTally {
  private counts = new Map<number, DrillCounts>();

  record(id: number, request: DrillRequest): void {
    let counts = this.counts.get(id);
    if (counts === undefined) {
      if (this.counts.size >= MAX_DRILLS) return;
      counts = noDrillCounts();
      this.counts.set(id, counts);
    }
    counts.requests += 1;
    const bucket = latencyBucket(request.elapsed_s);
    if (!request.drilled) {
      counts.latency_other[bucket] += 1;
      return;
    }
    counts.drilled += 1;
    counts.latency_drilled[bucket] += 1;
    if (request.ended_on !== null) counts.ended_on.set(request.ended_on, (counts.ended_on.get(request.ended_on) ?? 0) + 1);
    if (request.error !== null) {
      counts.failed += 1;
      if (request.error === "DeadlineExceeded") counts.deadline += 1;
      else if (request.error === "NoEligibleRoute") counts.refusals += 1;
    }
    counts.fallback_attempts += request.fallback_attempts;
    counts.fallback_failures += request.fallback_failures;
  }

  /** The drills with counts not yet reported, oldest first. */
  pending(): number[] {
    return [...this.counts.keys()];
  }

  /** Drill `id`'s counts (all zero when none), removed from the tally. */
  take(id: number): DrillCounts {
    const taken = this.counts.get(id) ?? noDrillCounts();
    this.counts.delete(id);
    return taken;
  }

  /** Put back a batch whose report failed, merged with what came since. */
  putBack(id: number, taken: DrillCounts): void {
    const since = this.counts.get(id);
    if (since !== undefined) merge(taken, since);
    else if (this.counts.size >= MAX_DRILLS) return;
    this.counts.set(id, taken);
  }
}
