"""Fleet API: where each chain's live version has reached, and the SDK's usage reports."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import fleet
from audit import usage as usage_reports
from audit.fleet_recorder import recorder
from audit.models import MAX_CLIENT_LENGTH
from presets import services
from presets.api.fields import AwareDateTimeField, StrictCharField, StrictIntegerField
from presets.api.schema import errors, serializer_for


class FleetView(APIView):
    OutputSerializer = serializer_for(fleet.FleetSummary, "FleetOutputSerializer")

    @extend_schema(
        operation_id="fleet",
        responses={
            200: inline_serializer("Fleet", {"chains": OutputSerializer(many=True)}),
            **errors(401, 503),
        },
    )
    def get(self, request: Request) -> Response:
        recorder.flush()  # this process's latest reads count too
        chains = []
        for selection in services.revert_expired_and_read_all():
            status = fleet.chain_fleet(selection)
            chains.append(fleet.FleetSummary(**status, summary=fleet.fleet_summary(status)))
        return Response({"chains": chains})


# Versions are stored as PostgreSQL integers: a larger one is a client error, not a 503.
MAX_VERSION = 2**31 - 1


class AheadSerializer(serializers.Serializer):
    """What an instance holding a later document than the server's reports."""

    server_epoch = StrictIntegerField(min_value=0, max_value=2**63 - 1)
    server_version = StrictIntegerField(min_value=0, max_value=MAX_VERSION)
    since = AwareDateTimeField()


class UsageView(APIView):
    """An SDK instance's batched report: requests served per provider, documents refused."""

    class ProviderUsageSerializer(serializers.Serializer):
        requests = StrictIntegerField(min_value=0, max_value=10**12)
        last_served_at = AwareDateTimeField()

    class RejectionSerializer(serializers.Serializer):
        version = StrictIntegerField(min_value=0, max_value=MAX_VERSION)
        reason = StrictCharField(max_length=2000)
        at = AwareDateTimeField()

    class InputSerializer(serializers.Serializer):
        client = StrictCharField(max_length=MAX_CLIENT_LENGTH)
        ahead_of_server = AheadSerializer(required=False, allow_null=True)
        applied_version = StrictIntegerField(min_value=0, max_value=MAX_VERSION, required=False)
        providers = serializers.DictField(required=False, default=dict)
        rejected = serializers.ListField(required=False, default=list, max_length=100)

        def validate_providers(self, value: dict[str, Any]) -> dict[str, Any]:
            if len(value) > 50:
                raise serializers.ValidationError("at most 50 providers per report")
            parsed: dict[str, Any] = {}
            for name, usage in value.items():
                if "\x00" in name:
                    raise serializers.ValidationError("provider names cannot contain NUL characters")
                serializer = UsageView.ProviderUsageSerializer(data=usage)
                if not serializer.is_valid():
                    raise serializers.ValidationError({name: serializer.errors})
                parsed[str(name)[:100]] = serializer.validated_data
            return parsed

        def validate_rejected(self, value: list[Any]) -> list[Any]:
            serializer = UsageView.RejectionSerializer(data=value, many=True)
            serializer.is_valid(raise_exception=True)
            return serializer.validated_data

    @extend_schema(
        operation_id="chains_usage",
        request=InputSerializer,
        responses={
            202: inline_serializer("UsageAccepted", {"accepted": serializers.BooleanField()}),
            **errors(400, 401, 404, 503),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        chain = services.revert_expired_and_read(chain=name).chain
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data.get("ahead_of_server"):
            usage_reports.note_ahead(chain=chain, client=data["client"], **data["ahead_of_server"])
        usage_reports.record_usage(
            chain=chain, client=data["client"], providers=data["providers"], rejected=data["rejected"]
        )
        return Response({"accepted": True}, status=202)
