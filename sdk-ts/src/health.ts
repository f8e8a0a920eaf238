/**
 * Provider health from the fleet, for the usage report's `"health"` key: each step's
 * attempts by outcome class, served latencies and streams' first chunks in fixed buckets,
 * the tokens the attempts' receipts say they used, and breaker openings. Only counts leave
 * the process. A step's tokens are sums, with the served attempts that said both counts
 * (`served_with_tokens`): the control plane counts its other served attempts as unknown,
 * never as zero.
 */

import type { Attempt } from "./receipts.js";
import { LATENCY_BOUNDS_MS, OUTCOME_CLASSES, type OutcomeClass, REPORT_MAX_PROVIDERS, REPORT_MAX_STEPS } from "./wire.js";

const BY_OUTCOME: Record<string, OutcomeClass> = {
  ok: "served",
  rejected: "rejected",
  refused: "content_policy",
  timeout: "timeout",
  unavailable: "unavailable",
  verify_failed: "verify_failed",
  interrupted: "interrupted",
  error: "unknown",
};

/** The class the usage report counts `attempt` under. */
export function outcomeClass(attempt: Pick<Attempt, "outcome" | "status">): OutcomeClass {
  if (attempt.outcome !== "failed") return BY_OUTCOME[attempt.outcome] ?? "other";
  const status = attempt.status;
  if (status === null) return "unknown";
  if (status === 401 || status === 403) return "credentials";
  if (status === 429) return "rate_limited";
  if (status >= 500 && status <= 599) return "server_error";
  return "other";
}

/** Bucket i counts (bounds[i-1], bounds[i]] ms; the last one those past 30 s. */
export function latencyBucket(elapsedS: number): number {
  const us = Math.round(elapsedS * 1_000_000);
  const index = LATENCY_BOUNDS_MS.findIndex((bound) => us <= bound * 1000);
  return index === -1 ? LATENCY_BOUNDS_MS.length : index;
}

const histogram = () => new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);

interface StepHealth {
  outcomes: Map<OutcomeClass, number>;
  latency_ms: number[];
  first_chunk_ms: number[];
  input_tokens: number;
  output_tokens: number;
  /** Served attempts whose input and output tokens are both in the sums. */
  served_with_tokens: number;
  /** An attempt said its tokens (a served one, or one that failed after using some). */
  tokens_reported: boolean;
}

const stepHealth = (): StepHealth => ({
  outcomes: new Map(),
  latency_ms: histogram(),
  first_chunk_ms: histogram(),
  input_tokens: 0,
  output_tokens: 0,
  served_with_tokens: 0,
  tokens_reported: false,
});

export interface HealthCounts {
  steps: Map<string, { provider: string; model: string; health: StepHealth }>;
  openings: Map<string, number>;
}

export function healthBody(counts: HealthCounts): Record<string, unknown> | null {
  if (counts.steps.size === 0 && counts.openings.size === 0) return null;
  return {
    latency_bounds_ms: [...LATENCY_BOUNDS_MS],
    steps: [...counts.steps.values()].map(({ provider, model, health }) => {
      const entry: Record<string, unknown> = {
        provider,
        model,
        outcomes: Object.fromEntries(OUTCOME_CLASSES.filter((k) => health.outcomes.get(k)).map((k) => [k, health.outcomes.get(k)])),
        latency_ms: [...health.latency_ms],
      };
      if (health.first_chunk_ms.some(Boolean)) entry["first_chunk_ms"] = [...health.first_chunk_ms];
      // A step none of whose attempts said its tokens reads as it did before tokens.
      if (health.tokens_reported) {
        entry["input_tokens"] = health.input_tokens;
        entry["output_tokens"] = health.output_tokens;
        entry["served_with_tokens"] = health.served_with_tokens;
      }
      return entry;
    }),
    breaker_openings: Object.fromEntries(counts.openings),
  };
}

/** What the router told a client since its last accepted report. */
export class HealthTally {
  private counts: HealthCounts = { steps: new Map(), openings: new Map() };

  record(attempt: Attempt): void {
    const kind = outcomeClass(attempt);
    const key = JSON.stringify([attempt.provider, attempt.model]);
    let entry = this.counts.steps.get(key);
    if (entry === undefined) {
      if (this.counts.steps.size >= REPORT_MAX_STEPS) return;
      entry = { provider: attempt.provider, model: attempt.model, health: stepHealth() };
      this.counts.steps.set(key, entry);
    }
    const health = entry.health;
    health.outcomes.set(kind, (health.outcomes.get(kind) ?? 0) + 1);
    if (kind === "served") health.latency_ms[latencyBucket(attempt.elapsed_s)] += 1;
    if (attempt.first_chunk_s !== null) health.first_chunk_ms[latencyBucket(attempt.first_chunk_s)] += 1;
    const { input_tokens, output_tokens } = attempt;
    if (input_tokens !== null || output_tokens !== null) {
      health.tokens_reported = true;
      health.input_tokens += input_tokens ?? 0;
      health.output_tokens += output_tokens ?? 0;
      if (kind === "served" && input_tokens !== null && output_tokens !== null) health.served_with_tokens += 1;
    }
  }

  recordOpening(provider: string): void {
    const openings = this.counts.openings;
    if (openings.has(provider)) openings.set(provider, (openings.get(provider) ?? 0) + 1);
    else if (openings.size < REPORT_MAX_PROVIDERS) openings.set(provider, 1);
  }

  take(): HealthCounts {
    const taken = this.counts;
    this.counts = { steps: new Map(), openings: new Map() };
    return taken;
  }

  /** Merge a batch whose report failed with what came since; the batch's keys first. */
  putBack(taken: HealthCounts): void {
    for (const [key, entry] of this.counts.steps) {
      const held = taken.steps.get(key);
      if (held !== undefined) {
        for (const [kind, count] of entry.health.outcomes) held.health.outcomes.set(kind, (held.health.outcomes.get(kind) ?? 0) + count);
        entry.health.latency_ms.forEach((count, i) => (held.health.latency_ms[i] += count));
        entry.health.first_chunk_ms.forEach((count, i) => (held.health.first_chunk_ms[i] += count));
        held.health.input_tokens += entry.health.input_tokens;
        held.health.output_tokens += entry.health.output_tokens;
        held.health.served_with_tokens += entry.health.served_with_tokens;
        held.health.tokens_reported ||= entry.health.tokens_reported;
      } else if (taken.steps.size < REPORT_MAX_STEPS) {
        taken.steps.set(key, entry);
      }
    }
    for (const [provider, count] of this.counts.openings) {
      if (taken.openings.has(provider)) taken.openings.set(provider, (taken.openings.get(provider) ?? 0) + count);
      else if (taken.openings.size < REPORT_MAX_PROVIDERS) taken.openings.set(provider, count);
    }
    this.counts = taken;
  }
}
