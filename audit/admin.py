"""Admin: alerts and notifications are read-only here (the sweeps and changes make them)."""

from __future__ import annotations

from django.contrib import admin

from audit.models import Alert, Notification
from presets.admin import ReadOnlyAdminMixin


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "kind", "chain", "version", "resolved_at", "delivery"]
    list_filter = ["kind", "chain", ("resolved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["chain"]
    search_fields = ["message"]

    @admin.display(description="delivery")
    def delivery(self, obj: Alert) -> str:
        return ", ".join(f"{name}: {d['state']}" for name, d in obj.deliveries.items())


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "kind", "chain", "version", "delivery"]
    list_filter = ["kind", "chain"]
    list_select_related = ["chain"]

    @admin.display(description="delivery")
    def delivery(self, obj: Notification) -> str:
        return ", ".join(f"{name}: {d['state']}" for name, d in obj.deliveries.items())
