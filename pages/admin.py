"""Admin: chains, presets and selections are read-only here (they change only through the
services: the presets file, the on-call pages and the API); tokens are managed here; the access
history, alerts and notifications are shown, never changed. Token changes go through
``presets.service_tokens``, so each is recorded with the signed-in admin as its actor;
sign-in identities are linked and unlinked here through ``presets.access_history``, recorded
the same way."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from simple_history.admin import SimpleHistoryAdmin

from audit.models import Alert, Notification
from presets import service_tokens
from presets.access_history import current_actor, link_identity, unlink_identity
from presets.exceptions import ServiceError
from presets.models import UNCLAIMED_ISSUER, AccessChange, Chain, Preset, Selection, ServiceToken, SignInIdentity


class ReadOnlyAdminMixin:
    """Shown, never changed here: these rows change only through the services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnlyAdminMixin, SimpleHistoryAdmin):
    pass


@admin.register(Chain)
class ChainAdmin(ReadOnlyAdmin):
    list_display = ["name", "default_preset", "description"]


@admin.register(Preset)
class PresetAdmin(ReadOnlyAdmin):
    list_display = ["chain", "name", "retired_at", "source_hash"]
    list_filter = ["chain", "retired_at"]


@admin.register(Selection)
class SelectionAdmin(ReadOnlyAdmin):
    list_display = ["chain", "version", "preset", "action", "updated_by", "updated_at", "expires_at"]


class ServiceTokenForm(forms.ModelForm):
    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        refusal = service_tokens.expiry_refusal(expires_at, now=timezone.now())
        if refusal is not None:
            raise forms.ValidationError(refusal.field_message)
        return expires_at


@admin.register(ServiceToken)
class ServiceTokenAdmin(admin.ModelAdmin):
    form = ServiceTokenForm
    list_display = [
        "name",
        "purpose",
        "reports",
        "sole_evidence",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    readonly_fields = ["created_at", "last_used_at", "revoked_at"]
    fields = ["name", "purpose", "reports", "sole_evidence", "expires_at", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A token's name, purpose, flags and expiry are fixed once issued (make a new token
        # instead), and it is revoked with the action, which records who revoked it.
        return self.readonly_fields + (["name", "purpose", "reports", "sole_evidence", "expires_at"] if obj else [])

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the name stays attributable in the history

    def save_model(self, request: HttpRequest, obj: ServiceToken, form: Any, change: bool) -> None:
        if change:
            return  # nothing of an issued token is editable here
        issued = service_tokens.create_token(
            name=obj.name,
            purpose=obj.purpose,
            reports=obj.reports,
            sole_evidence=obj.sole_evidence,
            expires_at=obj.expires_at,
            actor=current_actor(),
        )
        obj.pk, obj.token_hash, obj.created_at = issued.token.pk, issued.token.token_hash, issued.token.created_at
        messages.warning(request, f"Token {obj.name!r} created. Copy it now, it is not shown again: {issued.raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        actor = current_actor()
        count = 0
        for name in queryset.filter(revoked_at__isnull=True).values_list("name", flat=True):
            try:
                service_tokens.revoke_token(name=name, actor=actor)
            except ServiceError:
                continue  # revoked meanwhile, by someone else
            count += 1
        messages.success(request, f"revoked {count} token(s)")


@admin.register(AccessChange)
class AccessChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The access history, as on /access/: append-only, so shown and never changed."""

    list_display = ["time", "actor", "action", "subject", "details"]
    list_filter = ["action"]
    search_fields = ["actor", "subject"]


class SignInIdentityForm(forms.ModelForm):
    class Meta:
        model = SignInIdentity
        fields = ["user", "issuer", "subject"]
        help_texts = {
            "user": "The account single sign-on is to sign this person in to.",
            "issuer": (
                "The provider's issuer, as OIDC_ISSUER names it (e.g. https://sso.example.com/realms/acme); "
                "for the trusted proxy, proxy: and its user header in lower case (proxy:x-forwarded-user). "
                "A refused sign-in names it on the person's sign-in page and in the log."
            ),
            "subject": (
                "The provider's subject (sub) for the person; for the trusted proxy, the name it sends. "
                "A refused sign-in names it too."
            ),
        }

    def clean_issuer(self) -> str:
        issuer = SignInIdentity.issuer_key(self.cleaned_data.get("issuer") or "")
        if not issuer or issuer == UNCLAIMED_ISSUER:
            raise forms.ValidationError("Give the provider's issuer (the sign-in page of a refused person shows it).")
        return issuer

    def clean_subject(self) -> str:
        subject = (self.cleaned_data.get("subject") or "").strip()
        if not subject:
            raise forms.ValidationError("Give the person's subject at the provider.")
        return subject


@admin.register(SignInIdentity)
class SignInIdentityAdmin(admin.ModelAdmin):
    """Who single sign-on signs in to which account. Linking is how an existing account (one
    made here, or one another identity held) is handed to a person at the provider; the
    ``unclaimed`` rows mark accounts made by single sign-on before identities were kept (their
    next sign-in binds them). A link is never edited: unlink it (delete) and link again."""

    form = SignInIdentityForm
    list_display = ["user", "issuer", "subject", "created_at"]
    list_filter = ["issuer"]
    search_fields = ["user__username", "issuer", "subject"]
    autocomplete_fields = ["user"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: SignInIdentity, form: Any, change: bool) -> None:
        linked = link_identity(
            user=obj.user, issuer=obj.issuer, subject=obj.subject, actor=current_actor(), how="admin"
        )
        obj.pk, obj.created_at = linked.pk, linked.created_at
        messages.warning(
            request,
            f"From {obj.user.get_username()}'s next sign-in through {obj.issuer}, the provider's groups decide "
            "their roles, staff and superuser status here.",
        )

    def delete_model(self, request: HttpRequest, obj: SignInIdentity) -> None:
        unlink_identity(identity=obj, actor=current_actor())

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        actor = current_actor()
        with transaction.atomic():
            for identity in queryset.select_related("user"):
                unlink_identity(identity=identity, actor=actor)


# Alerts and notifications: read-only here (the sweeps and changes make them).
class DeliveriesColumn:
    """The "delivery" column of a row delivered to notifiers: each notifier's state."""

    @admin.display(description="delivery")
    def delivery(self, obj: Alert | Notification) -> str:
        return ", ".join(f"{name}: {d['state']}" for name, d in obj.deliveries.items())


@admin.register(Alert)
class AlertAdmin(DeliveriesColumn, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "kind", "chain", "version", "resolved_at", "delivery"]
    list_filter = ["kind", "chain", ("resolved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["chain"]
    search_fields = ["message"]


@admin.register(Notification)
class NotificationAdmin(DeliveriesColumn, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "kind", "chain", "version", "delivery"]
    list_filter = ["kind", "chain"]
    list_select_related = ["chain"]
