"""The state file's lock (``chainclient-lock/1``, shared with the TypeScript client): a stale
lock is broken, a live one never is, and breaking never lets two holders in."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from chainclient import state_lock
from chainclient.state_lock import LOCK_FORMAT, StateFileLocked, StateLockLost

# Above the largest PID Linux can hand out (pid_max is at most 2**22), and macOS's: a process
# that cannot exist, without starting one to wait for its end.
GONE_PID = 2**22 + 1


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "chat.lock"


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """One try for the lock: a lock that is not broken at once refuses the save at once."""
    monkeypatch.setattr(state_lock, "WAIT_S", 0.0)


def plant(path: Path, *, pid: int, host: str | None = None, age_s: float = 0.0, content: bytes | None = None) -> bytes:
    """A lock file as another process left it; returns its bytes."""
    if content is None:
        owner = {
            "format": LOCK_FORMAT,
            "token": "theirs",
            "pid": pid,
            "host": host if host is not None else socket.gethostname(),
            "pid_ns": state_lock._PID_NAMESPACE,
            "acquired_at": time.time() - age_s,
            "sdk": "node",
        }
        content = json.dumps(owner).encode()
    path.write_bytes(content)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return content


def test_the_lock_names_its_owner_and_is_removed_on_release(path: Path) -> None:
    with state_lock.state_lock(path) as held:
        owner = json.loads(path.read_bytes())
        assert owner["format"] == LOCK_FORMAT and owner["token"] == held.token
        assert (owner["pid"], owner["host"], owner["sdk"]) == (os.getpid(), socket.gethostname(), "python")
    assert not path.exists()
    assert not path.with_name(path.name + ".guard").exists()


def test_a_lock_whose_owner_on_this_host_is_gone_is_broken_at_once(path: Path, no_wait: None) -> None:
    plant(path, pid=GONE_PID)
    with state_lock.state_lock(path) as held:
        assert json.loads(path.read_bytes())["token"] == held.token


@pytest.mark.parametrize(
    ("pid", "host"),
    [
        pytest.param(os.getpid(), None, id="its-owner-lives"),
        pytest.param(GONE_PID, "another-host", id="another-host-cannot-be-asked"),
    ],
)
def test_a_fresh_lock_is_not_broken_and_the_save_fails_saying_who_holds_it(
    path: Path, no_wait: None, pid: int, host: str | None
) -> None:
    planted = plant(path, pid=pid, host=host)
    with pytest.raises(StateFileLocked, match=f"held since .* by pid {pid}"):
        with state_lock.state_lock(path):
            pass
    assert path.read_bytes() == planted


def test_a_lock_older_than_the_bound_is_broken_even_if_its_owner_lives(path: Path, no_wait: None) -> None:
    plant(path, pid=os.getpid(), host="another-host", age_s=state_lock.STALE_AFTER_S + 1)
    with state_lock.state_lock(path) as held:
        assert json.loads(path.read_bytes())["token"] == held.token


def test_the_empty_lock_an_older_client_left_is_judged_by_its_age(path: Path, no_wait: None) -> None:
    plant(path, pid=0, content=b"")
    with pytest.raises(StateFileLocked, match="names no owner"):
        with state_lock.state_lock(path):
            pass
    plant(path, pid=0, content=b"", age_s=state_lock.STALE_AFTER_S + 1)
    with state_lock.state_lock(path):
        assert path.read_bytes() != b""


def test_a_stale_lock_is_not_broken_while_another_process_holds_the_guard(path: Path, no_wait: None) -> None:
    plant(path, pid=GONE_PID)
    guard = path.with_name(path.name + ".guard")
    guard.touch()  # another process is releasing or breaking it this instant
    with pytest.raises(StateFileLocked):
        with state_lock.state_lock(path):
            pass
    # A guard left by a process that died holding it goes stale too.
    old = time.time() - state_lock.STALE_AFTER_S - 1
    os.utime(guard, (old, old))
    with state_lock.state_lock(path):
        pass
    assert not guard.exists()


def test_release_leaves_a_lock_that_is_no_longer_its_own(path: Path) -> None:
    with state_lock.state_lock(path) as held:
        # Broken as stale meanwhile, and taken by another process.
        theirs = plant(path, pid=os.getpid())
        with pytest.raises(StateLockLost):
            held.check()
    assert path.read_bytes() == theirs


def test_processes_breaking_one_stale_lock_at_once_never_hold_it_together(path: Path) -> None:
    """Threads stand for processes (each waits on the same file; the pid does not matter to
    a lock whose owner is gone). Each holder marks itself inside with an exclusive file: a
    second holder finds the mark."""
    inside = path.with_name("inside")
    overlaps: list[str] = []
    entered: list[int] = []

    def contend(n: int, start: threading.Barrier) -> None:
        start.wait()
        with state_lock.state_lock(path):
            try:
                os.close(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                overlaps.append(f"thread {n}")
                return
            entered.append(n)
            time.sleep(0)  # let the others run while this one holds it
            os.unlink(inside)

    for _ in range(30):
        plant(path, pid=GONE_PID)
        start = threading.Barrier(8)
        threads = [threading.Thread(target=contend, args=(n, start)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not overlaps
    assert len(entered) == 30 * 8
    assert not path.exists()


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")


@pytest.mark.system  # forks a process
@needs_fork
def test_a_lock_left_by_a_process_killed_holding_it_is_broken_at_once(path: Path, no_wait: None) -> None:
    pid = os.fork()
    if pid == 0:
        with state_lock.state_lock(path):
            os._exit(0)  # dies holding it: no release runs
    os.waitpid(pid, 0)
    assert json.loads(path.read_bytes())["pid"] == pid
    with state_lock.state_lock(path) as held:
        assert json.loads(path.read_bytes())["token"] == held.token


@pytest.mark.system  # forks a process
@needs_fork
@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")
def test_a_child_forked_while_the_parent_holds_the_lock_takes_it_once_released(path: Path) -> None:
    """With flock a forked child shared the parent's lock through its copy of the descriptor;
    this lock is the parent's pid's, so the child waits for the release like anyone else."""
    read_fd, write_fd = os.pipe()
    with state_lock.state_lock(path) as parents:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(read_fd)
                with state_lock.state_lock(path) as childs:
                    owner = json.loads(path.read_bytes())
                    status = 0 if owner["pid"] == os.getpid() and owner["token"] == childs.token else 2
            finally:
                os.write(write_fd, bytes([status]))
                os._exit(status)
        os.close(write_fd)
        assert json.loads(path.read_bytes())["token"] == parents.token
    # Released: the child, waiting within WAIT_S, takes it.
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read(1) == b"\x00"
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not path.exists()
