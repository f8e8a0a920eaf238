"""The API's OpenAPI schema (drf-spectacular): the chain document's serializers, generated from
its one definition (``presets.documents.ChainDocument``), the error shape, and the project's
naming conventions."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from presets.documents import FIELD_HELP, ChainDocument, Instant, MarkingDocument, StepDocument


@functools.cache
def serializer_for(typed_dict: Any, name: str) -> type[serializers.Serializer]:
    """A DRF serializer describing ``typed_dict`` field by field (for the schema only: the
    documents themselves are built by the domain). Nested TypedDicts become nested
    serializers named after them."""
    attrs: dict[str, Any] = {"__doc__": typed_dict.__doc__, "__module__": __name__}
    for field, hint in typing.get_type_hints(typed_dict).items():
        attrs[field] = _field_for(hint, FIELD_HELP.get(field))
    return type(name, (serializers.Serializer,), attrs)


_NAMES = {
    "StepDocument": "StepSerializer",
    "MarkingDocument": "MarkingSerializer",
    "DefaultChainDocument": "DefaultChainSerializer",
    "ChainDocument": "DocumentSerializer",
}


def _field_for(hint: Any, help_text: str | None, *, allow_null: bool = False) -> serializers.Field:
    kwargs: dict[str, Any] = {"allow_null": allow_null}
    if help_text:
        kwargs["help_text"] = help_text
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in args if a is not type(None)]
        return _field_for(inner, help_text, allow_null=True)
    if typing.get_origin(hint) is list:
        return serializer_for(args[0], _NAMES[args[0].__name__])(many=True, **kwargs)
    if typing.is_typeddict(hint):
        return serializer_for(hint, _NAMES[hint.__name__])(**kwargs)
    if hint is Instant:
        return serializers.DateTimeField(**kwargs)
    simple = {str: serializers.CharField, int: serializers.IntegerField, bool: serializers.BooleanField}
    if hint is str:
        kwargs["allow_blank"] = True
    return simple[hint](**kwargs)


DocumentSerializer = serializer_for(ChainDocument, "DocumentSerializer")
StepSerializer = serializer_for(StepDocument, "StepSerializer")
MarkingSerializer = serializer_for(MarkingDocument, "MarkingSerializer")

ERROR_RESPONSE = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorBody",
            {"code": serializers.CharField(), "message": serializers.CharField(), "details": serializers.DictField()},
        )
    },
)
WRITE_ERRORS = {
    400: ERROR_RESPONSE,
    401: ERROR_RESPONSE,
    403: ERROR_RESPONSE,
    404: ERROR_RESPONSE,
    409: ERROR_RESPONSE,
    503: ERROR_RESPONSE,
}


class ViewSchema(AutoSchema):
    """Names nested serializers after their view: every API view has an ``InputSerializer``
    and an ``OutputSerializer`` (STYLE.md), which would otherwise all become ``Input`` and
    ``Output`` and overwrite each other in the schema's components."""

    def get_serializer_name(self, serializer: Any, direction: Literal["request", "response"]) -> str:
        outer, _, inner = type(serializer).__qualname__.rpartition(".")
        if outer and "<" not in outer:
            return outer.removesuffix("View") + inner
        return super().get_serializer_name(serializer, direction)


class ServiceTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` for service tokens (manage.py create_token)."""

    target_class = "presets.api.authentication.ServiceTokenAuthentication"
    name = "serviceToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}
