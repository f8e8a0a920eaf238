"""What a client tells about its own options: its registry, and keeping no state file."""

from __future__ import annotations

import logging

import pytest

NO_STATE_FILE = (
    "chain chat: state_dir=None, so no last-known-good file is kept; a restart serves the "
    "compiled-in default until the first successful poll"
)


def test_the_registry_is_the_one_the_client_was_built_with(make_client, registry):
    client = make_client()

    assert client.registry is registry


def test_the_registry_cannot_be_replaced(make_client, registry):
    client = make_client()

    with pytest.raises(AttributeError):
        client.registry = registry


def test_without_a_state_dir_each_client_says_so_once_at_construction(make_client, caplog):
    with caplog.at_level(logging.INFO, logger="chainclient"):
        make_client(state_dir=None)
        make_client(state_dir=None)

    said = [record for record in caplog.records if "state_dir=None" in record.getMessage()]
    assert [record.getMessage() for record in said] == [NO_STATE_FILE, NO_STATE_FILE]
    assert all(record.levelno == logging.INFO and record.name.startswith("chainclient") for record in said)


def test_with_a_state_dir_nothing_is_said_about_it(make_client, caplog):
    with caplog.at_level(logging.INFO, logger="chainclient"):
        make_client()

    assert not [record for record in caplog.records if "state_dir" in record.getMessage()]
