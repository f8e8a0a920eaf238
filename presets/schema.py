"""OpenAPI schema generation (drf-spectacular) for the project's own conventions."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema


class ViewSchema(AutoSchema):
    """Names nested serializers after their view: every API view has an ``InputSerializer``
    and an ``OutputSerializer`` (STYLE.md), which would otherwise all become ``Input`` and
    ``Output`` and overwrite each other in the schema's components."""

    def get_serializer_name(self, serializer: Any, direction: str) -> str:
        outer, _, inner = type(serializer).__qualname__.rpartition(".")
        if outer and "<" not in outer:
            return outer.removesuffix("View") + inner
        return super().get_serializer_name(serializer, direction)


class ServiceTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` for service tokens (manage.py create_token)."""

    target_class = "presets.authentication.ServiceTokenAuthentication"
    name = "serviceToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}
