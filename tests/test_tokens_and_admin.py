"""Service tokens (hashed at rest, scoped, revocable) and the read-only admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from presets.models import ServiceToken, hash_token

pytestmark = pytest.mark.usefixtures("synced")


def test_create_token_prints_the_token_once_and_stores_only_its_hash(capsys) -> None:
    call_command("create_token", "checkout", "--scope", "write")
    out, err = capsys.readouterr()
    raw = out.strip()
    assert raw.startswith("cpt_") and len(raw) > 40
    assert "shown only this once" in err
    token = ServiceToken.objects.get(name="checkout")
    assert token.scope == "write"
    assert token.token_hash == hash_token(raw)
    assert raw not in str(ServiceToken.objects.values().get(name="checkout"))
    response = Client().get("/api/v1/chains/chat", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_create_token_defaults_to_read_scope_and_refuses_a_taken_name(capsys) -> None:
    call_command("create_token", "dashboards")
    assert ServiceToken.objects.get(name="dashboards").scope == "read"
    with pytest.raises(CommandError, match="exists"):
        call_command("create_token", "dashboards")
    with pytest.raises(CommandError, match="slugs"):
        call_command("create_token", "not a slug!")


def test_a_revoked_token_is_refused(read_token: str) -> None:
    ServiceToken.objects.update(revoked_at=timezone.now())
    response = Client().get("/api/v1/chains/chat", headers={"Authorization": f"Bearer {read_token}"})
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]


def test_the_roles_exist_after_migrating() -> None:
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "oncall"}


@pytest.fixture
def staff_client(db) -> Client:
    admin = User.objects.create_superuser("root", "root@example.com", "root-pass-123")
    client = Client()
    client.force_login(admin)
    return client


@pytest.mark.parametrize("model", ["chain", "preset", "selection"])
def test_the_admin_shows_chains_presets_and_selections_read_only(staff_client: Client, model) -> None:
    from django.apps import apps

    pk = apps.get_model("presets", model).objects.first().pk
    listing = staff_client.get(f"/admin/presets/{model}/")
    assert listing.status_code == 200
    assert staff_client.get(f"/admin/presets/{model}/add/").status_code == 403
    assert staff_client.post(f"/admin/presets/{model}/{pk}/delete/", {"post": "yes"}).status_code == 403
    page = staff_client.get(f"/admin/presets/{model}/{pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    history = staff_client.get(f"/admin/presets/{model}/{pk}/history/")
    assert history.status_code == 200


def test_the_admin_creates_a_token_and_shows_it_once(staff_client: Client) -> None:
    response = staff_client.post("/admin/presets/servicetoken/add/", {"name": "etl", "purpose": "read"}, follow=True)
    assert response.status_code == 200
    token = ServiceToken.objects.get(name="etl")
    shown = [str(m) for m in response.context["messages"]]
    raw = shown[0].rsplit(" ", 1)[-1]
    assert token.token_hash == hash_token(raw)
    page = staff_client.get(f"/admin/presets/servicetoken/{token.pk}/change/")
    assert raw.encode() not in page.content
