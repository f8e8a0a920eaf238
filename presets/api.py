"""The HTTP API (DESIGN §7). Views only translate HTTP to service calls and back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.fleet import parse_identity, recorder
from controlplane.metrics import count_read
from presets import services
from presets.authentication import CanWrite, actor_of
from presets.exceptions import InvalidInput
from presets.models import Selection, current_epoch, etag

# --- strict input fields: a number sent as a string, or a list as a name, is a mistake -----


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with its time zone: "06:00" alone is a different instant in every
    office, so it is refused rather than read as UTC."""

    default_error_messages = {
        "naive": "needs a time zone, e.g. 2026-11-29T06:00:00Z",
    }

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


class ReasonField(StrictCharField):
    """Type check only: the rule (stripped, 1..500 characters) lives in the services."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)


def expiry_from(data: dict[str, Any]) -> services.Expiry:
    if "duration_minutes" in data and "expires_at" in data:
        raise InvalidInput("duration_minutes", "send either duration_minutes or expires_at, not both")
    if "duration_minutes" in data:
        return timedelta(minutes=data["duration_minutes"])
    return data.get("expires_at")


# --- the chain document -----------------------------------------------------------------


class StepSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    timeout_ms = serializers.IntegerField()


class MarkingSerializer(serializers.Serializer):
    degraded = serializers.BooleanField()
    note = serializers.CharField(allow_blank=True)


class DefaultChainSerializer(serializers.Serializer):
    preset = serializers.CharField()
    chain = StepSerializer(many=True)
    marking = MarkingSerializer()


class DocumentSerializer(serializers.Serializer):
    """The chain document: what the SDK applies. Field names are public contract."""

    name = serializers.CharField()
    epoch = serializers.IntegerField(help_text="raised after a database restore; clients order "
                                     "documents by (epoch, version)")
    version = serializers.IntegerField()
    preset = serializers.CharField()
    is_default = serializers.BooleanField()
    chain = StepSerializer(many=True)
    marking = MarkingSerializer()
    updated_by = serializers.CharField()
    reason = serializers.CharField()
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True, help_text="millisecond precision; "
                                           "the pin is not served from this instant on")
    default = DefaultChainSerializer(allow_null=True, help_text="what the chain falls back to "
                                     "at expires_at")


ERROR_RESPONSE = inline_serializer(
    "Error",
    {"error": inline_serializer("ErrorBody", {
        "code": serializers.CharField(), "message": serializers.CharField(),
        "details": serializers.DictField()})},
)
WRITE_ERRORS = {400: ERROR_RESPONSE, 401: ERROR_RESPONSE, 403: ERROR_RESPONSE,
                404: ERROR_RESPONSE, 409: ERROR_RESPONSE, 503: ERROR_RESPONSE}


def matches(if_none_match: str | None, wanted: str) -> bool:
    """Whether the client already holds the document with entity tag ``wanted`` (weak or
    strong, any in a list)."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == wanted or candidate == "*":
            return True
    return False


MAX_WAIT_S = 60


def wait_seconds(raw: str | None) -> float:
    """The long-poll ``wait`` parameter in seconds (0 when absent)."""
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        raise InvalidInput("wait", f"{raw!r} is not a number of seconds; use 0..{MAX_WAIT_S}") from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidInput("wait", f"must be 0..{MAX_WAIT_S} seconds, got {raw}")
    return wait


def document_response(selection: Selection, status: int = 200, *,
                      epoch: int | None = None) -> Response:
    document = selection.to_document(epoch=epoch)
    return Response(document, status=status, headers={
        "ETag": etag(document["epoch"], selection.version), "Cache-Control": "no-cache"})


# --- reads ------------------------------------------------------------------------------


class CountedReadView(APIView):
    """Chain reads answered by Django (sessions, no token, WSGI) count in /metrics too."""

    def finalize_response(self, request: Request, response: Response, *args: Any,
                          **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        count_read(response.status_code)
        return response


class ChainListView(CountedReadView):
    @extend_schema(operation_id="chains_list", responses={
        200: inline_serializer("ChainList", {"chains": DocumentSerializer(many=True)}),
        401: ERROR_RESPONSE, 503: ERROR_RESPONSE})
    def get(self, request: Request) -> Response:
        selections = services.live_selections()
        epoch = current_epoch()
        return Response({"chains": [s.to_document(epoch=epoch) for s in selections]},
                        headers={"Cache-Control": "no-cache"})


class ChainDetailView(CountedReadView):
    @extend_schema(
        operation_id="chains_read",
        parameters=[
            OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER),
            OpenApiParameter("wait", float, description="long poll: with If-None-Match, hold the "
                             "request up to this many seconds (0..60) until the version changes"),
        ],
        responses={200: DocumentSerializer, 304: None, 400: ERROR_RESPONSE, 401: ERROR_RESPONSE,
                   404: ERROR_RESPONSE, 503: ERROR_RESPONSE},
    )
    def get(self, request: Request, name: str) -> Response:
        # Long polls are held by the ASGI read front (presets/read_front.py); a request that
        # reaches Django (a session, or a WSGI deployment) is answered at once.
        wait_seconds(request.query_params.get("wait"))
        selection = services.live_selection(chain=name)
        identity = parse_identity(request.headers.get("X-Chain-Client"),
                                  request.headers.get("X-Chain-Applied-Version"))
        if identity is not None:
            recorder.seen(name, *identity)
            recorder.flush()
        epoch = current_epoch()
        tag = etag(epoch, selection.version)
        if matches(request.headers.get("If-None-Match"), tag):
            return Response(status=304, headers={"ETag": tag, "Cache-Control": "no-cache"})
        return document_response(selection, epoch=epoch)


class HistoryView(APIView):
    class OutputSerializer(serializers.Serializer):
        version = serializers.IntegerField()
        action = serializers.CharField()
        actor = serializers.CharField()
        reason = serializers.CharField()
        at = serializers.DateTimeField()
        preset = serializers.CharField()
        chain = StepSerializer(many=True)
        marking = MarkingSerializer()
        expires_at = serializers.DateTimeField(allow_null=True)
        previous_version = serializers.IntegerField(allow_null=True)
        previous_preset = serializers.CharField(allow_null=True)
        previous_chain = StepSerializer(many=True, allow_null=True)
        previous_expires_at = serializers.DateTimeField(allow_null=True)

    @extend_schema(
        operation_id="chains_history",
        parameters=[
            OpenApiParameter("limit", int, description="entries per page, 1..500 (default 100)"),
            OpenApiParameter("before", int, description="only versions below this one"),
        ],
        responses={200: inline_serializer("History", {"entries": OutputSerializer(many=True)}),
                   400: ERROR_RESPONSE, 401: ERROR_RESPONSE, 404: ERROR_RESPONSE,
                   503: ERROR_RESPONSE},
    )
    def get(self, request: Request, name: str) -> Response:
        services.live_selection(chain=name)  # 404 for an unknown chain; expiry applied
        limit = int_param(request, "limit", 100, 1, 500)
        before = int_param(request, "before", None, 1, None)
        from audit.history import history_entries

        return Response({"entries": history_entries(chain=name, limit=limit, before=before)})


def int_param(request: Request, name: str, default: int | None, low: int, high: int | None) -> int | None:
    """A whole-number query parameter within bounds (``default`` when absent)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(name, f"{raw!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"at least {low}"
        raise InvalidInput(name, f"must be {bounds}")
    return value


# --- changes ----------------------------------------------------------------------------


class WriteView(APIView):
    permission_classes = [CanWrite]

    def input(self, request: Request, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class SelectView(WriteView):
    class InputSerializer(serializers.Serializer):
        preset = StrictCharField(max_length=100)
        reason = ReasonField()
        duration_minutes = StrictIntegerField(required=False, min_value=1, max_value=10**9)
        expires_at = AwareDateTimeField(required=False)
        expected_version = StrictIntegerField(required=False, min_value=0)

    @extend_schema(operation_id="chains_select", request=InputSerializer,
                   responses={200: DocumentSerializer, **WRITE_ERRORS})
    def post(self, request: Request, name: str) -> Response:
        data = self.input(request, self.InputSerializer)
        selection = services.select_preset(
            chain=name, preset=data["preset"], actor=actor_of(request.user),
            reason=data["reason"], expires_at=expiry_from(data),
            expected_version=data.get("expected_version"),
        )
        return document_response(selection)


class RevertView(WriteView):
    class InputSerializer(serializers.Serializer):
        reason = ReasonField()
        expected_version = StrictIntegerField(required=False, min_value=0)

    @extend_schema(operation_id="chains_revert", request=InputSerializer,
                   responses={200: DocumentSerializer, **WRITE_ERRORS})
    def post(self, request: Request, name: str) -> Response:
        data = self.input(request, self.InputSerializer)
        selection = services.revert_to_default(
            chain=name, actor=actor_of(request.user), reason=data["reason"],
            expected_version=data.get("expected_version"),
        )
        return document_response(selection)


class ExtendView(WriteView):
    class InputSerializer(serializers.Serializer):
        reason = ReasonField()
        duration_minutes = StrictIntegerField(required=False, min_value=1, max_value=10**9)
        expires_at = AwareDateTimeField(required=False)
        expected_version = StrictIntegerField(required=False, min_value=0)

    @extend_schema(operation_id="chains_extend", request=InputSerializer,
                   responses={200: DocumentSerializer, **WRITE_ERRORS})
    def post(self, request: Request, name: str) -> Response:
        data = self.input(request, self.InputSerializer)
        selection = services.extend_pin(
            chain=name, actor=actor_of(request.user), reason=data["reason"],
            expires_at=expiry_from(data), expected_version=data.get("expected_version"),
        )
        return document_response(selection)


class RestoreView(WriteView):
    class InputSerializer(serializers.Serializer):
        reason = ReasonField()
        expected_version = StrictIntegerField(required=False, min_value=0)

    @extend_schema(operation_id="chains_restore", request=InputSerializer,
                   responses={200: DocumentSerializer, **WRITE_ERRORS})
    def post(self, request: Request, name: str, version: int) -> Response:
        data = self.input(request, self.InputSerializer)
        selection = services.restore(
            chain=name, version=version, actor=actor_of(request.user), reason=data["reason"],
            expected_version=data.get("expected_version"),
        )
        return document_response(selection)

