"""The OpenFeature Remote Evaluation Protocol (OFREP, docs/ofrep.md): any
OpenFeature SDK with the community's OFREP provider reads a chain as a flag whose key is the
chain's name and whose value is its signed chain document (an object), so services in any
language can follow a chain without this project's SDK.

- ``POST /ofrep/v1/evaluate/flags/{chain}``: one chain. ``POST /ofrep/v1/evaluate/flags``:
  every chain, with an ``ETag`` over every (epoch, version); ``If-None-Match`` -> 304.
- ``variant`` is the chain's version, ``reason`` ``STATIC`` (a chain serves every caller the
  same steps: the evaluation context is accepted and not used), ``metadata`` the version, the
  epoch, the preset and whether it is a pin.
- The same service tokens as the read API: ``Authorization: Bearer`` or ``X-API-Key``.
- Errors in OFREP's shape: ``{"key", "errorCode", "errorDetails"}`` (``FLAG_NOT_FOUND`` 404,
  ``PARSE_ERROR`` and ``INVALID_CONTEXT`` 400), ``{"errorDetails"}`` for 401, 403 and 503.
"""

from __future__ import annotations

import hashlib
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from http_api.authentication import CanRead, ServiceTokenAuthentication, TokenPrincipal
from http_api.environments import environment_of, readable_selections
from http_api.errors import exception_handler
from presets import services
from presets.documents import etag
from presets.exceptions import NotFound
from presets.models import Selection, ServiceToken, current_epoch, use_token
from presets.signing import sign
from read_path.http import TOKEN_REFUSED, matches

# A chain serves every caller the same steps: nothing is targeted.
REASON = "STATIC"


class ApiKeyAuthentication(ServiceTokenAuthentication):
    """A service token in ``X-API-Key``, as OFREP providers may send it."""

    def authenticate(self, request: Any) -> tuple[TokenPrincipal, ServiceToken] | None:
        raw = request.META.get("HTTP_X_API_KEY", "").strip()
        if not raw:
            return None
        token = use_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed(TOKEN_REFUSED)
        return TokenPrincipal(token), token


class CanReadByToken(CanRead):
    message = "OFREP is read with a service token: Authorization: Bearer <token> or X-API-Key: <token>"

    def has_permission(self, request: Any, view: Any) -> bool:
        return isinstance(request.user, TokenPrincipal)


def evaluation(selection: Selection, epoch: int) -> dict[str, Any]:
    """A chain as OFREP's successful evaluation."""
    return {
        "key": selection.chain.name,
        "reason": REASON,
        "variant": str(selection.version),
        "value": sign(selection.to_document(epoch=epoch)),
        "metadata": {
            "version": selection.version,
            "epoch": epoch,
            "preset": selection.preset.name,
            "pinned": selection.is_pinned,
        },
    }


def _context(request: Request, key: str | None) -> None:
    """The evaluation request's body: an object whose ``context``, if any, is an object."""
    body = request.data if request.body else {}
    if not isinstance(body, dict):
        raise OfrepError(400, "PARSE_ERROR", 'the body is a JSON object: {"context": {...}}', key)
    if not isinstance(body.get("context", {}), dict):
        raise OfrepError(400, "INVALID_CONTEXT", "context is a JSON object (its targetingKey and attributes)", key)


class OfrepError(Exception):
    def __init__(self, status: int, code: str, details: str, key: str | None) -> None:
        super().__init__(details)
        self.status, self.code, self.details, self.key = status, code, details, key


class OfrepView(APIView):
    authentication_classes = [ServiceTokenAuthentication, ApiKeyAuthentication]
    permission_classes = [CanReadByToken]

    def handle_exception(self, exc: Exception) -> Response:
        """Every refusal in OFREP's error shape, with the status the API would give it."""
        key = self.kwargs.get("key")
        if isinstance(exc, OfrepError):
            return Response(self._error(exc.code, exc.details, exc.key), status=exc.status)
        if isinstance(exc, NotFound):
            return Response(self._error("FLAG_NOT_FOUND", f"there is no chain named {key!r}", key), status=404)
        if isinstance(exc, exceptions.ParseError):
            return Response(self._error("PARSE_ERROR", str(exc.detail), key), status=400)
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            return Response({"errorDetails": str(exc.detail)}, status=401, headers={"WWW-Authenticate": "Bearer"})
        response = exception_handler(exc, {"view": self, "request": self.request})
        if response is None:
            return super().handle_exception(exc)
        message = response.data.get("error", {}).get("message", "") if isinstance(response.data, dict) else ""
        response.data = {"errorDetails": message or "refused"}
        return response

    @staticmethod
    def _error(code: str, details: str, key: str | None) -> dict[str, Any]:
        return {**({"key": key} if key is not None else {}), "errorCode": code, "errorDetails": details}


REQUEST = inline_serializer("OfrepEvaluationRequest", {"context": serializers.DictField(required=False)})
EVALUATION_FIELDS: dict[str, serializers.Field[Any, Any, Any, Any]] = {
    "key": serializers.CharField(),
    "reason": serializers.CharField(),
    "variant": serializers.CharField(help_text="the chain's version"),
    "value": serializers.DictField(help_text="the chain document, as GET /api/v1/chains/{name} answers it"),
    "metadata": serializers.DictField(),
}
EVALUATION = inline_serializer("OfrepEvaluation", EVALUATION_FIELDS)
ERROR = inline_serializer(
    "OfrepError",
    {
        "key": serializers.CharField(required=False, help_text="the flag's key (not in a bulk evaluation's error)"),
        "errorCode": serializers.CharField(),
        "errorDetails": serializers.CharField(),
    },
)
REFUSED = inline_serializer("OfrepRefused", {"errorDetails": serializers.CharField()})
REFUSALS = {401: REFUSED, 403: REFUSED, 503: REFUSED}


class EvaluateFlagView(OfrepView):
    @extend_schema(
        operation_id="ofrep_evaluate_flag",
        request=REQUEST,
        responses={200: EVALUATION, 400: ERROR, 404: ERROR, **REFUSALS},
        description="OFREP single flag evaluation: the chain named ``key`` as a flag whose value is its document.",
    )
    def post(self, request: Request, key: str) -> Response:
        _context(request, key)
        selection = services.revert_expired_and_read(chain=key, environment=environment_of(request, key))
        epoch = current_epoch()
        return Response(evaluation(selection, epoch), headers={"ETag": etag(epoch, selection.version)})


class EvaluateFlagsView(OfrepView):
    @extend_schema(
        operation_id="ofrep_evaluate_flags",
        request=REQUEST,
        parameters=[OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER)],
        responses={
            200: inline_serializer(
                "OfrepBulkEvaluation",
                {
                    "flags": inline_serializer("OfrepEvaluation", EVALUATION_FIELDS, many=True),
                    "metadata": serializers.DictField(),
                },
            ),
            304: None,
            400: ERROR,
            **REFUSALS,
        },
        description="OFREP bulk evaluation: every chain; 304 while no chain changed (ETag, If-None-Match).",
    )
    def post(self, request: Request) -> Response:
        _context(request, None)
        selections = sorted(readable_selections(request), key=lambda s: s.chain.name)
        epoch = current_epoch()
        versions = ",".join(f"{s.chain.name}={s.version}" for s in selections)
        tag = '"' + hashlib.sha256(f"{epoch}:{versions}".encode()).hexdigest()[:20] + '"'
        if matches(request.headers.get("If-None-Match"), tag):
            return Response(status=304, headers={"ETag": tag})
        body = {"flags": [evaluation(s, epoch) for s in selections], "metadata": {"epoch": epoch}}
        return Response(body, headers={"ETag": tag})
