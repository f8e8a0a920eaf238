/**
 * The last-known-good file `{stateDir}/{chain}.json`, in the Python SDK's format
 * (`chainclient-state/2`: `{"format", "chain", "saved_at", "document", "digest"}`, the digest
 * `sha256:<hex>` over the rest as canonical JSON). It never goes back: a save compares
 * (epoch, version) with what the file holds, under the lock file `{chain}.lock` every process
 * using the directory takes, Python's included (stateLock.ts), and replaces the file atomically
 * (temp file, fsync, rename). A save that cannot have the lock within `WAIT_MS` throws.
 */

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";

import { TrustedKeys, UNSIGNED } from "./signatures.js";
import { lock } from "./stateLock.js";
import { ChainDocument, DocumentInvalid, Registry, compareOrder, documentJson, environmentRefusal, parseDocument } from "./document.js";
import { canonicalJson, pyRepr } from "./wire.js";

export const STATE_FORMAT = "chainclient-state/2";
const FORMAT_BEFORE_DIGESTS = "chainclient-state/1";
export const DIGEST_MISMATCH = "digest mismatch: the file changed after it was saved (edited by hand?)";
const UNSIGNED_ON_DISK =
  "unsigned: its document carries no signature, and trusted_keys is set (saved before the control " +
  "plane signed its documents, by chainclient 0.3 or earlier, which kept no signature, or edited?)";

export interface Loaded {
  readonly document: ChainDocument | null;
  readonly refused: string | null;
}

function digestOf(payload: Record<string, unknown>): string {
  const content: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(payload)) if (key !== "digest") content[key] = value;
  return "sha256:" + createHash("sha256").update(canonicalJson(content), "ascii").digest("hex");
}

export class StateFile {
  readonly path: string | null;

  constructor(
    stateDir: string | null,
    private readonly chain: string,
    private readonly registry: Registry,
    private readonly trustedKeys: TrustedKeys | null,
    /** The client's: a file saved from another environment's document is refused. */
    private readonly environment: string | null = null,
  ) {
    this.path = stateDir === null ? null : join(stateDir, `${encodeURIComponent(chain)}.json`);
  }

  /** The document a previous run saved (read synchronously: before any network), or why the file was refused. */
  load(): Loaded {
    if (this.path === null) return { document: null, refused: null };
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { document: null, refused: null };
      return { document: null, refused: `${(error as Error).name}: ${(error as Error).message}` };
    }
    try {
      return { document: this.read(text), refused: null };
    } catch (error) {
      return { document: null, refused: error instanceof DocumentInvalid ? error.message : `not JSON (${(error as Error).message})` };
    }
  }

  /**
   * Write `document` unless the file holds it or a newer one already (then return that one).
   * Throws when the save fails.
   */
  async save(document: ChainDocument): Promise<ChainDocument | null> {
    const path = this.path;
    if (path === null) return null;
    const payload: Record<string, unknown> = {
      format: STATE_FORMAT,
      chain: this.chain,
      saved_at: Date.now() / 1000,
      document: documentJson(document),
    };
    payload["digest"] = digestOf(payload);
    const data = JSON.stringify(payload);
    const directory = join(path, "..");
    await mkdir(directory, { recursive: true });
    const held = await lock(path.replace(/\.json$/, ".lock"));
    try {
      let onDisk: ChainDocument | null = null;
      try {
        onDisk = this.read(await readFile(path, "utf8"));
      } catch {
        onDisk = null; // missing or unusable: load() refuses it as well
      }
      if (onDisk !== null && compareOrder(onDisk, document) >= 0) return onDisk;
      const temporary = join(directory, `.${encodeURIComponent(this.chain)}.json.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
      const handle = await open(temporary, "w", 0o644);
      try {
        await handle.writeFile(data, "utf8");
        await handle.sync();
      } finally {
        await handle.close();
      }
      try {
        await held.check(); // last thing: a lock broken as stale meanwhile must not write
        await rename(temporary, path);
      } catch (error) {
        await rm(temporary, { force: true });
        throw error;
      }
    } finally {
      await held.release();
    }
    return null;
  }

  private read(text: string): ChainDocument {
    const payload: unknown = JSON.parse(text);
    if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
      throw new DocumentInvalid(`not a ${STATE_FORMAT} file`);
    }
    const fields = payload as Record<string, unknown>;
    if (fields["format"] !== STATE_FORMAT && fields["format"] !== FORMAT_BEFORE_DIGESTS) {
      throw new DocumentInvalid(`not a ${STATE_FORMAT} file`);
    }
    if (fields["format"] === STATE_FORMAT) {
      if (!("digest" in fields)) throw new DocumentInvalid(`no digest, which every ${STATE_FORMAT} file carries`);
      if (fields["digest"] !== digestOf(fields)) throw new DocumentInvalid(DIGEST_MISMATCH);
    }
    if (fields["chain"] !== this.chain) {
      throw new DocumentInvalid(`it belongs to chain ${typeof fields["chain"] === "string" ? pyRepr(fields["chain"]) : String(fields["chain"])}`);
    }
    const saved = fields["document"];
    if (this.trustedKeys !== null && saved !== null && typeof saved === "object" && !Array.isArray(saved)) {
      const refused = this.trustedKeys.refusal(saved as Record<string, unknown>);
      if (refused !== null) throw new DocumentInvalid(refused.kind === UNSIGNED ? UNSIGNED_ON_DISK : `its document is refused: ${refused.why}`);
    }
    const document = parseDocument(saved, { registry: this.registry, source: "disk", adopt: true });
    if (document.name !== this.chain) throw new DocumentInvalid(`its document is for chain ${pyRepr(document.name)}`);
    const refusedEnvironment = environmentRefusal(saved as Record<string, unknown>, this.environment);
    if (refusedEnvironment !== null) throw new DocumentInvalid(`its ${refusedEnvironment}`);
    return document;
  }
}
