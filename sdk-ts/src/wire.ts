/**
 * What the control plane and every chainclient must agree on, as the Python SDK's
 * `chainclient/wire.py` states it: the step rules, the longest long poll, the usage report's
 * health classes, buckets and token counts, the bytes a document's signature covers, and what
 * a failover drill's clients and server agree on (its faults, share bounds, report cadence and
 * the digest naming a service that takes part), and a chain's failure policy (its commit
 * points and bounds).
 */

import { createHash } from "node:crypto";

export const CHAIN_MIN_STEPS = 1;
export const CHAIN_MAX_STEPS = 4;
export const STEP_MIN_TIMEOUT_MS = 500;
export const STEP_MAX_TIMEOUT_MS = 120_000;
/** The longest long poll (`?wait=`), in seconds. */
export const MAX_WAIT_S = 60;

export const OUTCOME_CLASSES = [
  "served",
  "rejected",
  "credentials",
  "rate_limited",
  "server_error",
  "timeout",
  "unknown",
  "content_policy",
  "unavailable",
  "verify_failed",
  "interrupted",
  "other",
] as const;
export type OutcomeClass = (typeof OUTCOME_CLASSES)[number];

/** Upper bounds (inclusive) of the latency buckets; one more bucket counts the rest. */
export const LATENCY_BOUNDS_MS = [100, 250, 500, 1000, 2500, 5000, 10000, 30000] as const;
/**
 * A usage report's step says the tokens its attempts used with these counts, when one of them
 * said any: input and output tokens summed over the attempts that said them, and how many
 * served attempts said both. The control plane counts a step's other served attempts (and
 * every served attempt of a step without them) as unknown, never as zero tokens.
 */
export const TOKEN_FIELDS = ["input_tokens", "output_tokens", "served_with_tokens"] as const;
export const REPORT_MAX_STEPS = 50;
export const REPORT_MAX_PROVIDERS = 50;

export const SIGNATURE_ALGORITHM = "ed25519";
/** Prefixed to what a document's signature covers. */
export const SIGNATURE_CONTEXT = "chainclient-document/1\n";

/**
 * JSON with keys sorted at every level, no spaces and non-ASCII escaped as `\uXXXX`: the
 * encoding Python writes with `json.dumps(sort_keys=True, separators=(",", ":"),
 * ensure_ascii=True)`, which signatures and state-file digests are computed over.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value)).replace(
    /[\u0080-\uffff]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) sorted[key] = sortKeys((value as Record<string, unknown>)[key]);
    return sorted;
  }
  return value;
}

/**
 * The bytes a chain document's signature covers: `SIGNATURE_CONTEXT`, then the whole
 * document (the signature's `alg`, `key_id` and `signed_at` included, its `value` left out)
 * as canonical JSON.
 */
export function signedContent(document: Record<string, unknown>): Buffer {
  const signature = document["signature"];
  const covered: Record<string, unknown> = {};
  if (signature !== null && typeof signature === "object" && !Array.isArray(signature)) {
    for (const [key, value] of Object.entries(signature)) if (key !== "value") covered[key] = value;
  }
  return Buffer.from(SIGNATURE_CONTEXT + canonicalJson({ ...document, signature: covered }), "ascii");
}

/** A string as Python's `repr()` quotes it, so messages read the same from both clients. */
export function pyRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const escaped = text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
  return quote + (quote === "'" ? escaped.replace(/'/g, "\\'") : escaped) + quote;
}

/** A list of strings as Python prints it: `['a', 'b']`. */
export function pyList(items: Iterable<string>): string {
  return "[" + [...items].map(pyRepr).join(", ") + "]";
}

/** A number of seconds as Python's `%g` prints it (`30`, `0.5`, `1e+03` never arises here). */
export function g(seconds: number): string {
  return Number(seconds.toPrecision(6)).toString();
}

/**
 * A failure policy's `commit`: when a stream's chunks start to reach the caller. At its first
 * chunk with content (`first_chunk`), or once the provider's whole answer came (`complete`: a
 * stream cut, stalled or malformed before its end then falls back to the next step like any
 * failure before the commit point).
 */
export const FAILURE_POLICY_COMMITS = ["first_chunk", "complete"] as const;
export type FailurePolicyCommit = (typeof FAILURE_POLICY_COMMITS)[number];

/** The least a failure policy's `first_chunk_ms` and `idle_ms` may be: a step's least timeout. */
export const FAILURE_POLICY_BOUND_MIN_MS = STEP_MIN_TIMEOUT_MS;
/** The most a failure policy's `first_chunk_ms` and `idle_ms` may be: a step's longest timeout. */
export const FAILURE_POLICY_BOUND_MAX_MS = STEP_MAX_TIMEOUT_MS;

/**
 * The most a failure policy's same-step retry may wait (`retry_same_step.max_wait_ms`), in
 * milliseconds: past it the next step is the faster way to an answer.
 */
export const FAILURE_POLICY_RETRY_MAX_WAIT_MS = 10_000;

/** The faults a failover drill injects (a document's `drill.fault`); a client ignores a drill whose fault it does not know. */
export const DRILL_FAULTS = [
  "server_error",
  "rate_limited",
  "timeout",
  "first_chunk_late",
  "stream_cut_before_first_chunk",
  "invalid_answer",
] as const;
export type DrillFault = (typeof DRILL_FAULTS)[number];

/** The share of requests a drill fails, in basis points: 0.1 % .. 25 %. */
export const DRILL_SHARE_MIN_BP = 10;
export const DRILL_SHARE_MAX_BP = 2500;
/** The longest drill, in minutes. */
export const DRILL_MAX_MINUTES = 60;
/** A client taking part in a drill reports at least this often (seconds) while it runs, and once within it after its end. */
export const DRILL_REPORT_INTERVAL_S = 10;
/** Prefixed to what a drill's service digest covers. */
export const DRILL_SERVICE_CONTEXT = "chainclient-drill/1\n";

/** The lowercase hex SHA-256 of `text` (UTF-8): a token's hash as the control plane stores it. */
export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * How a drill's `services` name a service that takes part: the hex SHA-256 of
 * `DRILL_SERVICE_CONTEXT`, the drill's id, a newline and the hex SHA-256 of the service's
 * token (`sha256Hex(token)`). The server computes it from its stored token hash, so the
 * document names neither a token nor a hash a reader could use.
 */
export function drillServiceDigest(id: number, tokenSha256Hex: string): string {
  return createHash("sha256").update(`${DRILL_SERVICE_CONTEXT}${id}\n${tokenSha256Hex}`, "utf8").digest("hex");
}
