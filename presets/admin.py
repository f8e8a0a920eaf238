"""Admin: chains, presets and selections are read-only here (they change only through the
services: the presets file, the on-call pages and the API); tokens are managed here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from simple_history.admin import SimpleHistoryAdmin

from presets.models import Chain, Preset, Selection, ServiceToken


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


@admin.register(ServiceToken)
class ServiceTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "scope", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["created_at", "last_used_at"]
    fields = ["name", "scope", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A token's name and scope are fixed once issued: make a new token instead.
        return self.readonly_fields + (["name", "scope"] if obj else [])

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the name stays attributable in the history

    def save_model(self, request: HttpRequest, obj: ServiceToken, form: Any, change: bool) -> None:
        if not change:
            raw = obj.issue()
            messages.warning(request, f"Token {obj.name!r} created. Copy it now, it is not shown again: {raw}")
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"revoked {count} token(s)")
