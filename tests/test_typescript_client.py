"""The TypeScript client (sdk-ts/): its own suite, and its promises against the real control plane.

- ``npm test`` in sdk-ts: the type check and build, the client contract's vectors
  (sdk/tests/vectors/client_contract.json, which the Python SDK runs too: both must report the
  same counts), the failover-drill vectors (sdk/tests/vectors/drills.json, likewise), the
  signed-document vectors, and the conformance table of the adapters on the npm libraries
  (every fault provider scenario, against the Python SDK's fault provider).
- The package: its files (the adapters too, under their subpath exports) and, installed in a
  service without the optional vendor libraries, its main entry.
- A system test: TypeScript clients (tests/ts_client/follow.mjs, three ChainClients sharing one
  state directory) follow the production web process (granian, two workers) on a PostgreSQL
  cluster of its own: a change reaches them by long poll and the fleet shows their identities;
  the web process killed, they keep the pin and, once its expiry passes on their clock, serve
  the chain's default themselves; restarted with the control plane still down, they start from
  the file; after a database restore they keep the newer document and say they are ahead,
  until ``raise_epoch``, whose document they then follow.

Slow on purpose (about 25 s): real processes, a restore and an outage, each waited out by
polling for the state the client must reach, never by sleeping a guessed time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from chainclient.fault_scenarios import SCENARIOS
from presets.registry import PROVIDERS
from tests.conftest import needs
from tests.servers import Stack, get, require_tools, running_stack, select, wait_for

# One process builds sdk-ts (npm ci writes its node_modules) and starts the stack.
pytestmark = pytest.mark.xdist_group("tests.test_typescript_client")

ROOT = Path(__file__).resolve().parents[1]
SDK_TS = ROOT / "sdk-ts"
PROBE = Path(__file__).parent / "ts_client" / "follow.mjs"
CONTRACT = json.loads((ROOT / "sdk" / "tests" / "vectors" / "client_contract.json").read_text(encoding="utf-8"))
DRILLS = json.loads((ROOT / "sdk" / "tests" / "vectors" / "drills.json").read_text(encoding="utf-8"))
REGISTRY = {
    name: {"destination": p.destination, "models": {model: sorted(caps) for model, caps in p.models.items()}}
    for name, p in PROVIDERS.items()
}
COMPILED_DEFAULT = [{"provider": "self_hosted", "model": "8b", "timeout_ms": 10000}]


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``argv`` to its end, or killed with every process it started (npm runs node, which runs
    a process per test file) once ``timeout`` passes: a hung test must fail, not hang the suite."""
    process = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{' '.join(argv)} did not end within {timeout:g} s:\n{stdout[-6000:]}{stderr[-3000:]}"
        ) from expired
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _npm() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        needs("the TypeScript client needs Node.js 20+ and npm (Debian's nodejs and npm)")
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        needs(f"the TypeScript client needs Node.js 20+ (package.json engines); this machine has {version}")
    return str(npm)


@contextmanager
def sdk_ts_alone() -> Iterator[None]:
    """Hold sdk-ts for one npm run that writes to it (an install, or a build: ``npm test`` and
    ``npm pack`` compile into dist/ first), against every other process of the suite."""
    (ROOT / "var").mkdir(exist_ok=True)
    with open(ROOT / "var" / "sdk-ts.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def built() -> Path:
    """sdk-ts with its locked development packages installed (npm ci) and built, once per
    checkout and package-lock.json, built again each time (the sources may have changed).

    Under a lock every process of the suite shares: this module's tests may run in more than
    one process, and an ``npm ci`` in one (which empties node_modules first) while another
    builds or type-checks makes the other find half a TypeScript. The first process installs,
    then leaves a mark naming the lock file's digest; the others wait for it and use that."""
    npm = _npm()
    lock_digest = hashlib.sha256((SDK_TS / "package-lock.json").read_bytes()).hexdigest()
    mark = SDK_TS / "node_modules" / ".built-for"
    with sdk_ts_alone():
        if not mark.exists() or mark.read_text() != lock_digest:
            done = run([npm, "ci", "--no-audit", "--no-fund"], SDK_TS)
            assert done.returncode == 0, done.stdout + done.stderr
            mark.write_text(lock_digest)
        done = run([npm, "run", "build"], SDK_TS)
        assert done.returncode == 0, done.stdout + done.stderr
    return SDK_TS


def test_the_typescript_suite_passes_and_runs_every_shared_vector(built: Path) -> None:
    with sdk_ts_alone():
        done = run([_npm(), "test"], built)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    counts = re.search(r"client contract: (\d+) poller vectors, (\d+) router vectors passed", done.stdout)
    assert counts is not None, done.stdout[-3000:]
    # The Python SDK's suite runs each of these (sdk/tests/test_client_contract.py): the same count.
    assert (int(counts[1]), int(counts[2])) == (len(CONTRACT["poller"]), len(CONTRACT["router"]))
    # And every failover-drill vector (the Python SDK's sdk/tests/test_drill_vectors.py runs each).
    drills = re.search(r"drill vectors: (\d+) digests, (\d+) documents, (\d+) cases passed", done.stdout)
    assert drills is not None, done.stdout[-3000:]
    assert tuple(map(int, drills.groups())) == (len(DRILLS["digests"]), len(DRILLS["documents"]), len(DRILLS["cases"]))
    # And the conformance table: every fault provider scenario x (complete, stream) x (openai,
    # @anthropic-ai/sdk), through the npm libraries, against the Python SDK's fault provider.
    conformance = re.search(r"conformance: (\d+) cases passed", done.stdout)
    assert conformance is not None, done.stdout[-3000:]
    assert int(conformance[1]) == len(SCENARIOS) * 2 * 2
    assert re.search(r"ℹ fail 0", done.stdout), done.stdout[-3000:]


def test_the_package_packs_with_its_build_and_declarations_only(built: Path) -> None:
    done = run([_npm(), "pack", "--dry-run", "--json", "--ignore-scripts"], built)
    assert done.returncode == 0, done.stderr
    files = {entry["path"] for entry in json.loads(done.stdout)[0]["files"]}
    assert {"package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/router.d.ts"} <= files
    # The adapters on the vendors' libraries, reached through the subpath exports only.
    names = ("openai", "anthropic", "library")
    adapters = {f"dist/integrations/{name}.{ext}" for name in names for ext in ("js", "d.ts")}
    assert adapters <= files
    assert not {f for f in files if f.startswith(("src/", "test/", "node_modules/"))}
    package = json.loads((built / "package.json").read_text())
    assert (
        package.get("dependencies", {}) == {} and package["type"] == "module" and package["engines"]["node"] == ">=20"
    )
    assert package["exports"]["./openai"]["import"] == "./dist/integrations/openai.js"
    assert package["exports"]["./anthropic"]["types"] == "./dist/integrations/anthropic.d.ts"
    assert all(package["peerDependenciesMeta"][name] == {"optional": True} for name in ("openai", "@anthropic-ai/sdk"))


CONSUMER = """
import { ChainClient, Registry, Router, step, type ChainDocument, type RouteResult } from "chainclient";

const registry = new Registry({ vendor_a: { destination: "vendor_a-us", models: { large: ["text"] } } });
const client = new ChainClient("http://127.0.0.1:9", {
  chain: "chat", token: "cpt_x", registry, default: [step("vendor_a", "large", 20000)], stateDir: null,
});
const document: ChainDocument = client.current();
const router = new Router(client, { transports: { vendor_a: async (s) => `answer from ${s.provider}` } });
const result: RouteResult<string> = await router.complete<string>("hello");
console.log(JSON.stringify({ source: document.source, version: document.version, served: result.value }));
"""


def test_a_service_installs_the_packed_tarball_and_type_checks_and_runs_against_it(built: Path, tmp_path: Path) -> None:
    """npm pack, then a TypeScript service of its own: npm install of the tarball (no other
    package comes with it), tsc --noEmit strict against its declarations, node runs it."""
    with sdk_ts_alone():
        done = run([_npm(), "pack", "--pack-destination", str(tmp_path)], built)
    assert done.returncode == 0, done.stdout + done.stderr
    [tarball] = tmp_path.glob("chainclient-*.tgz")
    service = tmp_path / "service"
    service.mkdir()
    (service / "package.json").write_text(json.dumps({"name": "service", "private": True, "type": "module"}))
    done = run([_npm(), "install", "--no-audit", "--no-fund", "--offline", str(tarball)], service)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (service / "node_modules").iterdir() if not p.name.startswith(".")) == ["chainclient"]
    (service / "main.ts").write_text(CONSUMER)
    tsc = built / "node_modules" / "typescript" / "bin" / "tsc"
    options = ["--strict", "--noEmit", "--module", "nodenext", "--target", "es2022", "--types", "node"]
    options += ["--typeRoots", str(built / "node_modules" / "@types")]
    done = run(["node", str(tsc), *options, "main.ts"], service)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(["node", str(tsc), *options[2:], "--outDir", "out", "main.ts"], service)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(["node", "out/main.js"], service, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"source": "default", "version": 0, "served": "answer from vendor_a"}
    # Without the optional libraries, an adapter's subpath says which one it needs.
    done = run(["node", "--input-type=module", "-e", "await import('chainclient/openai')"], service, timeout=60)
    assert done.returncode != 0 and "Cannot find package 'openai'" in done.stderr, done.stderr


# --- against the real control plane --------------------------------------------------------------


class Probe:
    """tests/ts_client/follow.mjs: three TypeScript ChainClients, driven line by line."""

    def __init__(self, url: str, token: str, state_dir: Path) -> None:
        self.start(
            ["node", str(PROBE), url, token, str(state_dir), "3", json.dumps(REGISTRY), json.dumps(COMPILED_DEFAULT)]
        )

    def start(self, argv: list[str]) -> None:
        """Run ``argv`` (a probe script that answers one JSON line per command) and read its
        first line; other system tests drive their own scripts through this."""
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()
        self.first = self.read()

    def _read_lines(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")

    def read(self, timeout: float = 30) -> dict[str, Any]:
        """The probe's next answer; a probe that hangs fails the test instead of hanging it."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.process.kill()
            raise AssertionError(f"the TypeScript probe did not answer within {timeout:g} s") from None
        if not line:
            assert self.process.stderr is not None
            raise AssertionError(f"the TypeScript probe ended: {self.process.stderr.read()[-3000:]}")
        return json.loads(line)

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def current(self) -> list[dict[str, Any]]:
        return self.ask("status")["current"]

    def all(self, **wanted: Any) -> bool:
        return all(all(c[k] == v for k, v in wanted.items()) for c in self.current())

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.ask("stop") == {"event": "stopped"}
                assert self.process.stdin is not None
                self.process.stdin.close()
                assert self.process.wait(10) == 0
            finally:
                if self.process.poll() is None:
                    self.process.kill()
                    self.process.wait()


@pytest.fixture(scope="module")
def stack(built: Path) -> Iterator[Stack]:
    require_tools("the TypeScript client's system test")
    with running_stack("tsclient", workers=2) as stack:
        yield stack


def live(stack: Stack) -> dict[str, Any]:
    status, _, body = get(stack, "/api/v1/chains/chat", token=stack.read_token)
    assert status == 200, body
    return json.loads(body)


def test_typescript_clients_follow_survive_an_outage_expire_a_pin_restart_from_the_file_and_a_restore(
    stack: Stack, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    dump = stack.postgres.root / "ts-snapshot.dump"
    before = live(stack)
    probe = Probe(stack.url, stack.read_token, state_dir)
    try:
        # The compiled-in default first (no file yet), then the live document.
        assert {c["source"] for c in probe.first["current"]} == {"default"}
        assert wait_for(lambda: probe.all(version=before["version"], source="live"), 15)
        stack.postgres.run("pg_dump", "-Fc", "-f", dump, "postgres")

        # A change reaches every client by long poll, and the fleet lists them by identity.
        status, _, body = select(stack, "chat", "pin_secondary", duration_minutes=60)
        assert status == 200, body
        pinned = json.loads(body)["version"]
        assert wait_for(lambda: probe.all(version=pinned, preset="pin_secondary"), 10)

        def fleet_lists_them() -> bool:
            _, _, answer = get(stack, "/api/v1/chains/chat/instances", token=stack.read_token)
            seen = {i["client"]: i["applied_version"] for i in json.loads(answer)["instances"]}
            return all(seen.get(f"ts-system/ts-{n}") == pinned for n in range(3))

        assert wait_for(fleet_lists_them, 15)

        # The control plane goes away: the pin is kept; past its expiry the clients serve the
        # chain's default on their own.
        stack.kill_web()
        assert wait_for(lambda: all(h["consecutive_failures"] >= 1 for h in probe.ask("status")["health"]), 15)
        assert probe.all(version=pinned, preset="pin_secondary", source="live")
        expired = probe.ask("advance 3601")
        assert {(c["preset"], c["is_default"], c["version"]) for c in expired["current"]} == {("normal", True, pinned)}
        assert all(h["expired_pin"] for h in expired["health"])
    finally:
        probe.stop()

    # Restarted while the control plane is still down: the pin from the file, at once.
    probe = Probe(stack.url, stack.read_token, state_dir)
    try:
        assert {(c["source"], c["version"], c["preset"]) for c in probe.first["current"]} == {
            ("disk", pinned, "pin_secondary")
        }

        # The restore: the database goes back to before the pin. The clients keep the newer
        # document and say they are ahead of the server, until the epoch is raised.
        stack.postgres.run("pg_restore", "--clean", "--if-exists", "-d", "postgres", dump)
        stack.start_web()
        assert live(stack)["version"] == before["version"]
        assert wait_for(lambda: all(h["ahead_of_server"] for h in probe.ask("status")["health"]), 15)
        assert probe.all(version=pinned, preset="pin_secondary")
        assert "epoch raised from 0 to" in stack.manage("raise_epoch", "--reason", "restored from the nightly backup")
        epoch = live(stack)["epoch"]
        assert epoch > 0
        assert wait_for(lambda: probe.all(epoch=epoch, version=before["version"], preset=before["preset"]), 15)
        assert not any(h["ahead_of_server"] for h in probe.ask("status")["health"])
    finally:
        probe.stop()


def test_the_typescript_wire_constants_are_the_python_sdk_s(built: Path) -> None:
    """sdk-ts/src/wire.ts is the third copy of what clients and server agree on
    (sdk/chainclient/wire.py; presets/wire.py is checked by tests/test_wire.py): its
    constants, the bytes a signature covers and a drill's service digest."""
    from chainclient import wire

    script = (
        "import * as w from './dist/wire.js';"
        "const d={a:1,b:'\\u00e9',signature:{alg:'ed25519',key_id:'k',signed_at:'t',value:'v'}};"
        "const h=w.sha256Hex('cpt_drill');"
        "console.log(JSON.stringify({...w, signed: w.signedContent(d).toString('latin1'),"
        " token_sha256: h, drill_digests: [1, 7, 2147483647].map((id) => w.drillServiceDigest(id, h))}))"
    )
    done = subprocess.run(["node", "--input-type=module", "-e", script], cwd=built, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ts = json.loads(done.stdout)
    for name in (
        "CHAIN_MIN_STEPS",
        "CHAIN_MAX_STEPS",
        "STEP_MIN_TIMEOUT_MS",
        "STEP_MAX_TIMEOUT_MS",
        "MAX_WAIT_S",
        "REPORT_MAX_STEPS",
        "REPORT_MAX_PROVIDERS",
        "SIGNATURE_ALGORITHM",
        "DRILL_SHARE_MIN_BP",
        "DRILL_SHARE_MAX_BP",
        "DRILL_MAX_MINUTES",
        "DRILL_REPORT_INTERVAL_S",
        "FAILURE_POLICY_BOUND_MIN_MS",
        "FAILURE_POLICY_BOUND_MAX_MS",
        "FAILURE_POLICY_RETRY_MAX_WAIT_MS",
    ):
        assert ts[name] == getattr(wire, name), name
    assert tuple(ts["FAILURE_POLICY_COMMITS"]) == wire.FAILURE_POLICY_COMMITS
    assert tuple(ts["OUTCOME_CLASSES"]) == wire.OUTCOME_CLASSES
    assert tuple(ts["LATENCY_BOUNDS_MS"]) == wire.LATENCY_BOUNDS_MS
    assert tuple(ts["TOKEN_FIELDS"]) == wire.TOKEN_FIELDS
    assert ts["SIGNATURE_CONTEXT"].encode() == wire.SIGNATURE_CONTEXT
    document = {"a": 1, "b": "\u00e9", "signature": {"alg": "ed25519", "key_id": "k", "signed_at": "t", "value": "v"}}
    assert ts["signed"].encode("latin1") == wire.signed_content(document)
    # Failover drills: the faults, and the digest naming a service that takes part.
    assert tuple(ts["DRILL_FAULTS"]) == wire.DRILL_FAULTS
    assert ts["DRILL_SERVICE_CONTEXT"].encode() == wire.DRILL_SERVICE_CONTEXT
    token_sha256 = hashlib.sha256(b"cpt_drill").hexdigest()
    assert ts["token_sha256"] == token_sha256
    assert ts["drill_digests"] == [wire.drill_service_digest(i, token_sha256) for i in (1, 7, 2147483647)]
