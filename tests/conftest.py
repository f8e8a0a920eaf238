"""Shared fixtures: alice the on-call, bob the viewer, tokens, and the example presets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from presets import services
from presets.models import ServiceToken
from presets.presets_file import load_presets_file
from presets.providers import get_registry

IN_CI = os.environ.get("CI", "").lower() == "true"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres") and not settings.DATABASES["default"]["ENGINE"].endswith(
        "postgresql"
    ):
        message = "needs PostgreSQL: set DATABASE_URL=postgres://..."
        if IN_CI:
            pytest.fail(message + " (CI must run it)")
        pytest.skip(message)


@pytest.fixture
def example_file() -> Path:
    return Path(settings.BASE_DIR) / "presets" / "presets.example.json"


@pytest.fixture
def synced(db: Any, example_file: Path) -> None:
    """The example presets loaded: chat and incident-summary at v1 on their defaults."""
    services.sync_presets(presets_file=load_presets_file(example_file, registry=get_registry()))


@pytest.fixture
def alice(db: Any) -> User:
    user = User.objects.create_user("alice", password="alice-pass-123")
    user.groups.add(Group.objects.get(name="oncall"))
    return user


@pytest.fixture
def bob(db: Any) -> User:
    user = User.objects.create_user("bob", password="bob-pass-123")
    user.groups.add(Group.objects.get(name="viewer"))
    return user


def make_token(name: str, scope: str) -> str:
    token = ServiceToken(name=name, scope=scope)
    raw = token.issue()
    token.save()
    return raw


@pytest.fixture
def read_token(db: Any) -> str:
    return make_token("reader", "read")


@pytest.fixture
def write_token(db: Any) -> str:
    return make_token("deployer", "write")


@pytest.fixture
def reader(read_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {read_token}"})


@pytest.fixture
def writer(write_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {write_token}"})


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"
