"""``GET /api/v1/access-history``: the access history (``presets.access_history``) as JSON,
newest first, for staff and on-call engineers signed in (service tokens are for chains, not
for reading who may do what)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from http_api.authentication import TokenPrincipal
from http_api.fields import int_param
from http_api.schema import errors
from presets.access_history import access_entry, access_page
from presets.roles import can_see_access


class CanSeeAccess(permissions.BasePermission):
    message = "the access history is for staff and on-call engineers, signed in (not service tokens)"

    def has_permission(self, request: Any, view: Any) -> bool:
        return not isinstance(request.user, TokenPrincipal) and can_see_access(request.user)


class AccessHistoryView(APIView):
    permission_classes = [CanSeeAccess]

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        at = serializers.DateTimeField()
        actor = serializers.CharField()
        action = serializers.CharField()
        subject = serializers.CharField(help_text="the token's name or the person's username")
        details = serializers.DictField()

    @extend_schema(
        operation_id="access_history",
        parameters=[
            OpenApiParameter("limit", int, description="entries per page, 1..500 (default 100)"),
            OpenApiParameter("older_than", int, description="only changes older than this entry id (the next page)"),
            OpenApiParameter("subject", str, description="only changes to this token or person"),
        ],
        responses={
            200: inline_serializer(
                "AccessHistory",
                {
                    "entries": OutputSerializer(many=True),
                    "older_than": serializers.IntegerField(allow_null=True, help_text="the next page's cursor"),
                },
            ),
            **errors(400, 401, 403, 503),
        },
    )
    def get(self, request: Request) -> Response:
        limit = int_param(request, "limit", 100, 1, 500)
        older_than = int_param(request, "older_than", None, 1, 2**63 - 1)
        subject = request.query_params.get("subject") or None
        page = access_page(subject=subject, older_than=older_than, size=limit)
        return Response({"entries": [access_entry(row) for row in page.rows], "older_than": page.older_than})
