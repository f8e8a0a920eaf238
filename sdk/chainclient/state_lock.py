"""The lock on a chain's state file, one protocol for the Python and the TypeScript clients.

A Python service and a Node one may share a ``state_dir``, so the lock is what both languages
can take: a file, ``{chain}.lock``, created exclusively (``O_CREAT | O_EXCL``, Node's ``wx``)
with its owner written in it, and removed on release (``chainclient-lock/1``, sdk/README.md
"The state file never goes back"; sdk-ts/src/stateLock.ts is the same protocol)::

    {"format": "chainclient-lock/1", "token": "<random>", "pid": 4242, "host": "web-1",
     "pid_ns": "pid:[4026531836]", "acquired_at": 1764381760.5, "sdk": "python"}

A lock is **stale**, and may be broken, when its owner is on this host (same hostname and
same PID namespace: containers of one pod share a hostname, not their PIDs) and that process
is gone, or when the file is older than ``STALE_AFTER_S`` whoever wrote it. A file without
an owner (the empty ``{chain}.lock`` older clients left, which ``flock``-ed it and kept it;
or one caught between its creation and its write) is judged by its age alone.

Breaking must never let two writers in. Whoever removes a lock file (its owner releasing
it, a waiter breaking a stale one) first takes ``{chain}.lock.guard`` (also created
exclusively; held for a read and an unlink), reads the lock again under it and removes it
only if it is still the very file it judged (same inode, modification time and bytes).
Creation needs the path free and every removal is re-checked under the guard, so a fresh
lock taken by another process meanwhile is never the one removed: of two processes breaking
one stale lock, the second finds the first's new lock and waits. A guard older than
``STALE_AFTER_S`` (its holder died in those microseconds) is removed.

A waiter gives up after ``WAIT_S`` and the save fails (``StateFileLocked``), loudly: it is
never made without the lock. Before its rename, a save checks that the lock is still its own
(``Held.check``), so one that was paused past ``STALE_AFTER_S`` and broken writes nothing.
What is left: a holder paused past ``STALE_AFTER_S`` between that check and its rename (one
system call) could still replace a newer file; and two processes removing the same stale
guard at one instant could both go on to break one stale lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

# The client's logger: these lines have always been the poller's.
logger = logging.getLogger("chainclient.client")

LOCK_FORMAT = "chainclient-lock/1"
# A save holds the lock for a read, a write, an fsync and a rename; one held longer than
# this was left by a process that died or stopped (or lives on another host).
STALE_AFTER_S = 10.0
# How long a save waits for the lock before it fails.
WAIT_S = 5.0


class StateFileLocked(OSError):
    """The state file's lock could not be had within ``WAIT_S``; the save did not happen."""


class StateLockLost(OSError):
    """The lock was broken (as stale) while this save held it; the save did not happen."""


@dataclasses.dataclass(frozen=True)
class _Seen:
    """One lock file as read: what identifies it, and its owner if it names one."""

    inode: int
    mtime_ns: int
    content: bytes

    @property
    def owner(self) -> dict[str, object] | None:
        try:
            owner = json.loads(self.content)
        except (ValueError, RecursionError):
            return None
        return owner if isinstance(owner, dict) and owner.get("format") == LOCK_FORMAT else None


class Held:
    """A lock taken: ``check()`` before writing, then released by ``state_lock``."""

    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self.token = token

    def check(self) -> None:
        """Raise ``StateLockLost`` unless the lock file is still this one's."""
        seen = _read(self.path)
        owner = seen.owner if seen is not None else None
        if owner is None or owner.get("token") != self.token:
            raise StateLockLost(
                f"the lock {self.path} was broken as stale while this save held it (paused over "
                f"{STALE_AFTER_S:g} s?); not writing"
            )


@contextlib.contextmanager
def state_lock(path: Path) -> Iterator[Held]:
    """Hold ``path`` (``{chain}.lock``) for the block; ``StateFileLocked`` after ``WAIT_S``."""
    held = _acquire(path)
    try:
        yield held
    finally:
        _release(held)


def _acquire(path: Path) -> Held:
    token = secrets.token_hex(16)
    content = json.dumps(
        {
            "format": LOCK_FORMAT,
            "token": token,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "pid_ns": _PID_NAMESPACE,
            "acquired_at": time.time(),
            "sdk": "python",
        }
    ).encode("utf-8")
    give_up = time.monotonic() + WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            seen = _read(path)
            if seen is None or _break_if_stale(path, seen):
                continue  # released or broken meanwhile: try again at once
            if time.monotonic() >= give_up:
                raise StateFileLocked(f"could not lock {path} within {WAIT_S:g} s: {_describe(seen)}") from None
            time.sleep(random.uniform(0.005, 0.015))
            continue
        try:
            os.write(fd, content)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        return Held(path, token)


def _release(held: Held) -> None:
    """Remove the lock file if it is still this one's (a breaker may have taken it as stale)."""
    with _guard(held.path, wait=True) as guarded:
        if not guarded:
            logger.warning("could not release %s (its guard is held); it goes stale in %g s", held.path, STALE_AFTER_S)
            return
        seen = _read(held.path)
        owner = seen.owner if seen is not None else None
        if owner is not None and owner.get("token") == held.token:
            os.unlink(held.path)


def _break_if_stale(path: Path, seen: _Seen) -> bool:
    """Remove the lock file ``seen`` if it is stale and still there; True when the path may be
    free now (removed, or changed since it was seen), False to wait."""
    why = _stale(seen)
    if why is None:
        return False
    with _guard(path, wait=False) as guarded:
        if not guarded:
            return False  # someone else is releasing or breaking it: look again shortly
        again = _read(path)
        if again != seen:
            return True
        os.unlink(path)
    logger.warning("broke the lock %s: %s", path, why)
    return True


@contextlib.contextmanager
def _guard(path: Path, *, wait: bool) -> Iterator[bool]:
    """Hold ``{chain}.lock.guard`` for the block (True), or do not get it (False): at once
    unless ``wait``, else within ``WAIT_S``."""
    guard = path.with_name(path.name + ".guard")
    give_up = time.monotonic() + WAIT_S
    while True:
        try:
            os.close(os.open(guard, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            break
        except FileExistsError:
            seen = _read(guard)
            if seen is not None and time.time() - seen.mtime_ns / 1e9 > STALE_AFTER_S:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(guard)  # its holder died holding it
                continue
            if not wait or time.monotonic() >= give_up:
                yield False
                return
            time.sleep(random.uniform(0.001, 0.003))
    try:
        yield True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(guard)


def _read(path: Path) -> _Seen | None:
    """The lock file at ``path`` (its identity and bytes read through one descriptor), or None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        stat = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return _Seen(stat.st_ino, stat.st_mtime_ns, b"".join(chunks))


def _stale(seen: _Seen) -> str | None:
    """Why the lock ``seen`` may be broken, or None while it holds."""
    owner = seen.owner
    if owner is not None and _on_this_host(owner) and not _alive(owner.get("pid")):
        return f"its owner, pid {owner.get('pid')} on this host, is gone"
    age = time.time() - seen.mtime_ns / 1e9
    if age > STALE_AFTER_S:
        return f"{_describe(seen)}, over {STALE_AFTER_S:g} s ago"
    return None


def _on_this_host(owner: dict[str, object]) -> bool:
    return owner.get("host") == socket.gethostname() and owner.get("pid_ns") == _PID_NAMESPACE


def _alive(pid: object) -> bool:
    """Whether process ``pid`` of this host exists (or cannot be told: then it does)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or os.name != "posix":
        return True  # on Windows, os.kill(pid, 0) would send CTRL_C_EVENT
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: it exists, as another user
    return True


def _describe(seen: _Seen) -> str:
    owner = seen.owner
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seen.mtime_ns / 1e9))
    if owner is None:
        return f"held since {since} by a client that names no owner (an older chainclient?)"
    return f"held since {since} by pid {owner.get('pid')} on {owner.get('host')} ({owner.get('sdk')})"


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        return None


# Read once: a process does not change PID namespace (a forked child stays in its parent's).
_PID_NAMESPACE = _pid_namespace()


__all__ = ["LOCK_FORMAT", "STALE_AFTER_S", "WAIT_S", "Held", "StateFileLocked", "StateLockLost", "state_lock"]
