"""The last-known-good file never goes back, even with several processes sharing one
state_dir and each getting answers from a lagging replica; a failed save shows in health();
a file changed after it was saved (its digest no longer matches) is refused."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import Recorded, Reply, state_file_digest

# A service process: one ChainClient polling as fast as it may, until its stdin closes; it
# prints the (epoch, version) it holds at the end.
SERVICE_PROCESS = textwrap.dedent("""
    import sys
    from chainclient import ChainClient, Provider, Registry, Step

    url, state_dir, instance = sys.argv[1:4]
    registry = Registry({
        "vendor_b": Provider(destination="eu", models={"large": {"text"}}),
        "self_hosted": Provider(destination="local", models={"8b": {"text"}}),
    })
    client = ChainClient(
        url, chain="chat", token="t", registry=registry, state_dir=state_dir,
        default=[Step("self_hosted", "8b", 10000)], poll_interval=0.002, long_poll=False,
        timeout=10.0, max_backoff=0.05, report_usage=False, service="svc", instance=instance,
    )
    client.start()
    sys.stdin.read()
    client.stop()
    print(client.current().epoch, client.current().version)
""")


@pytest.mark.system
def test_two_processes_sharing_a_state_dir_never_take_the_file_back(control_plane, state_dir, saved_version, document):
    rng = random.Random(7)
    latest = 0

    def replicas(request: Recorded) -> Reply:
        # Every answer moves the fleet on by one version. The "lagging" process is mostly
        # answered by a replica a few versions behind, so the version it applies and saves
        # is usually older than the one the other process has just saved.
        nonlocal latest
        latest += 1
        lagging = request.headers["X-Chain-Client"].endswith("lagging")
        behind = rng.randint(1, 8) if rng.random() < (0.8 if lagging else 0.1) else 0
        return Reply.document(document(max(1, latest - behind)))

    control_plane.script(replicas)
    sdk = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(sdk))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SERVICE_PROCESS, control_plane.url, str(state_dir), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for name in ("fresh", "lagging")
    ]
    seen: list[int] = []
    try:
        # Hundreds of rounds, bounded in time however slow the machine.
        deadline = time.monotonic() + 30
        while control_plane.count() < 800 and time.monotonic() < deadline:
            version = saved_version()
            if version is not None and (not seen or version != seen[-1]):
                seen.append(version)
            time.sleep(0.001)  # leaves the GIL to the server threads answering the processes
    finally:
        held = []
        for process in processes:
            output, _ = process.communicate("", timeout=30)
            assert process.returncode == 0
            held.append(tuple(int(n) for n in output.split()))

    assert control_plane.count() >= 800
    assert len(seen) >= 20  # the file really changed under the test, many times
    assert seen == sorted(seen), f"the saved version went back: {seen}"
    # Nothing lost either: the file holds the newest document either process applied.
    assert saved_version() == max(version for _, version in held)


@pytest.mark.parametrize(
    ("on_disk", "applied", "saved"),
    [
        pytest.param((0, 9), (0, 6), (0, 9), id="newer-version-on-disk"),
        pytest.param((1, 2), (0, 51), (1, 2), id="higher-epoch-on-disk"),
        pytest.param((0, 5), (0, 6), (0, 6), id="older-on-disk-is-replaced"),
        pytest.param((0, 60), (1, 2), (1, 2), id="raised-epoch-replaces-higher-version"),
    ],
)
def test_a_save_never_replaces_a_newer_file_written_by_another_process(
    make_client,
    control_plane,
    write_state_file,
    state_dir,
    eventually,
    document,
    on_disk,
    applied,
    saved,
    saved_version,
):
    control_plane.publish(document(1))
    client = make_client().start()
    eventually(lambda: saved_version() == 1)
    # Meanwhile another process sharing the folder saves what it got.
    write_state_file(document(on_disk[1], epoch=on_disk[0]))

    control_plane.publish(document(applied[1], epoch=applied[0]))
    eventually(lambda: client.current().order == applied)
    client.stop()

    document_on_disk = json.loads((state_dir / "chat.json").read_text())["document"]
    assert (document_on_disk.get("epoch", 0), document_on_disk["version"]) == saved
    assert client.health()["last_save_error"] is None


def test_a_failed_save_shows_in_health_until_the_next_successful_one(
    make_client, control_plane, tmp_path, eventually, document, saved_version
):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    control_plane.publish(document(2))
    client = make_client(state_dir=not_a_folder / "state")
    assert client.health()["last_save_error"] is None
    client.start()

    eventually(lambda: client.health()["last_save_error"] is not None)
    failed = client.health()
    assert "FileExistsError" in failed["last_save_error"] or "NotADirectory" in (failed["last_save_error"])
    assert failed["last_save_error_at"] is not None

    not_a_folder.unlink()  # the disk is fixed: the next change is saved
    control_plane.publish(document(3))
    eventually(lambda: client.health()["last_save_error"] is None)

    assert client.health()["last_save_error_at"] is None
    assert (not_a_folder / "state" / "chat.json").exists()


def _edit_by_hand(path: Path, **changes: object) -> None:
    """Change the saved document as someone with an editor would: the digest stays as it was."""
    payload = json.loads(path.read_text())
    payload["document"].update(changes)
    path.write_text(json.dumps(payload))


@pytest.fixture
def saved_then_edited(make_client, control_plane, state_dir, eventually, document, saved_version):
    """A state file the client saved (v7), whose version was then raised by hand."""
    control_plane.always_document(document(7, "pin_secondary"))
    first = make_client().start()
    eventually(lambda: saved_version() == 7)
    first.stop()
    _edit_by_hand(state_dir / "chat.json", version=99991004)
    return state_dir / "chat.json"


def test_a_file_edited_by_hand_is_refused_with_one_warning_and_health_says_so(
    saved_then_edited, make_client, refused_url, caplog
):
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="chainclient")

    client = make_client(base_url=refused_url)

    assert (client.current().source, client.current().version) == ("default", 0)
    records = [r for r in caplog.records if r.name.startswith("chainclient")]
    assert [r.levelno for r in records] == [logging.WARNING]
    assert f"ignoring state file {saved_then_edited}: digest mismatch" in records[0].getMessage()
    assert client.health()["state_file_refused"] == (
        "digest mismatch: the file changed after it was saved (edited by hand?)"
    )


def test_an_edited_file_does_not_hold_back_the_next_change(
    saved_then_edited, make_client, control_plane, eventually, document, saved_version
):
    control_plane.always_document(document(8))
    client = make_client()
    assert client.health()["state_file_refused"] is not None

    client.start()
    eventually(lambda: saved_version() == 8)

    assert (client.current().source, client.current().version) == ("live", 8)
    # The refused file was replaced by a good one: nothing is wrong with it any more.
    eventually(lambda: client.health()["state_file_refused"] is None)


def test_a_file_from_a_release_before_the_digest_is_served_and_rewritten_with_one(
    make_client, refused_url, state_dir, document, caplog
):
    # What chainclient 0.3 wrote: format /1, no digest.
    state_dir.mkdir(parents=True)
    path = state_dir / "chat.json"
    legacy = {"format": "chainclient-state/1", "chain": "chat", "saved_at": 1764381784.2, "document": document(7)}
    path.write_text(json.dumps(legacy))
    caplog.set_level(logging.DEBUG, logger="chainclient")

    client = make_client(base_url=refused_url)

    assert (client.current().source, client.current().version) == ("disk", 7)
    assert client.health()["state_file_refused"] is None
    records = [r for r in caplog.records if r.name.startswith("chainclient")]
    assert [r.levelno for r in records] == [logging.INFO]
    assert "written before digests (chainclient-state/1); rewriting it with one" in records[0].getMessage()
    rewritten = json.loads(path.read_text())
    assert rewritten["format"] == "chainclient-state/2"
    assert rewritten["digest"] == state_file_digest(rewritten)
    assert make_client(base_url=refused_url).current() == client.current()  # the next run's start


def test_a_file_laid_out_again_with_the_same_content_is_still_accepted(
    make_client, refused_url, write_state_file, document
):
    path = write_state_file(document(7))
    payload = json.loads(path.read_text())
    # Indented, keys reversed: the digest is over the content, not the bytes.
    path.write_text(json.dumps(dict(reversed(payload.items())), indent=4))

    client = make_client(base_url=refused_url)

    assert (client.current().source, client.current().version) == ("disk", 7)
    assert client.health()["state_file_refused"] is None
