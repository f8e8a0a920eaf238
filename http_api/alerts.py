"""GET /api/v1/alerts (DESIGN §7, §9). The view only translates HTTP to the alert services."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.alerts import alert_entry, recent_alerts
from audit.models import Alert, AlertKind, DeliveryState
from audit.notifications import LAST_ERROR_HELP, without_errors
from http_api.environments import environment_of
from http_api.fields import int_param
from http_api.schema import errors
from presets.exceptions import InvalidInput
from presets.roles import can_see_delivery_errors

LIMIT_DEFAULT, LIMIT_MAX = 100, 500


@extend_schema_serializer(component_name="AlertDelivery")
class DeliverySerializer(serializers.Serializer):
    """One notifier's delivery of an alert."""

    state = serializers.ChoiceField(choices=DeliveryState.choices)
    attempts = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True, allow_null=True, help_text=LAST_ERROR_HELP)
    delivered_at = serializers.DateTimeField(allow_null=True)


class AlertsView(APIView):
    @extend_schema_serializer(component_name="Alert")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        kind = serializers.ChoiceField(choices=AlertKind.choices)
        chain = serializers.CharField(help_text="the chain's name")
        environment = serializers.CharField(help_text="the chain's environment (ENVIRONMENTS)")
        version = serializers.IntegerField(
            help_text="stale_pin: the version where the pin started; pin_expired: the version "
            "the automatic revert created; provider alerts: the chain's version when raised"
        )
        preset = serializers.CharField(allow_null=True, help_text="the pinned preset")
        actor = serializers.CharField(allow_null=True, help_text="stale_pin: who pinned; pin_expired: system:expiry")
        reason = serializers.CharField(allow_null=True)
        pin_version = serializers.IntegerField(allow_null=True)
        pinned_by = serializers.CharField(allow_null=True)
        pinned_at = serializers.DateTimeField(allow_null=True)
        expires_at = serializers.DateTimeField(allow_null=True)
        age_seconds = serializers.IntegerField(
            allow_null=True, help_text="how long the pin had been live (stale_pin) or lasted (pin_expired)"
        )
        age = serializers.CharField(help_text="age_seconds, readable: 1 h 5 min")
        subject = serializers.CharField(
            allow_blank=True,
            help_text="provider_failing: the step (vendor_a/large); provider_credentials: the provider; "
            "spend: total or fallback; blank for pin alerts",
        )
        message = serializers.CharField()
        url = serializers.URLField(help_text="the chain's page in the web UI")
        created_at = serializers.DateTimeField()
        resolved_at = serializers.DateTimeField(
            allow_null=True, help_text="null while open; pin_expired is born resolved"
        )
        resolution = serializers.CharField(allow_blank=True, help_text="how it ended")
        deliveries = serializers.DictField(
            child=DeliverySerializer(),
            help_text="per notifier (log, webhook, slack, pagerduty, email): the delivery of its raising",
        )
        resolution_deliveries = serializers.DictField(
            child=DeliverySerializer(),
            allow_null=True,
            help_text="per notifier (webhook, slack, pagerduty, email): the delivery of its resolution; "
            "null while open, for an event (pin_expired), or when no notifier took it",
        )

    @extend_schema(
        operation_id="alerts_list",
        parameters=[
            OpenApiParameter("open", bool, description="true: only alerts still open"),
            OpenApiParameter("chain", str, description="only this chain's alerts"),
            OpenApiParameter("limit", int, description=f"at most this many, 1..{LIMIT_MAX} (default {LIMIT_DEFAULT})"),
        ],
        responses={
            200: inline_serializer("AlertList", {"alerts": OutputSerializer(many=True)}),
            **errors(400, 401, 403, 404, 503),
        },
    )
    def get(self, request: Request) -> Response:
        """Alerts, newest first; why a delivery failed (``last_error``) only for a signed-in
        on-call engineer or staff, null for everyone else."""
        chain = request.query_params.get("chain")
        alerts = recent_alerts(
            limit=_limit(request), open_only=_open(request), chain=chain, environment=environment_of(request, chain)
        )
        errors = can_see_delivery_errors(request.user)
        return Response(
            {"alerts": [_entry(alert, errors=errors) for alert in alerts]}, headers={"Cache-Control": "no-cache"}
        )


def _entry(alert: Alert, *, errors: bool) -> dict[str, Any]:
    entry = alert_entry(alert)
    if not errors:
        entry["deliveries"] = without_errors(entry["deliveries"])
        if entry["resolution_deliveries"] is not None:
            entry["resolution_deliveries"] = without_errors(entry["resolution_deliveries"])
    return entry


def _open(request: Request) -> bool:
    raw = request.query_params.get("open")
    if raw is None or raw == "":
        return False
    value = raw.strip().lower()
    if value in {"true", "1", "yes"}:
        return True
    if value in {"false", "0", "no"}:
        return False
    raise InvalidInput("open", f"{raw!r} is not a boolean: use true or false")


def _limit(request: Request) -> int:
    return int_param(request, "limit", LIMIT_DEFAULT, 1, LIMIT_MAX)
