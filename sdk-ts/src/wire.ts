/**
 * What the control plane and every chainclient must agree on, as the Python SDK's
 * `chainclient/wire.py` states it: the step rules, the longest long poll, the usage report's
 * health classes and buckets, and the bytes a document's signature covers.
 */

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
