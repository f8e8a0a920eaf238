"""Admin: alerts are read-only here (the sweeps raise and resolve them)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import Alert


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "chain", "version", "resolved_at", "delivery"]
    list_filter = ["kind", "chain", ("resolved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["chain"]
    search_fields = ["message"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="delivery")
    def delivery(self, obj: Alert) -> str:
        return ", ".join(f"{name}: {d['state']}" for name, d in obj.deliveries.items())
