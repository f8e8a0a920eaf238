/**
 * The chain document as the control plane serves it, the service's compiled-in registry,
 * and the rules a document must pass before it is applied. Messages read as the Python
 * SDK's, word for word: the shared test vectors check both.
 */

import {
  CHAIN_MAX_STEPS,
  CHAIN_MIN_STEPS,
  DRILL_FAULTS,
  DRILL_SHARE_MAX_BP,
  DRILL_SHARE_MIN_BP,
  type DrillFault,
  FAILURE_POLICY_BOUND_MAX_MS,
  FAILURE_POLICY_BOUND_MIN_MS,
  FAILURE_POLICY_COMMITS,
  FAILURE_POLICY_RETRY_MAX_WAIT_MS,
  type FailurePolicyCommit,
  STEP_MAX_TIMEOUT_MS,
  STEP_MIN_TIMEOUT_MS,
  pyRepr,
} from "./wire.js";

/** One place a request may be served from: a provider's model with a timeout. */
export interface Step {
  readonly provider: string;
  readonly model: string;
  readonly timeout_ms: number;
}

export function step(provider: string, model: string, timeout_ms: number): Step {
  return Object.freeze({ provider, model, timeout_ms });
}

/** `provider/model`, as receipts and log lines name a step. */
export function stepName(s: Step): string {
  return `${s.provider}/${s.model}`;
}

/**
 * A provider the service is built to call: where its data goes, its models' capabilities and,
 * optionally, their context windows in tokens (a request too long for one step's window skips
 * the later steps whose window is no larger).
 */
export interface ProviderSpec {
  readonly destination: string;
  readonly models: Readonly<Record<string, Iterable<string>>>;
  readonly contextWindows?: Readonly<Record<string, number>>;
}

/** The service's own compiled-in list of providers (never fetched). */
export class Registry {
  private readonly providers: Map<string, { destination: string; models: Map<string, ReadonlySet<string>>; windows: Map<string, number> }>;

  constructor(providers: Readonly<Record<string, ProviderSpec>>) {
    this.providers = new Map();
    for (const [name, spec] of Object.entries(providers)) {
      if (typeof spec?.destination !== "string" || spec.models === null || typeof spec.models !== "object") {
        throw new TypeError(`registry: provider ${pyRepr(name)} needs a destination (string) and models (model -> capabilities)`);
      }
      const models = new Map<string, ReadonlySet<string>>();
      for (const [model, capabilities] of Object.entries(spec.models)) models.set(model, new Set(capabilities));
      const windows = new Map<string, number>();
      if (spec.contextWindows !== undefined) {
        if (spec.contextWindows === null || typeof spec.contextWindows !== "object") {
          throw new TypeError(`registry: provider ${pyRepr(name)}: contextWindows must be an object (model -> tokens)`);
        }
        for (const [model, tokens] of Object.entries(spec.contextWindows)) {
          if (!models.has(model)) throw new TypeError(`registry: provider ${pyRepr(name)} gives a context window for ${pyRepr(model)}, which is not one of its models`);
          if (!(typeof tokens === "number" && Number.isInteger(tokens) && tokens > 0)) {
            throw new TypeError(`registry: provider ${pyRepr(name)}: the context window of ${pyRepr(model)} must be a positive integer (tokens)`);
          }
          windows.set(model, tokens);
        }
      }
      this.providers.set(name, { destination: spec.destination, models, windows });
    }
  }

  has(provider: string): boolean {
    return this.providers.has(provider);
  }

  names(): string[] {
    return [...this.providers.keys()];
  }

  destination(provider: string): string | undefined {
    return this.providers.get(provider)?.destination;
  }

  hasModel(provider: string, model: string): boolean {
    return this.providers.get(provider)?.models.has(model) ?? false;
  }

  capabilities(provider: string, model: string): ReadonlySet<string> {
    return this.providers.get(provider)?.models.get(model) ?? new Set();
  }

  /** The model's context window in tokens; undefined when the registry does not say. */
  contextWindow(provider: string, model: string): number | undefined {
    return this.providers.get(provider)?.windows.get(model);
  }
}

/** A document that must not be applied; `message` says why. */
export class DocumentInvalid extends Error {
  override name = "DocumentInvalid";
}

export interface Marking {
  readonly degraded: boolean;
  readonly note?: string;
  readonly [key: string]: unknown;
}

export const NO_MARKING: Marking = Object.freeze({ degraded: false, note: "" });

/**
 * What a chain's routers do on a failure, as the document carries it for the served preset
 * (`failure_policy`) and for the default (`default.failure_policy`):
 *
 * - `commit`: when a stream's chunks start to reach the caller: at its first chunk with content
 *   (`first_chunk`), or once the provider's whole answer came (`complete`: a stream cut,
 *   stalled or malformed before its end falls back to the next step);
 * - `firstChunkMs`, `idleMs`: a stream's first-chunk and idle bounds (null: the step's timeout);
 * - `retryMaxWaitMs`: a failed attempt that may succeed on a second try (a 429, 500, 503 or 529
 *   known not to have acted, or an unavailable provider) is retried once on the same step when
 *   its `Retry-After` is at most this long; null: no same-step retry.
 */
export interface FailurePolicy {
  readonly commit: FailurePolicyCommit;
  readonly firstChunkMs: number | null;
  readonly idleMs: number | null;
  readonly retryMaxWaitMs: number | null;
}

/**
 * A policy in words, for receipts and log lines: "commit complete, first chunk within 5000 ms,
 * retry the same step once (Retry-After up to 2000 ms)".
 */
export function describeFailurePolicy(policy: FailurePolicy): string {
  const terms = [`commit ${policy.commit}`];
  if (policy.firstChunkMs !== null) terms.push(`first chunk within ${policy.firstChunkMs} ms`);
  if (policy.idleMs !== null) terms.push(`idle at most ${policy.idleMs} ms`);
  if (policy.retryMaxWaitMs !== null) terms.push(`retry the same step once (Retry-After up to ${policy.retryMaxWaitMs} ms)`);
  return terms.join(", ");
}

/** The chain's default preset: what a pin falls back to at its expiry, server or not. */
export interface DefaultChain {
  readonly preset: string;
  readonly chain: readonly Step[];
  readonly marking: Marking;
  /** The default preset's failure policy (`default.failure_policy`): null without one, and for one that is ignored. */
  readonly failurePolicy: FailurePolicy | null;
  /** Why the default's failure policy was ignored (it failed validation); null otherwise. */
  readonly failurePolicyIgnored: string | null;
}

export interface DocumentSignature {
  readonly alg: string;
  readonly key_id: string;
  readonly signed_at: string;
  readonly value: string;
}

export type Source = "default" | "disk" | "live";

/**
 * A failover drill the document carries while it runs: `share_bp` of the requests that reach
 * step `hop` (1-based, never the last) fail with `fault`, in the client and before dispatch,
 * from `starts_at` to `ends_at` (`starts_at_s`, `ends_at_s`: epoch seconds). `services`: the
 * digests of the services taking part (`drillServiceDigest`), empty for every service.
 */
export interface Drill {
  readonly id: number;
  readonly hop: number;
  readonly fault: DrillFault;
  readonly share_bp: number;
  readonly services: readonly string[];
  readonly starts_at: string;
  readonly ends_at: string;
  readonly starts_at_s: number;
  readonly ends_at_s: number;
}

/**
 * The live chain, plus where this copy came from (`source`). Documents are ordered by
 * (epoch, version); `expires_at_s` is `expires_at` in epoch seconds.
 */
export interface ChainDocument {
  readonly name: string;
  readonly epoch: number;
  readonly version: number;
  readonly preset: string;
  readonly is_default: boolean;
  readonly chain: readonly Step[];
  readonly marking: Marking;
  readonly updated_by: string;
  readonly reason: string;
  readonly updated_at: string | null;
  readonly expires_at: string | null;
  readonly default: DefaultChain | null;
  readonly source: Source;
  readonly expires_at_s: number | null;
  /**
   * The failover drill the document carries, if any: null without one, and for one this
   * client cannot apply (malformed, a fault it does not know, a hop that is not a step of the
   * chain but its last), which is ignored rather than making the document invalid;
   * `drill_ignored` then says why.
   */
  readonly drill: Drill | null;
  readonly drill_ignored: string | null;
  /**
   * The served preset's failure policy (`failure_policy`): null without one (and for a
   * document built in code), and for one that fails validation, which is ignored rather than
   * making the document invalid; `failurePolicyIgnored` then says why. A pin served past its
   * expiry carries its default's (`default.failurePolicy`).
   */
  readonly failurePolicy: FailurePolicy | null;
  readonly failurePolicyIgnored: string | null;
  /** The control plane's signature the document carried (verified only with `trustedKeys`). */
  readonly signature: DocumentSignature | null;
  /** The JSON object as received (what the state file keeps, so it verifies again); null for one built in code. */
  readonly received: Readonly<Record<string, unknown>> | null;
}

/** Whether `a` is newer than `b` by (epoch, version): negative, zero or positive. */
export function compareOrder(a: { epoch: number; version: number }, b: { epoch: number; version: number }): number {
  return a.epoch !== b.epoch ? a.epoch - b.epoch : a.version - b.version;
}

/** Throw DocumentInvalid unless `steps` form a chain (one this registry can route, if given). */
export function checkSteps(steps: readonly Step[], registry: Registry | null = null): void {
  if (steps.length < CHAIN_MIN_STEPS || steps.length > CHAIN_MAX_STEPS) {
    throw new DocumentInvalid(`a chain has ${CHAIN_MIN_STEPS}..${CHAIN_MAX_STEPS} steps, got ${steps.length}`);
  }
  const seen = new Set<string>();
  steps.forEach((s, i) => {
    let problem: string | null = registry !== null ? unknownTo(registry, s) : null;
    if (problem === null && !(s.timeout_ms >= STEP_MIN_TIMEOUT_MS && s.timeout_ms <= STEP_MAX_TIMEOUT_MS)) {
      problem = `timeout_ms ${s.timeout_ms} is outside ${STEP_MIN_TIMEOUT_MS}..${STEP_MAX_TIMEOUT_MS}`;
    }
    if (problem !== null) throw new DocumentInvalid(`chain[${i}]: ${problem}`);
    const key = JSON.stringify([s.provider, s.model]);
    if (seen.has(key)) {
      throw new DocumentInvalid(registry !== null ? `chain[${i}]: duplicate step ${stepName(s)}` : "duplicate step in chain");
    }
    seen.add(key);
  });
}

function unknownTo(registry: Registry, s: Step): string | null {
  if (!registry.has(s.provider)) return `unknown provider ${pyRepr(s.provider)}`;
  if (!registry.hasModel(s.provider, s.model)) return `unknown model ${pyRepr(s.model)} for provider ${pyRepr(s.provider)}`;
  return null;
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** Epoch seconds of an RFC 3339 time with a zone; throws RangeError if it is not one. */
export function parseTime(text: string): number {
  const m = RFC3339.exec(text);
  const invalid = () => new RangeError(`${pyRepr(text)} is not an RFC 3339 time with a time zone`);
  if (m === null) throw invalid();
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  const fraction = Number((m[7] ?? "0").padEnd(6, "0")) / 1e6;
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59) {
    throw invalid();
  }
  let offsetMin = 0;
  if (m[8] === undefined) {
    const zoneH = Number(m[10]);
    const zoneM = Number(m[11]);
    if (zoneH > 23 || zoneM > 59) throw invalid();
    offsetMin = (m[9] === "-" ? -1 : 1) * (zoneH * 60 + zoneM);
  }
  const utc = Date.UTC(year, month - 1, day, hour, minute, second) / 1000;
  return utc - offsetMin * 60 + fraction;
}

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

function typeName(value: unknown): string {
  if (value === null) return "NoneType";
  if (Array.isArray(value)) return "list";
  switch (typeof value) {
    case "string":
      return "str";
    case "boolean":
      return "bool";
    case "number":
      return Number.isInteger(value) ? "int" : "float";
    case "object":
      return "dict";
    default:
      return typeof value;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/** The compiled-in default steps as a document: version 0, source `default`. */
export function compiledDefault(name: string, steps: readonly Step[]): ChainDocument {
  return Object.freeze({
    name,
    epoch: 0,
    version: 0,
    preset: "compiled-default",
    is_default: true,
    chain: Object.freeze([...steps]),
    marking: NO_MARKING,
    updated_by: "compiled-in",
    reason: "compiled-in default",
    updated_at: null,
    expires_at: null,
    default: null,
    source: "default" as const,
    expires_at_s: null,
    drill: null,
    drill_ignored: null,
    failurePolicy: null,
    failurePolicyIgnored: null,
    signature: null,
    received: null,
  });
}

/** Parse and validate a document; throw DocumentInvalid naming the first problem. */
export function parseDocument(
  data: unknown,
  options: {
    registry?: Registry | null;
    source?: Source;
    /** freeze `data` in place rather than copy it (it was just parsed) */
    adopt?: boolean;
  } = {},
): ChainDocument {
  const registry = options.registry ?? null;
  const keep = options.adopt ? <T>(value: T): T => deepFreeze(value) : <T>(value: T): T => deepFreeze(structuredClone(value));
  if (!isObject(data)) throw new DocumentInvalid(`document must be a JSON object, got ${typeName(data)}`);
  const text = (key: string): string => {
    const value = data[key];
    if (typeof value !== "string") throw new DocumentInvalid(`${pyRepr(key)} must be a string`);
    if (!value.trim()) throw new DocumentInvalid(`${pyRepr(key)} must not be blank`);
    return value;
  };
  const optionalText = (key: string): string | null => {
    const value = data[key];
    if (value !== undefined && value !== null && typeof value !== "string") {
      throw new DocumentInvalid(`${pyRepr(key)} must be a string or null`);
    }
    return (value as string | undefined) ?? null;
  };
  const version = data["version"];
  if (!isCount(version)) throw new DocumentInvalid("'version' must be a non-negative integer");
  const epoch = data["epoch"] ?? 0;
  if (!isCount(epoch)) throw new DocumentInvalid("'epoch' must be a non-negative integer");
  const isDefault = data["is_default"];
  if (typeof isDefault !== "boolean") throw new DocumentInvalid("'is_default' must be a boolean");
  const steps = parseSteps(data["chain"]);
  checkSteps(steps, registry);
  const name = text("name");
  const preset = text("preset");
  const marking = parseMarking(data["marking"], "'marking'", keep);
  const updatedBy = text("updated_by");
  const reason = text("reason");
  const updatedAt = optionalText("updated_at");
  const expiresAt = optionalText("expires_at");
  const defaultChain = parseDefault(data["default"], registry, keep);
  let drillIgnored: string | null = null;
  const drill = drillOf(data["drill"], steps.length, (why) => (drillIgnored = why));
  let policyIgnored: string | null = null;
  const failurePolicy = failurePolicyOf(data["failure_policy"], "failure_policy", (why) => (policyIgnored = why));
  let expiresAtS: number | null = null;
  if (expiresAt !== null) {
    try {
      expiresAtS = parseTime(expiresAt);
    } catch (error) {
      throw new DocumentInvalid(`'expires_at': ${(error as Error).message}`);
    }
  }
  return Object.freeze({
    name,
    epoch,
    version,
    preset,
    is_default: isDefault,
    chain: steps,
    marking,
    updated_by: updatedBy,
    reason,
    updated_at: updatedAt,
    expires_at: expiresAt,
    default: defaultChain,
    source: options.source ?? "live",
    expires_at_s: expiresAtS,
    drill,
    drill_ignored: drillIgnored,
    failurePolicy,
    failurePolicyIgnored: policyIgnored,
    signature: signatureOf(data["signature"]),
    received: keep(data),
  });
}

/**
 * The document's `drill`, or null: absent, or not one this client can apply. A bad drill
 * never makes the document invalid (a newer server may send a fault this client does not
 * know): it is ignored, and `onDrillIgnored` is told why.
 */
export function drillOf(data: unknown, chainLength: number, onDrillIgnored?: (why: string) => void): Drill | null {
  return unlessInvalid(data, (raw) => parseDrill(raw, chainLength), onDrillIgnored);
}

/** `parse(data)`, or null: `data` absent, or a part this client cannot apply (`onIgnored` is told why). */
function unlessInvalid<T>(data: unknown, parse: (data: unknown) => T, onIgnored?: (why: string) => void): T | null {
  if (data === undefined || data === null) return null;
  try {
    return parse(data);
  } catch (error) {
    if (!(error instanceof DocumentInvalid)) throw error;
    onIgnored?.(error.message);
    return null;
  }
}

function parseDrill(data: unknown, chainLength: number): Drill {
  if (!isObject(data)) throw new DocumentInvalid(`'drill' must be an object, got ${typeName(data)}`);
  const { id, hop, fault, share_bp, services, starts_at, ends_at } = data;
  const integer = (value: unknown): value is number => typeof value === "number" && Number.isInteger(value);
  if (!integer(id) || id < 1) throw new DocumentInvalid("drill.id must be a positive integer");
  if (!integer(hop) || hop < 1 || hop >= chainLength) {
    throw new DocumentInvalid(`drill.hop must be a step of the chain but its last (1..${chainLength - 1}), got ${JSON.stringify(hop)}`);
  }
  if (typeof fault !== "string" || !(DRILL_FAULTS as readonly string[]).includes(fault)) {
    throw new DocumentInvalid(`drill.fault ${typeof fault === "string" ? pyRepr(fault) : JSON.stringify(fault)} is not one this client knows`);
  }
  if (!integer(share_bp) || share_bp < DRILL_SHARE_MIN_BP || share_bp > DRILL_SHARE_MAX_BP) {
    throw new DocumentInvalid(`drill.share_bp must be an integer within ${DRILL_SHARE_MIN_BP}..${DRILL_SHARE_MAX_BP}`);
  }
  if (!Array.isArray(services) || !services.every((digest) => typeof digest === "string")) {
    throw new DocumentInvalid("drill.services must be a list of strings");
  }
  const instant = (key: string, value: unknown): number => {
    if (typeof value !== "string") throw new DocumentInvalid(`drill.${key} must be a string`);
    try {
      return parseTime(value);
    } catch (error) {
      throw new DocumentInvalid(`drill.${key}: ${(error as Error).message}`);
    }
  };
  const startsAtS = instant("starts_at", starts_at);
  const endsAtS = instant("ends_at", ends_at);
  if (!(startsAtS < endsAtS)) throw new DocumentInvalid("drill.ends_at must be after drill.starts_at");
  return Object.freeze({
    id,
    hop,
    fault: fault as DrillFault,
    share_bp,
    services: Object.freeze([...(services as string[])]),
    starts_at: starts_at as string,
    ends_at: ends_at as string,
    starts_at_s: startsAtS,
    ends_at_s: endsAtS,
  });
}

/**
 * A document's failure policy (`where`: `failure_policy`, or `default.failure_policy`), or
 * null: absent, null, or one that fails validation. A bad policy never makes the document
 * invalid (a newer server may send a commit this client does not know): it is ignored, and
 * `onIgnored` is told why. A missing key is its default (commit `first_chunk`, the others
 * null); unknown keys are ignored.
 */
export function failurePolicyOf(data: unknown, where = "failure_policy", onIgnored?: (why: string) => void): FailurePolicy | null {
  return unlessInvalid(data, (raw) => parseFailurePolicy(raw, where), onIgnored);
}

function parseFailurePolicy(data: unknown, where: string): FailurePolicy {
  if (!isObject(data)) throw new DocumentInvalid(`${pyRepr(where)} must be an object, got ${typeName(data)}`);
  const shown = (value: unknown): string => (value === undefined ? "undefined" : JSON.stringify(value));
  const integer = (value: unknown): value is number => typeof value === "number" && Number.isInteger(value);
  const commit = "commit" in data ? data["commit"] : FAILURE_POLICY_COMMITS[0];
  if (typeof commit !== "string" || !(FAILURE_POLICY_COMMITS as readonly string[]).includes(commit)) {
    throw new DocumentInvalid(`${where}.commit ${shown(commit)} is not one this client knows`);
  }
  const bound = (key: string): number | null => {
    const value = data[key] ?? null;
    if (value === null) return null;
    if (!integer(value) || value < FAILURE_POLICY_BOUND_MIN_MS || value > FAILURE_POLICY_BOUND_MAX_MS) {
      throw new DocumentInvalid(
        `${where}.${key} must be null or an integer within ${FAILURE_POLICY_BOUND_MIN_MS}..${FAILURE_POLICY_BOUND_MAX_MS} (milliseconds), got ${shown(value)}`,
      );
    }
    return value;
  };
  const firstChunkMs = bound("first_chunk_ms");
  const idleMs = bound("idle_ms");
  const retry = data["retry_same_step"] ?? null;
  let retryMaxWaitMs: number | null = null;
  if (retry !== null) {
    if (!isObject(retry)) throw new DocumentInvalid(`${where}.retry_same_step must be null or an object with max_wait_ms, got ${typeName(retry)}`);
    const wait = retry["max_wait_ms"];
    if (!integer(wait) || wait < 0 || wait > FAILURE_POLICY_RETRY_MAX_WAIT_MS) {
      throw new DocumentInvalid(
        `${where}.retry_same_step.max_wait_ms must be an integer within 0..${FAILURE_POLICY_RETRY_MAX_WAIT_MS} (milliseconds), got ${shown(wait)}`,
      );
    }
    retryMaxWaitMs = wait;
  }
  return Object.freeze({ commit: commit as FailurePolicyCommit, firstChunkMs, idleMs, retryMaxWaitMs });
}

function signatureOf(data: unknown): DocumentSignature | null {
  if (!isObject(data)) return null;
  const { alg, key_id, signed_at, value } = data;
  if (typeof alg === "string" && typeof key_id === "string" && typeof signed_at === "string" && typeof value === "string") {
    return Object.freeze({ alg, key_id, signed_at, value });
  }
  return null;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object") {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

function parseSteps(raw: unknown, where = ""): readonly Step[] {
  if (!Array.isArray(raw)) {
    throw new DocumentInvalid(where ? `${where}chain must be a list of steps` : "'chain' must be a list of steps");
  }
  return Object.freeze(
    raw.map((item: unknown, i: number) => {
      if (!isObject(item)) throw new DocumentInvalid(`${where}chain[${i}] must be an object`);
      const { provider, model, timeout_ms } = item;
      if (typeof provider !== "string" || typeof model !== "string") {
        throw new DocumentInvalid(`${where}chain[${i}]: provider and model must be strings`);
      }
      if (typeof timeout_ms !== "number" || !Number.isInteger(timeout_ms)) {
        throw new DocumentInvalid(`${where}chain[${i}]: timeout_ms must be an integer`);
      }
      return step(provider, model, timeout_ms);
    }),
  );
}

type Keep = <T>(value: T) => T;

function parseMarking(marking: unknown, label: string, keep: Keep): Marking {
  if (marking === undefined || marking === null) return NO_MARKING;
  if (!isObject(marking) || typeof (marking["degraded"] ?? false) !== "boolean") {
    throw new DocumentInvalid(`${label} must be an object with a boolean 'degraded'`);
  }
  return keep(marking) as Marking;
}

function parseDefault(raw: unknown, registry: Registry | null, keep: Keep): DefaultChain | null {
  if (raw === undefined || raw === null) return null;
  if (!isObject(raw)) {
    throw new DocumentInvalid(`default.{preset, chain, marking}: an object is required, got ${typeName(raw)}`);
  }
  const preset = raw["preset"];
  if (typeof preset !== "string" || !preset.trim()) throw new DocumentInvalid("default.preset must be a non-blank string");
  const steps = parseSteps(raw["chain"], "default.");
  try {
    checkSteps(steps, registry);
  } catch (error) {
    const why = (error as Error).message;
    throw new DocumentInvalid(why.startsWith("chain") ? `default.${why}` : `default.chain: ${why}`);
  }
  const marking = parseMarking(raw["marking"], "default.marking", keep);
  let policyIgnored: string | null = null;
  const failurePolicy = failurePolicyOf(raw["failure_policy"], "default.failure_policy", (why) => (policyIgnored = why));
  return Object.freeze({ preset, chain: steps, marking, failurePolicy, failurePolicyIgnored: policyIgnored });
}

/**
 * Why a client that applies only `environment`'s documents (null: any) refuses `document`
 * (its `environment` field, signed); null when it does not. The Python SDK's words.
 */
export function environmentRefusal(document: Record<string, unknown> | null, environment: string | null): string | null {
  const named = document?.["environment"];
  if (environment === null || named === environment) return null;
  return (
    `document is of the ${typeof named === "string" ? pyRepr(named) : "None"} environment, not ${pyRepr(environment)}: ` +
    "point the client at that environment's documents"
  );
}

/** The document as the control plane serves it: the object it was parsed from, unchanged. */
export function documentJson(document: ChainDocument): Record<string, unknown> {
  if (document.received !== null) return structuredClone(document.received) as Record<string, unknown>;
  return {
    name: document.name,
    version: document.version,
    preset: document.preset,
    is_default: document.is_default,
    chain: document.chain.map((s) => ({ ...s })),
    marking: { ...document.marking },
    updated_by: document.updated_by,
    reason: document.reason,
    updated_at: document.updated_at,
    expires_at: document.expires_at,
    epoch: document.epoch,
    default:
      document.default === null
        ? null
        : {
            preset: document.default.preset,
            chain: document.default.chain.map((s) => ({ ...s })),
            marking: { ...document.default.marking },
            ...(document.default.failurePolicy !== null ? { failure_policy: failurePolicyJson(document.default.failurePolicy) } : {}),
          },
    ...(document.failurePolicy !== null ? { failure_policy: failurePolicyJson(document.failurePolicy) } : {}),
  };
}

/** A failure policy as the document carries it (every key, as the control plane sends it). */
export function failurePolicyJson(policy: FailurePolicy): Record<string, unknown> {
  return {
    commit: policy.commit,
    first_chunk_ms: policy.firstChunkMs,
    idle_ms: policy.idleMs,
    retry_same_step: policy.retryMaxWaitMs === null ? null : { max_wait_ms: policy.retryMaxWaitMs },
  };
}

/** What replaces a pin from its expiry on: the chain's default, until the revert arrives. */
export function expiredPin(pin: ChainDocument, defaultSteps: readonly Step[]): ChainDocument {
  const fallback: DefaultChain = pin.default ?? {
    preset: "compiled-default",
    chain: defaultSteps,
    marking: NO_MARKING,
    failurePolicy: null,
    failurePolicyIgnored: null,
  };
  return Object.freeze({
    ...pin,
    preset: fallback.preset,
    is_default: true,
    chain: fallback.chain,
    marking: fallback.marking,
    updated_by: "chainclient",
    reason:
      `pin ${pin.preset} (v${pin.version}) expired at ${pin.expires_at}; serving the ` +
      `default ${fallback.preset} until the control plane's revert arrives`,
    expires_at: null,
    expires_at_s: null,
    // The drill's hop is a step of the pin's chain, not of the default's.
    drill: null,
    drill_ignored: null,
    // The default is served: its failure policy, not the pin's.
    failurePolicy: fallback.failurePolicy,
    failurePolicyIgnored: fallback.failurePolicyIgnored,
    signature: null,
    received: null,
  });
}

/** The ETag the control plane sends for `document`: `"7"`, or `"2.7"` once an epoch was raised. */
export function entityTag(document: ChainDocument): string {
  return document.epoch === 0 ? `"${document.version}"` : `"${document.epoch}.${document.version}"`;
}

/** `v7`, or `v7 (epoch 2)`, for log lines. */
export function label(document: ChainDocument): string {
  return document.epoch === 0 ? `v${document.version}` : `v${document.version} (epoch ${document.epoch})`;
}
