/**
 * The lock on a chain's state file, one protocol with the Python SDK (`chainclient-lock/1`,
 * sdk/chainclient/state_lock.py says it in full), so services in both languages can share a
 * state directory:
 *
 * - `{chain}.lock` is created exclusively (`wx`) with its owner written in it (`format`,
 *   `token`, `pid`, `host`, `pid_ns`, `acquired_at`, `sdk`) and removed on release;
 * - it is stale, and may be broken, when its owner is on this host (same hostname and PID
 *   namespace) and gone, or when the file is older than `STALE_AFTER_MS`; a file naming no
 *   owner (the empty one older Python clients left) is judged by its age alone;
 * - whoever removes a lock file (releasing it, breaking it) first takes `{chain}.lock.guard`
 *   (created exclusively) and removes the lock only if it is still the file it judged (same
 *   inode, modification time and bytes), so a fresh lock another process took meanwhile is
 *   never the one removed; a guard older than `STALE_AFTER_MS` is removed;
 * - a waiter gives up after `WAIT_MS`: the save fails, never made without the lock; before its
 *   rename a save checks the lock is still its own (`check()`).
 */

import { randomBytes } from "node:crypto";
import { readlinkSync } from "node:fs";
import { open, unlink } from "node:fs/promises";
import { hostname } from "node:os";

export const LOCK_FORMAT = "chainclient-lock/1";
/** A save holds the lock for a read, a write, an fsync and a rename: one held longer was left behind. */
export const STALE_AFTER_MS = 10_000;
/** How long a save waits for the lock before it fails. */
export const WAIT_MS = 5_000;

/** The state file's lock could not be had within `WAIT_MS`; the save did not happen. */
export class StateFileLocked extends Error {
  override name = "StateFileLocked";
}

/** The lock was broken (as stale) while this save held it; the save did not happen. */
export class StateLockLost extends Error {
  override name = "StateLockLost";
}

export interface HeldLock {
  /** Throws `StateLockLost` unless the lock file is still this one's. */
  check(): Promise<void>;
  /** Removes the lock file if it is still this one's. */
  release(): Promise<void>;
}

interface Seen {
  inode: bigint;
  mtimeNs: bigint;
  content: Buffer;
}

type Owner = Record<string, unknown>;

const PID_NAMESPACE: string | null = (() => {
  try {
    return readlinkSync("/proc/self/ns/pid");
  } catch {
    return null;
  }
})();

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const code = (error: unknown) => (error as NodeJS.ErrnoException).code;

/** Take `path` (`{chain}.lock`); rejects with `StateFileLocked` after `waitMs` (`WAIT_MS`). */
export async function lock(path: string, { waitMs = WAIT_MS }: { waitMs?: number } = {}): Promise<HeldLock> {
  const token = randomBytes(16).toString("hex");
  const content = JSON.stringify({
    format: LOCK_FORMAT,
    token,
    pid: process.pid,
    host: hostname(),
    pid_ns: PID_NAMESPACE,
    acquired_at: Date.now() / 1000,
    sdk: "node",
  });
  const giveUp = Date.now() + waitMs;
  for (;;) {
    let handle;
    try {
      handle = await open(path, "wx", 0o644);
    } catch (error) {
      if (code(error) !== "EEXIST") throw error;
      const seen = await read(path);
      if (seen === null || (await breakIfStale(path, seen))) continue; // released or broken meanwhile
      if (Date.now() >= giveUp) throw new StateFileLocked(`could not lock ${path} within ${waitMs / 1000} s: ${describe(seen)}`);
      await pause(5 + Math.random() * 10);
      continue;
    }
    try {
      await handle.writeFile(content, "utf8");
    } catch (error) {
      await handle.close();
      await unlink(path).catch(() => undefined);
      throw error;
    }
    await handle.close();
    return {
      check: async () => {
        const seen = await read(path);
        if (seen === null || ownerOf(seen)?.["token"] !== token) {
          throw new StateLockLost(`the lock ${path} was broken as stale while this save held it (paused over ${STALE_AFTER_MS / 1000} s?); not writing`);
        }
      },
      release: async () => {
        await guarded(path, true, async () => {
          const seen = await read(path);
          if (seen !== null && ownerOf(seen)?.["token"] === token) await unlink(path);
        });
      },
    };
  }
}

/** Remove the lock file `seen` if it is stale and still there; true when the path may be free now. */
async function breakIfStale(path: string, seen: Seen): Promise<boolean> {
  if (stale(seen) === null) return false;
  const broke = await guarded(path, false, async () => {
    const again = await read(path);
    if (again === null || !same(again, seen)) return true;
    await unlink(path);
    return true;
  });
  return broke === true;
}

/** Run `body` holding `{path}.guard`, or return null without it (at once unless `wait`, else after `WAIT_MS`). */
async function guarded<T>(path: string, wait: boolean, body: () => Promise<T>): Promise<T | null> {
  const guard = `${path}.guard`;
  const giveUp = Date.now() + WAIT_MS;
  for (;;) {
    try {
      await (await open(guard, "wx", 0o644)).close();
      break;
    } catch (error) {
      if (code(error) !== "EEXIST") throw error;
      const seen = await read(guard);
      if (seen !== null && Date.now() - Number(seen.mtimeNs / 1_000_000n) > STALE_AFTER_MS) {
        await unlink(guard).catch(() => undefined); // its holder died holding it
        continue;
      }
      if (!wait || Date.now() >= giveUp) return null;
      await pause(1 + Math.random() * 2);
    }
  }
  try {
    return await body();
  } finally {
    await unlink(guard).catch(() => undefined);
  }
}

async function read(path: string): Promise<Seen | null> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch (error) {
    if (code(error) === "ENOENT") return null;
    throw error;
  }
  try {
    const stat = await handle.stat({ bigint: true });
    return { inode: stat.ino, mtimeNs: stat.mtimeNs, content: await handle.readFile() };
  } finally {
    await handle.close();
  }
}

function same(a: Seen, b: Seen): boolean {
  return a.inode === b.inode && a.mtimeNs === b.mtimeNs && a.content.equals(b.content);
}

function ownerOf(seen: Seen): Owner | null {
  try {
    const owner: unknown = JSON.parse(seen.content.toString("utf8"));
    return owner !== null && typeof owner === "object" && !Array.isArray(owner) && (owner as Owner)["format"] === LOCK_FORMAT ? (owner as Owner) : null;
  } catch {
    return null;
  }
}

/** Why the lock `seen` may be broken, or null while it holds. */
function stale(seen: Seen): string | null {
  const owner = ownerOf(seen);
  if (owner !== null && owner["host"] === hostname() && owner["pid_ns"] === PID_NAMESPACE && !alive(owner["pid"])) {
    return `its owner, pid ${owner["pid"]} on this host, is gone`;
  }
  if (Date.now() - Number(seen.mtimeNs / 1_000_000n) > STALE_AFTER_MS) return `${describe(seen)}, over ${STALE_AFTER_MS / 1000} s ago`;
  return null;
}

/** Whether process `pid` of this host exists (or cannot be told: then it does). */
function alive(pid: unknown): boolean {
  if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 0) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return code(error) !== "ESRCH";
  }
}

function describe(seen: Seen): string {
  const owner = ownerOf(seen);
  const since = new Date(Number(seen.mtimeNs / 1_000_000n)).toISOString().replace(/\.\d{3}Z$/, "Z");
  if (owner === null) return `held since ${since} by a client that names no owner (an older chainclient?)`;
  return `held since ${since} by pid ${String(owner["pid"])} on ${String(owner["host"])} (${String(owner["sdk"])})`;
}
