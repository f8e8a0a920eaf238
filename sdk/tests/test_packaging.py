"""chainclient as people get it: built, installed in a fresh virtualenv, and used as the README says.

The sdist and the wheel are built from a clean copy of sdk/ (no egg-info, build/ or caches
left by an editable install) with ``python -m build --no-isolation``: no network at test
time, the setuptools pinned in requirements-dev.txt, and ``build`` makes the wheel *from the
sdist*, so a file the sdist forgets breaks the wheel too. ``build`` also checks that the
installed setuptools meets ``[build-system] requires`` before it starts, and says so.

The wheel is installed with ``pip --python <venv python> install --no-deps --no-index``
into a venv made with ``--without-pip`` (fast, offline, and installed by the venv's own
interpreter's rules), then the README's quick start runs there with ``-I``, from a
directory outside the source tree, against the scripted local control plane of conftest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from email.message import Message
from email.parser import Parser
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest
from conftest import ControlPlane

import chainclient

SDK = Path(__file__).resolve().parents[1]
README = SDK / "README.md"
IN_CI = os.environ.get("CI", "").lower() == "true"
# Generous bounds for a slow machine; none of them is what a test asserts on.
SUBPROCESS_TIMEOUT_S = 120
LIVE_WITHIN_S = 20

# Left out of the copy at its top level: what an editable install, a build or a test run
# leaves in sdk/ and a clean clone does not have.
GENERATED = {"build", "dist", ".venv", ".pytest_cache", ".mypy_cache", ".ruff_cache"}

CLASSIFIERS = {
    "Development Status :: 4 - Beta",
    "Intended Audience :: Developers",
    "Operating System :: OS Independent",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.10",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Typing :: Typed",
}


def _need_build_tools() -> None:
    """Skip without the build tools (fail in CI, which installs them)."""
    missing = []
    for name, major in (("build", 1), ("setuptools", 77), ("pip", 23)):
        try:
            if int(version(name).split(".")[0]) < major:
                missing.append(f"{name}>={major}")
        except (PackageNotFoundError, ValueError):
            missing.append(f"{name}>={major}")
    if missing:
        message = f"needs {', '.join(missing)}: pip install -r requirements-dev.txt"
        if IN_CI:
            pytest.fail(message + " (CI must run it)")
        pytest.skip(message)


def _ignore_generated(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == SDK
    return {
        name
        for name in names
        if name == "__pycache__"
        or name.endswith((".pyc", ".pyo"))
        or (top and (name in GENERATED or name.endswith(".egg-info")))
    }


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(command)} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result


def _clean_env() -> dict[str, str]:
    """The environment without PYTHON* variables (PYTHONPATH could bring the source tree)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}


def _package_files() -> set[str]:
    """The package's files as they should ship: every module, and py.typed."""
    package = SDK / "chainclient"
    files = {path.relative_to(SDK).as_posix() for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    return files | {"chainclient/py.typed"}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the sdist, then the wheel from it, out of a clean copy of sdk/."""
    _need_build_tools()
    root = tmp_path_factory.mktemp("packaging")
    source = root / "sdk"
    shutil.copytree(SDK, source, ignore=_ignore_generated)
    out = root / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], env=_clean_env())
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"expected one sdist and one wheel in {out}: {sorted(out.iterdir())}"
    return {"sdist": sdists[0], "wheel": wheels[0]}


def _wheel_metadata(wheel: Path) -> tuple[list[str], Message]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [name for name in names if name.endswith(".dist-info/METADATA")]
        return names, Parser().parsestr(archive.read(metadata).decode())


@pytest.mark.system
def test_the_sdist_carries_the_docs_the_license_and_the_package(dists: dict[str, Path]) -> None:
    sdist = dists["sdist"]
    assert sdist.name == f"chainclient-{chainclient.__version__}.tar.gz"
    top = f"chainclient-{chainclient.__version__}/"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(top) for name in archive.getnames()}
    wanted = {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "PKG-INFO"} | _package_files()
    assert wanted <= names, f"missing from the sdist: {sorted(wanted - names)}"
    stray = sorted(name for name in names if "__pycache__" in name or name.endswith(".pyc"))
    assert not stray, f"bytecode in the sdist: {stray}"


@pytest.mark.system
def test_the_wheel_carries_py_typed_and_the_metadata(dists: dict[str, Path]) -> None:
    wheel = dists["wheel"]
    assert wheel.name == f"chainclient-{chainclient.__version__}-py3-none-any.whl"
    names, metadata = _wheel_metadata(wheel)
    dist_info = f"chainclient-{chainclient.__version__}.dist-info/"

    missing = _package_files() - set(names)
    assert not missing, f"missing from the wheel: {sorted(missing)}"
    others = sorted(name for name in names if not name.startswith(("chainclient/", dist_info)))
    assert not others, f"the wheel installs more than the package: {others}"
    assert f"{dist_info}licenses/LICENSE" in names

    assert metadata["Name"] == "chainclient"
    assert metadata["Version"] == chainclient.__version__
    assert metadata["Requires-Python"] == ">=3.10"
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    requires = metadata.get_all("Requires-Dist") or []
    assert all('; extra == "' in line for line in requires), f"the core SDK is standard-library only: {requires}"
    assert sorted(metadata.get_all("Provides-Extra") or []) == ["anthropic", "openai", "verify"]
    classifiers = set(metadata.get_all("Classifier") or [])
    assert CLASSIFIERS <= classifiers, f"missing classifiers: {sorted(CLASSIFIERS - classifiers)}"
    assert any(classifier.startswith("Topic :: ") for classifier in classifiers)


@pytest.mark.system
@pytest.mark.parametrize(
    ("extra", "pulled"),
    [("", set()), ("[openai]", {"openai"}), ("[anthropic]", {"anthropic"}), ("[verify]", {"cryptography"})],
    ids=["core", "openai", "anthropic", "verify"],
)
def test_the_wheel_pulls_a_vendor_library_only_with_its_extra(
    dists: dict[str, Path], tmp_path: Path, extra: str, pulled: set[str]
) -> None:
    """What ``pip install chainclient`` and ``pip install "chainclient[openai]"`` would
    install, resolved against the package index (``--dry-run``: nothing is installed)."""
    report = tmp_path / "report.json"
    _run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", str(report), f"{dists['wheel']}{extra}"]
    )  # fmt: skip
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    if not pulled:
        assert names == {"chainclient"}, f"the core pulls third-party packages: {sorted(names - {'chainclient'})}"
    else:
        assert pulled <= names, f"{extra} does not pull {pulled}: {sorted(names)}"


def _quick_start(readme: str) -> str:
    """The first ```python block of the README's "## Quick start" section."""
    section = re.search(r"^##[ \t]+Quick start[ \t]*\n(.*?)(?=^##[ \t]|\Z)", readme, re.M | re.S | re.I)
    if section is None:
        pytest.fail(f"{README} has no '## Quick start' section: this test runs its first ```python block")
    block = re.search(r"^```python[ \t]*\n(.*?)^```", section.group(1), re.M | re.S)
    if block is None:
        pytest.fail(f"the '## Quick start' section of {README} has no ```python block: this test runs it")
    return block.group(1)


# Around the quick start, verbatim in between. The prologue points every ChainClient it
# builds at the local control plane and a temporary state_dir (so the README's placeholder
# host is never looked up), and makes start() return once the live document is held: the
# quick start reads current() right after start(), before the first poll could answer.
# The epilogue prints, as JSON, what the test checks.
PROLOGUE = """\
import inspect as _harness_inspect
import time as _harness_time

import chainclient as _harness_chainclient

_harness_clients = []
_harness_init = _harness_chainclient.ChainClient.__init__
_harness_start = _harness_chainclient.ChainClient.start
_harness_signature = _harness_inspect.signature(_harness_init)
if not {{"base_url", "state_dir"}} <= set(_harness_signature.parameters):
    raise SystemExit(f"harness: ChainClient{{_harness_signature}} has no base_url or state_dir")


def _harness_local_init(self, *args, **kwargs):
    bound = _harness_signature.bind(self, *args, **kwargs)
    bound.arguments["base_url"] = {url!r}
    bound.arguments["state_dir"] = {state_dir!r}
    _harness_init(*bound.args, **bound.kwargs)
    _harness_clients.append(self)


def _harness_start_until_live(self):
    started = _harness_start(self)
    deadline = _harness_time.monotonic() + {live_within_s!r}
    while self.current().source != "live":
        if _harness_time.monotonic() > deadline:
            raise SystemExit("harness: no live document within {live_within_s} s")
        _harness_time.sleep(0.01)
    return started


_harness_chainclient.ChainClient.__init__ = _harness_local_init
_harness_chainclient.ChainClient.start = _harness_start_until_live
# ---- the README's quick start ----
"""

EPILOGUE = """
# ---- end of the README's quick start ----
import importlib.metadata as _harness_metadata
import json as _harness_json

if not _harness_clients:
    raise SystemExit("harness: the quick start built no ChainClient")
_harness_document = _harness_clients[-1].current()
print("HARNESS " + _harness_json.dumps({
    "file": _harness_chainclient.__file__,
    "version": _harness_chainclient.__version__,
    "distribution_version": _harness_metadata.version("chainclient"),
    "source": _harness_document.source,
    "chain_version": _harness_document.version,
    "preset": _harness_document.preset,
}))
"""


@pytest.mark.system
def test_the_readme_quick_start_runs_from_the_installed_wheel(
    dists: dict[str, Path], control_plane: ControlPlane, document: Any, tmp_path: Path
) -> None:
    quick_start = _quick_start(README.read_text(encoding="utf-8"))
    control_plane.publish(document(7, "pin_secondary"))

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=_clean_env())
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    install = ["install", "--no-deps", "--no-index", "--no-cache-dir", str(dists["wheel"])]
    _run([sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--python", str(python), *install])

    state_dir = tmp_path / "state"
    harness = PROLOGUE.format(url=control_plane.url, state_dir=str(state_dir), live_within_s=LIVE_WITHIN_S)
    script = tmp_path / "quick_start.py"
    script.write_text(harness + textwrap.dedent(quick_start) + EPILOGUE, encoding="utf-8")
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert not work.resolve().is_relative_to(SDK)

    result = _run([str(python), "-I", str(script)], cwd=work, env=_clean_env())

    lines = [line for line in result.stdout.splitlines() if line.startswith("HARNESS ")]
    assert len(lines) == 1, f"no harness line in the output:\n{result.stdout}\n{result.stderr}"
    seen = json.loads(lines[0].removeprefix("HARNESS "))
    assert Path(seen["file"]).resolve().is_relative_to(venv.resolve()), seen["file"]
    assert seen["version"] == seen["distribution_version"] == chainclient.__version__
    assert (seen["source"], seen["chain_version"], seen["preset"]) == ("live", 7, "pin_secondary")
    polls = [request for request in control_plane.requests if request.path == "/api/v1/chains/chat"]
    assert polls, "the control plane saw no poll"
    assert polls[0].headers["User-Agent"].startswith(f"chainclient/{chainclient.__version__} ")
    assert json.loads((state_dir / "chat.json").read_text())["document"]["version"] == 7
