"""GET /api/v1/notifications: the change notifications and alert resolutions, and where each
was sent (docs/notifications.md). The view only translates HTTP to
``audit.notifications``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.models import NotificationKind
from audit.notifications import NotificationEntry, notification_entry, recent_notifications
from http_api.environments import environment_of
from http_api.fields import int_param
from http_api.schema import errors, serializer_for
from presets.exceptions import InvalidInput
from presets.roles import can_see_delivery_errors

LIMIT_DEFAULT, LIMIT_MAX = 100, 500


class NotificationsView(APIView):
    OutputSerializer = serializer_for(NotificationEntry, "NotificationSerializer")

    @extend_schema(
        operation_id="notifications_list",
        parameters=[
            OpenApiParameter("type", str, enum=list(NotificationKind.values), description="only this type"),
            OpenApiParameter("chain", str, description="only this chain's"),
            OpenApiParameter("limit", int, description=f"at most this many, 1..{LIMIT_MAX} (default {LIMIT_DEFAULT})"),
        ],
        responses={
            200: inline_serializer("NotificationList", {"notifications": OutputSerializer(many=True)}),
            **errors(400, 401, 403, 404, 503),
        },
    )
    def get(self, request: Request) -> Response:
        """Notifications, newest first, with their delivery state per notifier; why a
        delivery failed (``last_error``) only for a signed-in on-call engineer or staff,
        null for everyone else."""
        chain = request.query_params.get("chain")
        notifications = recent_notifications(
            limit=int_param(request, "limit", LIMIT_DEFAULT, 1, LIMIT_MAX),
            chain=chain,
            kind=_type(request),
            environment=environment_of(request, chain),
        )
        errors = can_see_delivery_errors(request.user)
        return Response(
            {"notifications": [notification_entry(n, errors=errors) for n in notifications]},
            headers={"Cache-Control": "no-cache"},
        )


def _type(request: Request) -> str | None:
    raw = request.query_params.get("type")
    if raw is None or raw == "":
        return None
    if raw not in NotificationKind.values:
        raise InvalidInput("type", f"{raw!r} is not a notification type: use {' or '.join(NotificationKind.values)}")
    return raw
