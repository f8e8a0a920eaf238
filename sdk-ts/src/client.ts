/**
 * `ChainClient`, the poller: follows one chain's live document and keeps serving the last
 * good one. Three layers, lowest first: the compiled-in default (version 0), the
 * last-known-good file (read at construction, before any network), the live document.
 * `current()` reads one reference (and, for a pin, the clock): never a wait, never a throw.
 *
 * The promises are the Python SDK's, checked by the same shared vectors: a document is
 * applied only if (signed by a trusted key, when `trustedKeys` is given,) valid for this
 * service's registry and newer by (epoch, version); a pin is never served past its expiry,
 * server or not; polls send the ETag, long-poll, back off with full jitter and say who asks;
 * usage and provider health are reported in batches that are never lost. While a failover
 * drill it takes part in is active, its reports carry the drill's section at least every
 * `DRILL_REPORT_INTERVAL_S`, and one more after the drill's end.
 */

import { hostname } from "node:os";

import {
  ChainDocument,
  DocumentInvalid,
  Drill,
  Registry,
  Step,
  checkSteps,
  compareOrder,
  compiledDefault,
  entityTag,
  environmentRefusal,
  expiredPin,
  label,
  parseDocument,
} from "./document.js";
import { DrillRequest, DrillTally, describeDrill, drillBody, takesPartIn } from "./drills.js";
import { HealthTally, healthBody } from "./health.js";
import { Answer, Exchange, fetchExchange, nodeExchange } from "./http.js";
import type { Attempt } from "./receipts.js";
import { TrustedKeys } from "./signatures.js";
import { StateFile } from "./stateFile.js";
import { DRILL_REPORT_INTERVAL_S, MAX_WAIT_S, REPORT_MAX_PROVIDERS, g, pyRepr, sha256Hex } from "./wire.js";

export const VERSION = "0.1.0";
export const MAX_DOCUMENT_BYTES = 1 << 20;
/** After a change, a random pause up to this long before the next long poll (spreads a fleet). */
export const REPOLL_SPREAD_S = 0.25;
const HELD_AT_LEAST_S = 1.0;
const MAX_REPORTED_REJECTIONS = 20;
const MAX_REASON_CHARS = 500;
const MAX_RETRY_AFTER_S = 600;
/** How long after its end (or its leaving the document) a drill's last report is retried at the drill's cadence. */
const DRILL_LAST_REPORT_WITHIN_S = 60;

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** Warnings and errors to stderr; info and debug dropped (pass a logger to keep them). */
export const defaultLogger: Logger = {
  debug() {},
  info() {},
  warn: (message) => console.warn(message),
  error: (message) => console.error(message),
};

export interface ChainClientOptions {
  chain: string;
  /** A `read` service token of the control plane (optional only with `published: true`). */
  token?: string | null;
  registry: Registry;
  /** The compiled-in default steps: served until a document comes (version 0). */
  default: readonly Step[];
  /** Where `{chain}.json`, the last-known-good file, is kept; null keeps none. */
  stateDir?: string | null;
  pollInterval?: number;
  longPoll?: boolean;
  service?: string;
  instance?: string;
  onChange?: (document: ChainDocument) => void;
  waitS?: number;
  timeout?: number;
  maxBackoff?: number;
  reportUsage?: boolean;
  usageInterval?: number;
  aheadAfterS?: number;
  /** Key id -> the control plane's Ed25519 public key (base64url): only documents signed by one are applied. */
  trustedKeys?: Readonly<Record<string, string>> | null;
  /** `baseUrl` is a static host or bucket the control plane publishes to (requires `trustedKeys`). */
  published?: boolean;
  /**
   * Apply only this environment's documents (each says which, signed), e.g. `"production"`.
   * The control plane needs it not (the token says which), but a published copy is read
   * without a token: with it, a host or path serving another environment's documents is
   * refused, as a bad signature is.
   */
  environment?: string | null;
  logger?: Logger;
  /** The wall clock in epoch seconds (a pin's expiry is a wall-clock instant); tests pass their own. */
  clock?: () => number;
  /** The fetch to poll with (the global one by default). */
  fetch?: typeof globalThis.fetch;
}

export interface Health {
  chain: string;
  source: string;
  epoch: number;
  version: number;
  preset: string;
  expired_pin: { preset: string; version: number; expires_at: number | null } | null;
  ahead_of_server: { server_epoch: number; server_version: number; since: number } | null;
  last_success_at: number | null;
  last_failure_at: number | null;
  last_error: string | null;
  consecutive_failures: number;
  rejected: number;
  changes: number;
  polls: number;
  long_poll: boolean;
  published: boolean;
  running: boolean;
  state_file: string | null;
  state_file_refused: string | null;
  unreported_requests: number;
  last_usage_report_at: number | null;
  usage_report_failures: number;
  last_save_error: string | null;
  last_save_error_at: number | null;
  signatures: { required: boolean; key_id: string | null; refused: number; last_refused: string | null };
}

interface Snapshot {
  readonly document: ChainDocument;
  /** Epoch seconds; Infinity without an expiry, so one comparison does. */
  readonly expiresAt: number;
  readonly expired: ChainDocument;
}

interface OlderAnswer {
  epoch: number;
  version: number;
  since: number;
}

/** What applying a body came to: whether it became current, the ETag for the next poll (null: keep the one there is), whether it was refused for its signature. */
interface Applied {
  readonly changed: boolean;
  readonly etag: string | null;
  readonly forged?: boolean;
}

interface Refusal {
  version: number | null;
  reason: string;
  at: number;
}

/** A drill this client took part in, until its last report (made once it is over) is accepted. */
interface FollowedDrill {
  drill: Drill;
  /** When (wall clock, `clock`) a report with its section is due next. */
  dueAt: number;
  /** Once it is over (its end passed, or it left the document): until when its last report is retried. */
  giveUpAt: number | null;
}

/** A new drill's first report: soon, spread a little so a fleet does not report at one instant. */
const firstDrillReport = (now: number) => now + uniform(0, 0.2) * DRILL_REPORT_INTERVAL_S;
/** The next report while a drill is active: within `DRILL_REPORT_INTERVAL_S` of the last one, with room for the report's own time. */
const nextDrillReport = (now: number) => now + uniform(0.8, 0.9) * DRILL_REPORT_INTERVAL_S;
/**
 * The least time between two reports the loop sends for a drill, in DRILL_REPORT_INTERVAL_S:
 * a drill's first and last reports never follow another report at once (the control plane
 * admits a few reports per instance and minute); they still come within the interval.
 */
const DRILL_REPORT_GAP = 0.75;

class Stopped extends Error {}

class TimeoutError extends Error {
  override name = "TimeoutError";
}

function positive(name: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0)) throw new RangeError(`${name} must be a positive number of seconds`);
  return value;
}

function headerSafe(name: string, value: string): string {
  if (typeof value !== "string" || /[\r\n\0]/.test(value)) throw new RangeError(`${name} must be a string usable in an HTTP header`);
  return value;
}

function uniform(low: number, high: number): number {
  return low + Math.random() * (high - low);
}

function utc(epochS: number): string {
  return new Date(Math.floor(epochS) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** `Retry-After` in seconds: a number of seconds or an HTTP date; null when unusable. */
export function retryAfterSeconds(value: string | null): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

function errorMessage(body: string): string {
  try {
    const message = JSON.parse(body)?.error?.message;
    if (typeof message === "string") return message.slice(0, 200);
  } catch {
    // not JSON: an excerpt
  }
  return body.slice(0, 200).trim() || "no body";
}

function describe(error: unknown): string {
  const e = error as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === "TimeoutError") return "timed out";
  if (e?.cause?.code) return `${e.cause.code}: ${e.cause.message ?? ""}`.trim();
  return e?.message ? `${e.name ?? "Error"}: ${e.message}` : String(error);
}

export class ChainClient {
  readonly chain: string;
  readonly registry: Registry;
  private readonly defaultSteps: readonly Step[];
  private readonly base: string;
  private readonly token: string | null;
  private readonly clientId: string;
  private readonly published: boolean;
  private readonly environment: string | null;
  private readonly pollInterval: number;
  private readonly waitS: number;
  private readonly timeoutS: number;
  private readonly maxBackoff: number;
  private readonly usageInterval: number;
  private readonly aheadAfterS: number;
  private readonly reportUsage: boolean;
  private readonly trustedKeys: TrustedKeys | null;
  private readonly stateFile: StateFile;
  private readonly onChange: ((document: ChainDocument) => void) | null;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly exchange: Exchange;
  /** The token's SHA-256 (hex), as the control plane stores it: what a drill's `services` are computed from. */
  private readonly tokenSha256: string | null;
  private drillPart: { drill: Drill; part: boolean } | null = null;

  private snapshot: Snapshot;
  private longPollOn: boolean;
  private notedUnheldLongPoll = false;
  private etag: string | null = null;
  /** Copies refused for their signature in a row, and when to ask for a genuine one (clock seconds). */
  private forgedCopies = 0;
  private reaskAt: number | null = null;
  private lastRejection: string | null = null;
  private running = false;
  private stopper: AbortController | null = null;
  private loops: Promise<void>[] = [];

  // what health() reports
  private polls = 0;
  private changes = 0;
  private rejected = 0;
  private consecutiveFailures = 0;
  private outageStarted: number | null = null;
  private lastSuccessAt: number | null = null;
  private lastFailureAt: number | null = null;
  private lastError: string | null = null;
  private stateFileRefused: string | null = null;
  private lastSaveError: string | null = null;
  private lastSaveErrorAt: number | null = null;
  private signatureRefusals = 0;
  private lastSignatureRefusal: string | null = null;
  private expiryNoted: Snapshot | null = null;
  private olderAnswer: OlderAnswer | null = null;
  private aheadNoted = false;
  private lastReportAt: number | null = null;
  /** When (wall clock, `clock`) the last usage report was sent, accepted or not. */
  private lastSentAt = -Infinity;
  private reportFailures = 0;

  // what the next usage report carries
  private served = new Map<string, { requests: number; last: number }>();
  private refusals: Refusal[] = [];
  private readonly tally = new HealthTally();
  private readonly drillTally = new DrillTally();
  private readonly followed = new Map<number, FollowedDrill>();
  private reportNotBefore = 0;
  /** Wakes the report loop early (a document with or without a drill was applied). */
  private wakeReports: (() => void) | null = null;

  constructor(baseUrl: string, options: ChainClientOptions) {
    const chain = options.chain;
    if (typeof chain !== "string" || !chain.trim()) throw new RangeError("chain must be a non-empty string");
    this.pollInterval = positive("pollInterval", options.pollInterval ?? 10);
    this.timeoutS = positive("timeout", options.timeout ?? 10);
    this.maxBackoff = positive("maxBackoff", options.maxBackoff ?? 60);
    this.usageInterval = positive("usageInterval", options.usageInterval ?? 60);
    this.aheadAfterS = positive("aheadAfterS", options.aheadAfterS ?? 30);
    this.waitS = options.waitS ?? 30;
    if (!(this.waitS >= 0 && this.waitS <= MAX_WAIT_S)) throw new RangeError(`waitS must be within 0..${MAX_WAIT_S}`);
    this.published = Boolean(options.published);
    this.environment = options.environment ?? null;
    if (this.environment !== null && (typeof this.environment !== "string" || !this.environment.trim())) {
      throw new RangeError("environment must be a non-empty string (e.g. \"production\"), or null for any");
    }
    const token = options.token ?? null;
    if (this.published && !options.trustedKeys) {
      throw new RangeError(
        "published: true needs trustedKeys: documents from a static host or bucket are applied only when " +
          "the control plane's signature verifies (manage.py signing_keys public --format json prints the keys)",
      );
    }
    if (!this.published && !token) {
      throw new RangeError(
        "token is required: a service token of the control plane (manage.py create_token NAME); " +
          "only a client of published documents (published: true) polls without one",
      );
    }
    if (!(options.registry instanceof Registry)) throw new TypeError("registry must be a Registry");
    const steps = Object.freeze([...(options.default ?? [])]);
    checkSteps(steps, options.registry); // a default the service cannot route is a build bug
    const url = new URL(baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new RangeError(`baseUrl must be http(s)://..., got ${baseUrl}`);
    this.base = `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
    this.chain = chain;
    this.registry = options.registry;
    this.defaultSteps = steps;
    this.token = token === null ? null : headerSafe("token", token);
    this.tokenSha256 = this.token === null ? null : sha256Hex(this.token);
    const service = headerSafe("service", options.service ?? "unknown");
    const instance = headerSafe("instance", options.instance ?? `${hostname()}-${process.pid}`);
    this.clientId = `${service}/${instance}`;
    this.longPollOn = (options.longPoll ?? true) && !this.published && this.waitS > 0;
    this.reportUsage = (options.reportUsage ?? true) && !this.published;
    this.trustedKeys = options.trustedKeys ? TrustedKeys.load(options.trustedKeys) : null;
    this.onChange = options.onChange ?? null;
    this.log = options.logger ?? defaultLogger;
    this.clock = options.clock ?? (() => Date.now() / 1000);
    this.exchange = options.fetch ? fetchExchange(options.fetch) : nodeExchange();
    this.stateFile = new StateFile(options.stateDir ?? null, chain, options.registry, this.trustedKeys, this.environment);
    if (this.stateFile.path === null) {
      this.log.info(`chain ${chain}: stateDir=null, so no last-known-good file is kept; a restart serves the compiled-in default until the first successful poll`);
    }
    const loaded = this.stateFile.load();
    if (loaded.refused !== null) {
      this.stateFileRefused = loaded.refused;
      this.log.warn(`chain ${chain}: ignoring state file ${this.stateFile.path}: ${loaded.refused}`);
    } else if (loaded.document !== null) {
      this.log.info(`chain ${chain}: starting from ${label(loaded.document)} ${loaded.document.preset} saved in ${this.stateFile.path}`);
      if (loaded.document.drill_ignored !== null) {
        this.log.warn(
          `chain ${chain}: ignoring the failover drill in v${loaded.document.version} from ${this.stateFile.path}: ${loaded.document.drill_ignored}; the document itself is applied`,
        );
      }
      this.notePolicy(loaded.document, ` from ${this.stateFile.path}`);
    }
    this.snapshot = this.snapshotOf(loaded.document ?? compiledDefault(chain, steps));
  }

  // -- the read path -------------------------------------------------------------------

  /** The chain to use now: live, else last-known-good, else the default; never past a pin's expiry. */
  current(): ChainDocument {
    const snapshot = this.snapshot;
    return this.clock() < snapshot.expiresAt ? snapshot.document : snapshot.expired;
  }

  health(): Health {
    const now = this.clock();
    const snapshot = this.snapshot;
    const expired = now >= snapshot.expiresAt;
    if (expired) this.noteExpired(snapshot);
    const document = expired ? snapshot.expired : snapshot.document;
    const held = snapshot.document;
    const ahead = this.aheadOfServer(now);
    return {
      chain: this.chain,
      source: document.source,
      epoch: document.epoch,
      version: document.version,
      preset: document.preset,
      expired_pin: expired ? { preset: held.preset, version: held.version, expires_at: held.expires_at_s } : null,
      ahead_of_server: ahead ? { server_epoch: ahead.epoch, server_version: ahead.version, since: ahead.since } : null,
      last_success_at: this.lastSuccessAt,
      last_failure_at: this.lastFailureAt,
      last_error: this.lastError,
      consecutive_failures: this.consecutiveFailures,
      rejected: this.rejected,
      changes: this.changes,
      polls: this.polls,
      long_poll: this.longPollOn,
      published: this.published,
      running: this.running,
      state_file: this.stateFile.path,
      state_file_refused: this.stateFileRefused,
      unreported_requests: [...this.served.values()].reduce((sum, entry) => sum + entry.requests, 0),
      last_usage_report_at: this.lastReportAt,
      usage_report_failures: this.reportFailures,
      last_save_error: this.lastSaveError,
      last_save_error_at: this.lastSaveErrorAt,
      signatures: {
        required: this.trustedKeys !== null,
        key_id: held.signature?.key_id ?? null,
        refused: this.signatureRefusals,
        last_refused: this.lastSignatureRefusal,
      },
    };
  }

  /** Count one request served by `provider` for the next usage report (the Router calls it). */
  record_served(provider: string): void {
    if (!this.reportUsage) return;
    const entry = this.served.get(provider);
    if (entry !== undefined) {
      entry.requests += 1;
      entry.last = Date.now() / 1000;
    } else if (this.served.size < REPORT_MAX_PROVIDERS) {
      this.served.set(provider, { requests: 1, last: Date.now() / 1000 });
    }
  }

  /** Count one attempt for the provider health in the next usage report (the Router calls it). */
  record_attempt(attempt: Attempt): void {
    if (this.reportUsage) this.tally.record(attempt);
  }

  /** Count one opening of `provider`'s circuit breaker (the Router calls it). */
  record_breaker_opened(provider: string): void {
    if (this.reportUsage) this.tally.recordOpening(provider);
  }

  /**
   * Whether this service takes part in `drill`: when it names no service, or names this
   * one's token by its digest (`drillServiceDigest`). A client without a token (published
   * documents) takes part only in a drill for every service. The Router asks it per request.
   */
  takesPart(drill: Drill): boolean {
    const cached = this.drillPart;
    if (cached !== null && cached.drill === drill) return cached.part;
    const part = takesPartIn(drill, this.tokenSha256);
    this.drillPart = { drill, part };
    return part;
  }

  /** Count one request a router routed while `drill` was active, for the report's `drill` section (the Router calls it). */
  recordDrill(drill: Drill, request: DrillRequest): void {
    if (!this.reportUsage) return;
    this.drillTally.record(drill.id, request);
    // A request that ended after the drill did rides with the next report, owed or not.
    const now = this.clock();
    if (now < drill.ends_at_s && !this.followed.has(drill.id)) this.followed.set(drill.id, { drill, dueAt: firstDrillReport(now), giveUpAt: null });
  }

  // -- lifecycle -----------------------------------------------------------------------

  /** Start polling (and usage reports) in the background; idempotent. */
  start(): this {
    if (this.running) return this;
    this.running = true;
    const stopper = new AbortController();
    this.stopper = stopper;
    this.loops = [this.pollLoop(stopper.signal)];
    if (this.reportUsage) this.loops.push(this.reportLoop(stopper.signal));
    return this;
  }

  /** Stop polling: an in-flight long poll is aborted; a last usage report is tried within `timeoutS`. */
  async stop(timeoutS = 0.5): Promise<void> {
    if (!this.running || this.stopper === null) return;
    this.running = false;
    this.stopper.abort();
    this.stopper = null;
    await Promise.allSettled(this.loops);
    this.loops = [];
    if (this.reportUsage && Date.now() / 1000 >= this.reportNotBefore) {
      await this.report(AbortSignal.timeout(Math.max(1, timeoutS * 1000)));
    }
    this.exchange.close?.();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  toString(): string {
    const d = this.snapshot.document;
    return `<ChainClient chain=${pyRepr(this.chain)} v${d.version} ${d.preset} source=${d.source}>`;
  }

  // -- polling -------------------------------------------------------------------------

  private async pollLoop(signal: AbortSignal): Promise<void> {
    let delay = 0;
    while (!signal.aborted) {
      try {
        await sleep(delay, signal);
        delay = await this.pollOnce(signal);
      } catch (error) {
        if (signal.aborted) return;
        this.log.error(`chain ${this.chain}: unexpected error while polling: ${describe(error)}`);
        delay = this.failed(`unexpected ${describe(error)}`);
      }
    }
  }

  /**
   * Poll once, apply what came back and return how long to wait before the next poll, in
   * seconds. The background loop calls it; a test or a service driving its own loop may too.
   */
  async pollOnce(signal?: AbortSignal): Promise<number> {
    const now = this.clock();
    const snapshot = this.snapshot;
    if (now >= snapshot.expiresAt) this.noteExpired(snapshot);
    this.aheadOfServer(now);
    const current = snapshot.document;
    if (this.reaskAt !== null && now >= this.reaskAt) {
      // The refused copy's ETag is kept meanwhile; now ask for anything but the held
      // document, so a genuine copy comes if there is one.
      this.reaskAt = null;
      this.etag = null;
    }
    // While a refused copy's ETag is sent, polls are not held: a long poll on it would wait
    // for the next change, past the time to ask for a genuine copy again.
    const longPoll = this.longPollOn && this.reaskAt === null;
    let url = `${this.base}/api/v1/chains/${encodeURIComponent(this.chain)}`;
    let readTimeout = this.timeoutS;
    if (longPoll) {
      url += `?wait=${g(this.waitS)}`;
      readTimeout += this.waitS;
    }
    const ifNoneMatch = this.etag ?? entityTag(current);
    const headers: Record<string, string> = {
      "If-None-Match": ifNoneMatch,
      "X-Chain-Client": this.clientId,
      "X-Chain-Applied-Version": String(current.version),
      "User-Agent": `chainclient/${VERSION} node/${process.version}`,
      Accept: "application/json",
    };
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    const started = performance.now();
    let answer: Answer;
    try {
      answer = await this.within(readTimeout, signal, (bounded) =>
        this.exchange(url, { method: "GET", headers, signal: bounded, limit: MAX_DOCUMENT_BYTES }),
      );
    } catch (error) {
      return signal?.aborted ? 0 : this.failed(describe(error));
    }
    if (signal?.aborted) return 0;
    const { status, body } = answer;
    const responseHeaders = { get: answer.header };
    if (status === 304) {
      this.succeeded();
      this.etag = responseHeaders.get("ETag") ?? this.etag;
      if (ifNoneMatch === entityTag(current)) this.caughtUp();
      const heldFor = (performance.now() - started) / 1000;
      if (longPoll && heldFor < Math.min(HELD_AT_LEAST_S, this.waitS / 2)) {
        if (!this.notedUnheldLongPoll) {
          this.notedUnheldLongPoll = true;
          this.log.info(`chain ${this.chain}: the control plane answered a long poll at once; polling every ${g(this.pollInterval)}s`);
        }
        return this.interval();
      }
      return longPoll ? 0 : this.interval();
    }
    if (status === 200) {
      this.succeeded();
      const { changed, etag, forged } = await this.apply(body, responseHeaders.get("ETag"));
      if (etag !== null) this.etag = etag;
      this.afterCopy(forged === true);
      return changed && longPoll ? uniform(0, Math.min(REPOLL_SPREAD_S, this.waitS)) : this.interval();
    }
    if (status === 400 && longPoll) {
      this.longPollOn = false;
      this.log.warn(
        `chain ${this.chain}: the control plane refused ?wait= (HTTP 400: ${errorMessage(body)}); long polling off, polling every ${g(this.pollInterval)}s`,
      );
      return 0;
    }
    let delay = this.failed(`HTTP ${status}: ${errorMessage(body)}`);
    const wait = retryAfterSeconds(responseHeaders.get("Retry-After"));
    if (wait !== null && (status === 429 || status === 503)) {
      delay = Math.max(delay, Math.min(wait, Math.max(this.maxBackoff, this.pollInterval)));
    }
    return delay;
  }

  /**
   * After a copy refused for its signature, its ETag is sent, in polls that are not held (a
   * server or a proxy still holding that copy answers 304 rather than sending it again); a
   * genuine copy is asked for again two intervals later (the next poll still sends the ETag),
   * then twice as long after each copy refused in a row, up to `maxBackoff`: a forger always
   * on the way costs the control plane one full answer per `maxBackoff`, damage done once on
   * the way heals at the next ask, and a forger gone is behind the client within `maxBackoff`.
   */
  private afterCopy(forged: boolean): void {
    if (!forged) {
      this.forgedCopies = 0;
      this.reaskAt = null;
      return;
    }
    this.forgedCopies += 1;
    const ceiling = Math.max(this.maxBackoff, this.pollInterval);
    this.reaskAt = this.clock() + Math.min(ceiling, this.pollInterval * 2 ** Math.min(this.forgedCopies, 30));
  }

  /** `call` with a signal aborted by `signal` or after `seconds`: one timer, no signal per poll kept. */
  private async within<T>(seconds: number, signal: AbortSignal | undefined, call: (bounded: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new TimeoutError()), seconds * 1000);
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await call(controller.signal);
    } catch (error) {
      throw controller.signal.reason instanceof TimeoutError ? controller.signal.reason : error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  private async apply(body: string, etag: string | null): Promise<Applied> {
    let data: unknown;
    try {
      data = JSON.parse(body);
    } catch (error) {
      return this.refuse(null, etag, `not JSON (${(error as Error).message})`);
    }
    const fields = data !== null && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>) : null;
    const version = fields?.["version"];
    if (this.trustedKeys !== null && fields !== null) {
      const refused = this.trustedKeys.refusal(fields);
      if (refused !== null) return this.refuse(version, etag, refused.why, true);
    }
    let document: ChainDocument;
    try {
      document = parseDocument(data, { registry: this.registry, source: "live", adopt: true });
      if (document.name !== this.chain) throw new DocumentInvalid(`document is for chain ${pyRepr(document.name)}`);
      const refusedEnvironment = environmentRefusal(fields, this.environment);
      if (refusedEnvironment !== null) throw new DocumentInvalid(refusedEnvironment);
    } catch (error) {
      if (!(error instanceof DocumentInvalid)) throw error;
      return this.refuse(version, etag, error.message);
    }
    const previous = this.snapshot.document;
    const order = compareOrder(document, previous);
    if (order <= 0) {
      if (order < 0) {
        const now = this.clock();
        this.olderAnswer = { epoch: document.epoch, version: document.version, since: this.olderAnswer?.since ?? now };
        this.aheadOfServer(now);
      } else {
        this.caughtUp();
      }
      this.log.debug(`chain ${this.chain}: ignoring ${label(document)}, already at ${label(previous)}`);
      return { changed: false, etag: order === 0 && etag ? etag : null };
    }
    this.log.info(
      `chain ${this.chain}: ${label(previous)} ${previous.preset} -> ${label(document)} ${document.preset} by ${document.updated_by}: ${document.reason}`,
    );
    this.snapshot = this.snapshotOf(document);
    this.changes += 1;
    this.caughtUp();
    this.noteDrill(previous, document);
    this.notePolicy(document);
    await this.persist(document);
    if (this.onChange !== null) {
      try {
        this.onChange(document);
      } catch (error) {
        this.log.error(`chain ${this.chain}: onChange threw for v${document.version}; polling continues: ${describe(error)}`);
      }
    }
    return { changed: true, etag: etag || entityTag(document) };
  }

  private async persist(document: ChainDocument): Promise<void> {
    if (this.stateFile.path === null) return;
    try {
      const onDisk = await this.stateFile.save(document);
      if (onDisk === null) {
        this.lastSaveError = this.lastSaveErrorAt = null;
        this.stateFileRefused = null;
      }
    } catch (error) {
      this.lastSaveError = describe(error);
      this.lastSaveErrorAt = Date.now() / 1000;
      this.log.warn(`chain ${this.chain}: could not save v${document.version} to ${this.stateFile.path}: ${this.lastSaveError}`);
    }
  }

  private refuse(version: unknown, etag: string | null, why: string, signature = false): Applied {
    this.rejected += 1;
    if (signature) {
      this.signatureRefusals += 1;
      this.lastSignatureRefusal = why;
    }
    if (this.reportUsage) {
      const number = typeof version === "number" && Number.isInteger(version) && version > 0 ? version : null;
      const listed = this.refusals.some((r) => r.version === number && (number !== null || r.reason === why.slice(0, MAX_REASON_CHARS)));
      if (!listed) {
        this.refusals.push({ version: number, reason: why.slice(0, MAX_REASON_CHARS), at: Date.now() / 1000 });
        this.refusals.splice(0, Math.max(0, this.refusals.length - MAX_REPORTED_REJECTIONS));
      }
    }
    // Keep the refused document's ETag, so whoever still holds it answers the next polls with
    // a 304; after a bad signature, afterCopy asks for a genuine copy again later.
    const result = { changed: false, etag: etag || null, forged: signature };
    const key = JSON.stringify([etag ?? version ?? null, why]);
    if (key === this.lastRejection) return result;
    this.lastRejection = key;
    const current = this.current();
    const shown = typeof version === "number" && Number.isInteger(version) ? ` v${version}` : "";
    this.log.warn(`chain ${this.chain}: refused document${shown} from the control plane: ${why}; keeping v${current.version} ${current.preset}`);
    return result;
  }

  private succeeded(): void {
    const failures = this.consecutiveFailures;
    this.polls += 1;
    this.lastSuccessAt = Date.now() / 1000;
    this.consecutiveFailures = 0;
    if (failures) {
      const over = this.outageStarted === null ? 0 : (performance.now() - this.outageStarted) / 1000;
      this.log.info(`chain ${this.chain}: the control plane answers again after ${failures} failed poll${failures === 1 ? "" : "s"} over ${over.toFixed(1)}s`);
    }
    this.outageStarted = null;
  }

  private failed(why: string): number {
    this.polls += 1;
    this.consecutiveFailures += 1;
    this.lastFailureAt = Date.now() / 1000;
    this.lastError = why;
    const failures = this.consecutiveFailures;
    if (failures === 1) {
      this.outageStarted = performance.now();
      const current = this.current();
      this.log.warn(
        `chain ${this.chain}: poll failed (${why}); keeping v${current.version} ${current.preset} (${current.source}) and retrying with backoff`,
      );
    }
    const ceiling = Math.max(this.maxBackoff, this.pollInterval);
    const cap = Math.min(ceiling, this.pollInterval * 2 ** Math.min(failures, 30));
    return Math.max(Math.min(this.pollInterval, 0.5), uniform(0, cap));
  }

  private interval(): number {
    return this.pollInterval * uniform(0.9, 1.1);
  }

  private snapshotOf(document: ChainDocument): Snapshot {
    if (document.expires_at_s === null) return Object.freeze({ document, expiresAt: Infinity, expired: document });
    return Object.freeze({ document, expiresAt: document.expires_at_s, expired: expiredPin(document, this.defaultSteps) });
  }

  private noteExpired(snapshot: Snapshot): void {
    if (this.expiryNoted === snapshot) return;
    this.expiryNoted = snapshot;
    this.log.warn(`chain ${this.chain}: ${snapshot.expired.reason}`);
  }

  private caughtUp(): void {
    const wasAhead = this.aheadNoted && this.olderAnswer !== null;
    this.olderAnswer = null;
    this.aheadNoted = false;
    if (wasAhead) this.log.info(`chain ${this.chain}: the control plane serves ${label(this.snapshot.document)} again; no longer ahead of it`);
  }

  private aheadOfServer(now: number): OlderAnswer | null {
    const seen = this.olderAnswer;
    if (seen === null || now - seen.since < this.aheadAfterS) return null;
    if (!this.aheadNoted) {
      this.aheadNoted = true;
      const held = this.snapshot.document;
      this.log.warn(
        `chain ${this.chain}: the control plane serves v${seen.version} but this instance holds v${held.version} (epoch ${held.epoch}); ` +
          `restored database? keeping v${held.version} until an operator raises the epoch (manage.py raise_epoch)`,
      );
    }
    return seen;
  }

  // -- usage reports ---------------------------------------------------------------------

  private async reportLoop(signal: AbortSignal): Promise<void> {
    let nextAt = Date.now() / 1000 + this.usageInterval * uniform(0.9, 1.1);
    while (!signal.aborted) {
      const now = Date.now() / 1000;
      const wait = Math.max(Math.min(nextAt - now, this.drillReportIn(this.clock())), this.reportNotBefore - now);
      try {
        await this.sleepUnlessWoken(wait, signal);
      } catch {
        return;
      }
      // Woken by a new document, or early for a drill: report only if one is due.
      if (Date.now() / 1000 < nextAt && this.drillReportIn(this.clock()) > 0) continue;
      await this.within(this.timeoutS, signal, (bounded) => this.report(bounded));
      nextAt = Date.now() / 1000 + this.usageInterval * uniform(0.9, 1.1);
    }
  }

  private sleepUnlessWoken(seconds: number, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const woken = () => {
        this.wakeReports = null;
        resolve();
      };
      this.wakeReports = woken;
      sleep(seconds, signal).then(woken, (error) => {
        this.wakeReports = null;
        reject(error);
      });
    });
  }

  // -- failover drills -------------------------------------------------------------------

  /** Say what a new document means for failover drills, once per document; wake the report loop if it brings or ends one. */
  private noteDrill(previous: ChainDocument, document: ChainDocument): void {
    const drill = document.drill;
    if (document.drill_ignored !== null) {
      this.log.warn(`chain ${this.chain}: ignoring the failover drill in ${label(document)}: ${document.drill_ignored}; the document itself is applied`);
    }
    if (drill !== null && previous.drill?.id !== drill.id) {
      this.log.info(
        `chain ${this.chain}: ${label(document)} carries failover drill ${drill.id}: ${describeDrill(drill, document.chain)}, from ${drill.starts_at} to ${drill.ends_at}`,
      );
    }
    if (drill !== null || previous.drill !== null) this.wakeReports?.();
  }

  /** Say, once per document, that a failure policy in it (its own, its default's) is ignored. */
  private notePolicy(document: ChainDocument, where = ""): void {
    for (const why of [document.failurePolicyIgnored, document.default?.failurePolicyIgnored ?? null]) {
      if (why !== null) this.log.warn(`chain ${this.chain}: ignoring the failure policy in ${label(document)}${where}: ${why}; the document itself is applied`);
    }
  }

  /** The current document's drill, if it is active now and this service takes part. */
  private activeDrill(now: number): Drill | null {
    const drill = this.current().drill;
    if (drill === null || !(drill.starts_at_s <= now && now < drill.ends_at_s)) return null;
    return this.takesPart(drill) ? drill : null;
  }

  /**
   * Bring the drills this client reports on up to date at `now`: the active one followed,
   * those over (ended, or no longer in the document) owed one last report, shortly after.
   */
  private followDrills(now: number): Drill | null {
    const active = this.reportUsage ? this.activeDrill(now) : null;
    if (active !== null) {
      const entry = this.followed.get(active.id);
      if (entry === undefined) this.followed.set(active.id, { drill: active, dueAt: firstDrillReport(now), giveUpAt: null });
      else if (entry.drill !== active || entry.giveUpAt !== null) Object.assign(entry, { drill: active, giveUpAt: null });
    }
    for (const [id, entry] of this.followed) {
      if (active !== null && id === active.id) continue;
      if (entry.giveUpAt === null) {
        // Over: its end passed (the last report a moment after it, so that requests then in
        // flight count, and well within DRILL_REPORT_INTERVAL_S), or the control plane ended
        // it early (the last report about now).
        const over = Math.min(now, entry.drill.ends_at_s);
        entry.dueAt = Math.max(over + uniform(0.2, 0.5) * DRILL_REPORT_INTERVAL_S, now);
        entry.giveUpAt = over + DRILL_LAST_REPORT_WITHIN_S;
      } else if (now > entry.giveUpAt) {
        this.followed.delete(id); // its counts, if any, go with the next report
      }
    }
    return active;
  }

  /** Seconds until a report is due for a drill (0: now; Infinity: no drill needs one). */
  private drillReportIn(now: number): number {
    if (!this.reportUsage) return Infinity;
    const active = this.followDrills(now);
    let due = Infinity;
    for (const entry of this.followed.values()) due = Math.min(due, entry.dueAt);
    if (due !== Infinity) due = Math.max(due, this.lastSentAt + DRILL_REPORT_GAP * DRILL_REPORT_INTERVAL_S);
    for (const entry of this.followed.values()) {
      // An active drill's end is a moment to wake too: its last report is planned from there.
      if (entry.giveUpAt === null) due = Math.min(due, entry.drill.ends_at_s);
    }
    // A drill in the document that has not started yet: wake at its start.
    const upcoming = this.current().drill;
    if (active === null && upcoming !== null && now < upcoming.starts_at_s && this.takesPart(upcoming)) {
      due = Math.min(due, upcoming.starts_at_s);
    }
    return Math.max(0, due - now);
  }

  /** Which drill's section the next report carries: one owed its last report, else the active one, else any with counts. */
  private drillToReport(now: number): { id: number; entry: FollowedDrill | null } | null {
    const active = this.followDrills(now);
    let owed: FollowedDrill | null = null;
    for (const entry of this.followed.values()) {
      if (entry.giveUpAt !== null && entry.dueAt <= now && (owed === null || entry.dueAt < owed.dueAt)) owed = entry;
    }
    if (owed !== null) return { id: owed.drill.id, entry: owed };
    if (active !== null) return { id: active.id, entry: this.followed.get(active.id) ?? null };
    const pending = this.drillTally.pending();
    if (pending.length) return { id: pending[0], entry: this.followed.get(pending[0]) ?? null };
    return null;
  }

  /**
   * Send the pending usage report now (what was served, refused and seen of provider health
   * since the last accepted one), within `timeoutS`; nothing is sent when there is nothing to
   * say. A failed report keeps its counts for the next. The background loop and `stop()` call it.
   */
  async flushUsage(timeoutS = this.timeoutS): Promise<void> {
    if (this.reportUsage) await this.report(AbortSignal.timeout(timeoutS * 1000));
  }

  private async report(signal: AbortSignal): Promise<void> {
    const now = this.clock();
    const ahead = this.aheadOfServer(now);
    const served = this.served;
    const refusals = this.refusals;
    const health = this.tally.take();
    this.served = new Map();
    this.refusals = [];
    const healthJson = healthBody(health);
    const drill = this.drillToReport(now);
    const drillCounts = drill !== null ? this.drillTally.take(drill.id) : null;
    if (served.size === 0 && refusals.length === 0 && healthJson === null && ahead === null && drill === null) return;
    this.lastSentAt = now;
    const version = this.snapshot.document.version;
    const body: Record<string, unknown> = {
      client: this.clientId,
      applied_version: version,
      providers: Object.fromEntries([...served].map(([provider, e]) => [provider, { requests: e.requests, last_served_at: utc(e.last) }])),
      rejected: refusals.map((r) => ({ version: r.version ?? 0, reason: r.reason, at: utc(r.at) })),
    };
    if (ahead !== null) body["ahead_of_server"] = { server_epoch: ahead.epoch, server_version: ahead.version, since: utc(ahead.since) };
    if (healthJson !== null) body["health"] = healthJson;
    if (drill !== null && drillCounts !== null) body["drill"] = drillBody(drill.id, drillCounts);
    const headers: Record<string, string> = {
      "Content-Type": "application/json",
      "X-Chain-Client": this.clientId,
      "X-Chain-Applied-Version": String(version),
      "User-Agent": `chainclient/${VERSION} node/${process.version}`,
    };
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    let error: string | null = null;
    try {
      const response = await this.exchange(`${this.base}/api/v1/chains/${encodeURIComponent(this.chain)}/usage`, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal,
        limit: MAX_DOCUMENT_BYTES,
      });
      if (response.status < 200 || response.status >= 300) {
        error = `HTTP ${response.status}: ${errorMessage(response.body)}`;
        const wait = response.status === 429 || response.status === 503 ? retryAfterSeconds(response.header("Retry-After")) : null;
        if (wait !== null) {
          const capped = Math.min(wait, MAX_RETRY_AFTER_S);
          this.reportNotBefore = Date.now() / 1000 + capped * uniform(1.0, 1.1);
          error += `; the next report in ${g(capped)}s, as the control plane asked`;
        }
      }
    } catch (caught) {
      error = describe(caught);
    }
    if (drill !== null && drill.entry !== null) {
      // A drill over: its last report was accepted (a failed one is tried again at the
      // drill's cadence, until giveUpAt).
      if (drill.entry.giveUpAt !== null && error === null) this.followed.delete(drill.id);
      else drill.entry.dueAt = nextDrillReport(now);
    }
    if (error === null) {
      if (this.reportFailures) this.log.info(`chain ${this.chain}: usage report accepted after ${this.reportFailures} failed attempt(s)`);
      this.reportFailures = 0;
      this.lastReportAt = Date.now() / 1000;
      return;
    }
    // Put the batch back, the older counts first, so nothing is lost.
    for (const [provider, e] of this.served) {
      const held = served.get(provider);
      if (held !== undefined) {
        held.requests += e.requests;
        held.last = Math.max(held.last, e.last);
      } else if (served.size < REPORT_MAX_PROVIDERS) {
        served.set(provider, e);
      }
    }
    this.served = served;
    for (const r of this.refusals) if (!refusals.some((l) => l.version === r.version && (r.version !== null || l.reason === r.reason))) refusals.push(r);
    this.refusals = refusals.slice(-MAX_REPORTED_REJECTIONS);
    this.tally.putBack(health);
    if (drill !== null && drillCounts !== null) this.drillTally.putBack(drill.id, drillCounts);
    this.reportFailures += 1;
    if (this.reportFailures === 1) {
      this.log.warn(`chain ${this.chain}: usage report failed (${error}); keeping its counts for the next one`);
    }
  }
}

function sleep(seconds: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(new Stopped());
  if (seconds <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Stopped());
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
