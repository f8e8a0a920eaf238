"""The API of failover drills (``presets.drills``, ``audit.drills``): start or plan one on a
chain, list a chain's, read one's report, abort one. Views only translate HTTP to the drills'
operations and back; their refusals (``InvalidInput``, ``NotFound``, ``Conflict``) are rendered
by ``http_api.errors``. Each preset's last drill is in the chain's presets
(``http_api.chains.ChainPresetsView``), never in the signed chain document."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import drills as fleet_drills
from http_api.authentication import CanWrite
from http_api.environments import check_reads, environment_of
from http_api.fields import (
    AwareDateTimeField,
    ReasonField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    int_param,
)
from http_api.schema import WRITE_ERRORS, errors, serializer_for
from presets import drills as chain_drills
from presets import services
from presets.models import Chain, Drill
from presets.roles import actor_of
from presets.wire import DRILL_FAULTS

READ_ERRORS = errors(400, 401, 403, 404, 503)
LIST_DEFAULT, LIST_MAX = 20, 100
# Token names are slugs of at most 100 characters; no fleet names more services in one drill.
SERVICES_MAX = 100


DrillReportSerializer = serializer_for(fleet_drills.DrillReport)
DrillSummarySerializer = serializer_for(fleet_drills.DrillSummary)


def report_response(drill: Drill, status: int = 200) -> Response:
    headers = {"Cache-Control": "no-cache"}
    if status == 201:
        headers["Location"] = f"/api/v1/drills/{drill.pk}"
    return Response(fleet_drills.report(drill), status=status, headers=headers)


def chain_named(name: str, environment: str) -> Chain:
    """The chain, or the 404 every chain URL answers."""
    chain = Chain.objects.filter(name=name, environment=environment).first()
    if chain is None:
        raise services.unknown_chain(name, environment)
    return chain


class ChainDrillsView(APIView):
    """A chain's drills: list them, or start (or plan) one (a write-scope token or the on-call role)."""

    permission_classes = [CanWrite]
    OutputSerializer = DrillReportSerializer

    class InputSerializer(serializers.Serializer):
        # Shapes only: the values' rules (the hop, the share, the window...) are the drills'.
        hop = StrictIntegerField(help_text="the 1-based step of the live chain to fail; never the last")
        fault = serializers.ChoiceField(
            choices=DRILL_FAULTS,
            error_messages={
                "invalid_choice": f'"{{input}}" is not a fault a drill knows: use one of {", ".join(DRILL_FAULTS)}'
            },
        )
        share = StrictFloatField(help_text="percent of the requests reaching the hop, 0.1 to 25")
        services = serializers.ListField(
            child=StrictCharField(max_length=100),
            required=False,
            default=list,
            max_length=SERVICES_MAX,
            help_text="the drilled services by their tokens' names (manage.py list_tokens); empty: every service",
        )
        start = AwareDateTimeField(
            required=False,
            allow_null=True,
            default=None,
            help_text="RFC 3339 with a time zone, at most 90 days ahead: the drill is planned and the beat "
            "starts it then; null or left out: now",
        )
        minutes = StrictIntegerField(required=False, default=15, help_text="the window's length, 1 to 60")
        reason = ReasonField()
        repeat_days = StrictIntegerField(
            required=False,
            allow_null=True,
            default=None,
            help_text="plan the next drill this many days after each one's start (1 to 90); null: once",
        )
        max_failed = StrictIntegerField(
            required=False,
            default=0,
            help_text="stop condition: abort once more drilled requests than this failed for the caller "
            "or missed their deadline",
        )
        max_fallback_error_pct = StrictFloatField(
            required=False,
            default=chain_drills.DEFAULT_MAX_FALLBACK_ERROR_PCT,
            help_text=f"stop condition: abort once the fallback hop failed more than this percent of at least "
            f"{chain_drills.MIN_FALLBACK_ATTEMPTS} drilled attempts",
        )

    @extend_schema(
        operation_id="chains_drills_list",
        description="The chain's drills, the latest start first, each without the fleet's figures "
        "(its report: GET /api/v1/drills/{id}).",
        parameters=[
            OpenApiParameter("limit", int, description=f"drills listed, 1..{LIST_MAX} (default {LIST_DEFAULT})")
        ],
        responses={
            200: inline_serializer("ChainDrillList", {"drills": DrillSummarySerializer(many=True)}),
            **READ_ERRORS,
        },
    )
    def get(self, request: Request, name: str) -> Response:
        chain = chain_named(name, environment_of(request, name))
        limit = int_param(request, "limit", LIST_DEFAULT, 1, LIST_MAX)
        entries = [fleet_drills.summary(drill) for drill in chain_drills.of_chain(chain, limit=limit)]
        return Response({"drills": entries}, headers={"Cache-Control": "no-cache"})

    @extend_schema(
        operation_id="chains_drills_start",
        description="Start a failover drill on the chain now, or plan it for start: the chain's document "
        "carries it while it runs (its start and end each a new version). Refused (409) while the chain is "
        "pinned, a provider alert is open on it, or another drill runs or is planned in the window (named "
        "in the error's details.drill).",
        request=InputSerializer,
        responses={201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, name: str) -> Response:
        data = _valid(self.InputSerializer, request)
        drill = fleet_drills.start_drill(
            chain=name,
            environment=environment_of(request, name),
            actor=actor_of(request.user),
            reason=data["reason"],
            hop=data["hop"],
            fault=data["fault"],
            share=data["share"],
            services=data["services"],
            start=data["start"],
            minutes=data["minutes"],
            repeat_days=data["repeat_days"],
            max_failed=data["max_failed"],
            max_fallback_error_pct=data["max_fallback_error_pct"],
        )
        return report_response(drill, status=201)


class DrillView(APIView):
    """One drill's report: live while it runs, kept after."""

    OutputSerializer = DrillReportSerializer

    @extend_schema(
        operation_id="drills_read",
        description="The drill and what the fleet reported of it: totals, each instance, the instances "
        "that read it but did not take part or did not poll it, the minutes; verdict planned, running "
        "(also once ended, until judged), passed, failed or aborted, with its reasons.",
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, drill: int) -> Response:
        found = chain_drills.get(drill)
        check_reads(request, found.chain.environment, found.chain.name)
        return report_response(found)


class DrillAbortView(APIView):
    """Abort a running drill, or cancel a planned one (a write-scope token or the on-call role)."""

    permission_classes = [CanWrite]
    OutputSerializer = DrillReportSerializer

    class InputSerializer(serializers.Serializer):
        reason = ReasonField()

    @extend_schema(
        operation_id="drills_abort",
        description="Abort a running drill (the chain's document loses it at once, as a new version) or "
        "cancel a planned one; its verdict is aborted. Refused (400) once it has ended.",
        request=InputSerializer,
        responses={200: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, drill: int) -> Response:
        data = _valid(self.InputSerializer, request)
        found = chain_drills.get(drill)
        check_reads(request, found.chain.environment, found.chain.name)
        return report_response(
            chain_drills.abort_drill(drill=drill, actor=actor_of(request.user), reason=data["reason"])
        )


def _valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
