// The state file's lock (chainclient-lock/1, shared with the Python SDK: its
// sdk/tests/test_state_file_lock.py has the same cases): a stale lock is broken, a live one
// never is, and breaking never lets two holders in.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readlinkSync, rmSync, unlinkSync, utimesSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { LOCK_FORMAT, STALE_AFTER_MS, StateFileLocked, StateLockLost, lock } from "../dist/stateLock.js";

// Above the largest PID Linux can hand out (pid_max is at most 2**22), and macOS's.
const GONE_PID = 2 ** 22 + 1;
const PID_NAMESPACE = (() => {
  try {
    return readlinkSync("/proc/self/ns/pid");
  } catch {
    return null;
  }
})();
const directories = [];
after(() => directories.forEach((d) => rmSync(d, { recursive: true, force: true })));

function lockPath() {
  const directory = mkdtempSync(join(tmpdir(), "chainclient-lock-"));
  directories.push(directory);
  return join(directory, "chat.lock");
}

/** A lock file as another process left it; returns its bytes. */
function plant(path, { pid, host = hostname(), ageS = 0, content = null }) {
  const bytes =
    content ??
    JSON.stringify({ format: LOCK_FORMAT, token: "theirs", pid, host, pid_ns: PID_NAMESPACE, acquired_at: Date.now() / 1000 - ageS, sdk: "python" });
  writeFileSync(path, bytes);
  const when = new Date(Date.now() - ageS * 1000);
  utimesSync(path, when, when);
  return Buffer.from(bytes);
}

const owner = (path) => JSON.parse(readFileSync(path, "utf8"));
const once = { waitMs: 0 }; // one try: a lock that is not broken at once refuses at once

test("the lock names its owner and is removed on release", async () => {
  const path = lockPath();
  const held = await lock(path);
  const seen = owner(path);
  assert.equal(seen.format, LOCK_FORMAT);
  assert.deepEqual([seen.pid, seen.host, seen.sdk], [process.pid, hostname(), "node"]);
  await held.check();
  await held.release();
  assert.ok(!existsSync(path) && !existsSync(`${path}.guard`));
});

test("a lock whose owner on this host is gone is broken at once", async () => {
  const path = lockPath();
  plant(path, { pid: GONE_PID });
  const held = await lock(path, once);
  assert.equal(owner(path).pid, process.pid);
  await held.release();
});

test("a lock left by a process killed holding it is broken at once", async () => {
  const path = lockPath();
  // A real process takes the lock and dies without releasing it.
  const script = `import { lock } from ${JSON.stringify(new URL("../dist/stateLock.js", import.meta.url).href)}; await lock(${JSON.stringify(path)}); process.exit(0);`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(owner(path).pid, child.pid);
  const held = await lock(path, once);
  assert.equal(owner(path).pid, process.pid);
  await held.release();
});

for (const [name, pid, host] of [
  ["its owner lives", process.pid, hostname()],
  ["another host cannot be asked", GONE_PID, "another-host"],
]) {
  test(`a fresh lock is not broken, and the save fails saying who holds it (${name})`, async () => {
    const path = lockPath();
    const planted = plant(path, { pid, host });
    await assert.rejects(lock(path, once), (error) => error instanceof StateFileLocked && error.message.includes(`by pid ${pid}`));
    assert.deepEqual(readFileSync(path), planted);
  });
}

test("a lock older than the bound is broken even if its owner lives", async () => {
  const path = lockPath();
  plant(path, { pid: process.pid, host: "another-host", ageS: STALE_AFTER_MS / 1000 + 1 });
  const held = await lock(path, once);
  assert.equal(owner(path).pid, process.pid);
  await held.release();
});

test("the empty lock an older Python client left is judged by its age", async () => {
  const path = lockPath();
  plant(path, { content: "" });
  await assert.rejects(lock(path, once), (error) => error instanceof StateFileLocked && error.message.includes("names no owner"));
  plant(path, { content: "", ageS: STALE_AFTER_MS / 1000 + 1 });
  const held = await lock(path, once);
  assert.equal(owner(path).pid, process.pid);
  await held.release();
});

test("a stale lock is not broken while another process holds the guard", async () => {
  const path = lockPath();
  plant(path, { pid: GONE_PID });
  const guard = `${path}.guard`;
  closeSync(openSync(guard, "w")); // another process is releasing or breaking it this instant
  await assert.rejects(lock(path, once), StateFileLocked);
  // A guard left by a process that died holding it goes stale too.
  const old = new Date(Date.now() - STALE_AFTER_MS - 1000);
  utimesSync(guard, old, old);
  const held = await lock(path, once);
  await held.release();
  assert.ok(!existsSync(guard));
});

test("release leaves a lock that is no longer its own", async () => {
  const path = lockPath();
  const held = await lock(path);
  const theirs = plant(path, { pid: process.pid }); // broken as stale meanwhile, and taken
  await assert.rejects(held.check(), StateLockLost);
  await held.release();
  assert.deepEqual(readFileSync(path), theirs);
});

test("holders breaking one stale lock at once never hold it together", async () => {
  const path = lockPath();
  const inside = join(path, "..", "inside");
  const overlaps = [];
  let entered = 0;
  for (let round = 0; round < 30; round += 1) {
    plant(path, { pid: GONE_PID });
    await Promise.all(
      Array.from({ length: 8 }, async (_, n) => {
        const held = await lock(path);
        try {
          try {
            closeSync(openSync(inside, "wx"));
          } catch {
            overlaps.push(n);
            return;
          }
          entered += 1;
          await new Promise((resolve) => setImmediate(resolve)); // let the others run while this one holds it
          unlinkSync(inside);
        } finally {
          await held.release();
        }
      }),
    );
    assert.deepEqual(overlaps, []);
  }
  assert.equal(entered, 30 * 8);
  assert.ok(!existsSync(path));
});
