"""The secret key: a deployment's must be strong, and a local run gets one generated once.

A process refuses to start without a strong ``SECRET_KEY`` (Django's deploy-check rule: at
least 50 characters, at least 5 different ones, no ``django-insecure-`` prefix). Local runs
need no configuration: ``make run``, ``make test``, ``make lint`` and ``make bench`` generate a
random key once into ``VAR_DIR/secret_key`` (mode 0600), which the settings read when
``SECRET_KEY`` is unset, as does anything run later in that checkout (``manage.py ...``).
With ``DEBUG=true`` the settings generate that file themselves on first use. A deployment
sets ``SECRET_KEY``, the same on every process that shares sessions.

    python -m controlplane.secret_key PATH   # create PATH unless it exists (the Makefile)
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
LOCAL_KEY_NAME = "secret_key"


def weakness(key: str) -> str | None:
    """Why ``key`` is too weak to sign sessions, in a few words; None when it is strong."""
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"it starts with {SECRET_KEY_INSECURE_PREFIX!r}"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"it has {len(key)} characters, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"it has {len(set(key))} different characters, fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS}"
    return None


def configured_secret_key(environment_key: str, *, local_file: Path, create: bool) -> str:
    """The key to sign with: ``environment_key`` (SECRET_KEY) when set, else the local key in
    ``local_file`` (created first when ``create``). Raises ImproperlyConfigured, in one line
    naming SECRET_KEY and how to generate one, when neither gives a strong key."""
    if environment_key:
        reason = weakness(environment_key)
        if reason:
            raise ImproperlyConfigured(f"SECRET_KEY is too weak ({reason}): set it to the output of {GENERATE}")
        return environment_key
    if create:
        create_local_key(local_file)
    if not local_file.exists():
        raise ImproperlyConfigured(
            f"SECRET_KEY is not set: set it to the output of {GENERATE} (every process of a deployment "
            f"the same); local runs use {local_file}, which make run and make test generate"
        )
    return read_local_key(local_file)


def read_local_key(path: Path) -> str:
    """The key kept in ``path``, refused when other users may read it or it is weak."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ImproperlyConfigured(
            f"SECRET_KEY comes from {path}, which other users may read (mode {mode:04o}): chmod 600 {path}"
        )
    key = path.read_text().strip()
    reason = weakness(key)
    if reason:
        raise ImproperlyConfigured(
            f"SECRET_KEY from {path} is too weak ({reason}): delete the file to have a new one "
            f"generated, or set SECRET_KEY to the output of {GENERATE}"
        )
    return key


def create_local_key(path: Path) -> bool:
    """Write a new random key to ``path`` (mode 0600) unless it exists; True when written.

    Written beside it first and linked into place, so concurrent starts agree on one key."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            return False
    finally:
        draft.unlink()
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m controlplane.secret_key PATH", file=sys.stderr)
        return 2
    path = Path(argv[0])
    if create_local_key(path):
        print(f"Generated a local secret key in {path} (mode 0600); deployments set SECRET_KEY instead")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
