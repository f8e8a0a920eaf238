"""The API's OpenAPI schema (drf-spectacular): the chain document's serializers, generated from
its one definition (``presets.documents.ChainDocument``), the error shape, and the project's
naming conventions."""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Literal

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from presets.documents import ChainDocument, Help, Instant, MarkingDocument, StepDocument, Time

# The chain document has been "Document" in the API's schema from the start.
_NAMES = {"ChainDocument": "DocumentSerializer"}


@functools.cache
def serializer_for(typed_dict: Any, name: str | None = None) -> type[serializers.Serializer]:
    """A DRF serializer describing ``typed_dict`` field by field, for the schema only (the
    documents themselves are built by the domain, checked by mypy against the same TypedDict).
    ``Annotated[..., Help(...)]`` gives a field its description; a nested TypedDict becomes a
    nested serializer named after it (``StepDocument`` -> ``Step``)."""
    name = name or _NAMES.get(typed_dict.__name__, typed_dict.__name__.removesuffix("Document") + "Serializer")
    attrs: dict[str, Any] = {"__doc__": typed_dict.__doc__, "__module__": __name__}
    for field, hint in typing.get_type_hints(typed_dict, include_extras=True).items():
        attrs[field] = _field_for(hint)
    return type(name, (serializers.Serializer,), attrs)


def _field_for(
    hint: Any, *, allow_null: bool = False, help_text: str | None = None, required: bool = True
) -> serializers.Field:
    if typing.get_origin(hint) is typing.NotRequired:
        return _field_for(typing.get_args(hint)[0], allow_null=allow_null, help_text=help_text, required=False)
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        text = next((extra.text for extra in extras if isinstance(extra, Help)), None)
        return _field_for(hint, allow_null=allow_null, help_text=text, required=required)
    kwargs: dict[str, Any] = {"allow_null": allow_null, "required": required}
    if help_text:
        kwargs["help_text"] = help_text
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in args if a is not type(None)]
        return _field_for(inner, allow_null=True, help_text=help_text)
    if typing.get_origin(hint) is list:
        if typing.is_typeddict(args[0]):
            return serializer_for(args[0])(many=True, **kwargs)
        return serializers.ListField(child=_field_for(args[0]), **kwargs)
    if typing.get_origin(hint) is dict:
        return serializers.DictField(child=_field_for(args[1]), **kwargs)
    if typing.is_typeddict(hint):
        return serializer_for(hint)(**kwargs)
    if hint in (Instant, Time):
        return serializers.DateTimeField(**kwargs)
    if hint is Any:
        # A value the domain leaves open (a drill report's ``totals``): any JSON.
        return serializers.JSONField(**kwargs)
    if hint is str:
        return serializers.CharField(allow_blank=True, **kwargs)
    simple = {int: serializers.IntegerField, bool: serializers.BooleanField, float: serializers.FloatField}
    return simple[hint](**kwargs)


DocumentSerializer = serializer_for(ChainDocument)
StepSerializer = serializer_for(StepDocument)
MarkingSerializer = serializer_for(MarkingDocument)

ERROR_RESPONSE = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorBody",
            {"code": serializers.CharField(), "message": serializers.CharField(), "details": serializers.DictField()},
        )
    },
)


def errors(*statuses: int) -> dict[int, Any]:
    """The error responses an operation documents, each in the one error shape."""
    return dict.fromkeys(statuses, ERROR_RESPONSE)


WRITE_ERRORS = errors(400, 401, 403, 404, 409, 503)


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

    target_class = "http_api.authentication.ServiceTokenAuthentication"
    name = "serviceToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """``X-API-Key: <token>``, the other way OFREP providers send a service token."""

    target_class = "http_api.ofrep.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "X-API-Key"}
