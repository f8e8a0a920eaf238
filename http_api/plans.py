"""The API of planned pins (``presets.plans``): list, plan, read, change, cancel and start a
suspended plan anyway. Views only translate HTTP to the plans' operations and back; their
refusals (``InvalidInput``, ``NotFound``) are rendered by ``http_api.errors``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from http_api.authentication import CanWrite
from http_api.environments import environment_of
from http_api.fields import AwareDateTimeField, ReasonField, StrictCharField, StrictIntegerField
from http_api.schema import WRITE_ERRORS, errors
from presets import plans, services
from presets.models import PRESET_NAME_MAX, Chain, PlanEventKind, PlannedPin, PlanState
from presets.roles import actor_of

READ_ERRORS = errors(400, 401, 403, 404, 503)
CHANGE_FIELDS = ("preset", "starts_at", "ends_at")


@extend_schema_serializer(component_name="PlanEvent")
class PlanEventSerializer(serializers.Serializer):
    """One step of a plan's life."""

    kind = serializers.ChoiceField(choices=PlanEventKind.choices)
    actor = serializers.CharField(help_text="who: a person, token:NAME, cli:USER or system:schedule")
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()
    details = serializers.DictField(
        help_text="planned and changed: the window (changed: and the one before); started and ended: the version"
    )


@extend_schema_serializer(component_name="Plan")
class PlanSerializer(serializers.Serializer):
    """A planned pin: a reviewed preset for a chain from ``starts_at`` to ``ends_at``."""

    id = serializers.IntegerField()
    chain = serializers.CharField()
    preset = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField(help_text="its pin expires then, as any pin")
    reason = serializers.CharField()
    planned_by = serializers.CharField()
    planned_at = serializers.DateTimeField()
    state = serializers.ChoiceField(choices=PlanState.choices)
    state_reason = serializers.CharField(
        allow_blank=True, help_text="why it is suspended, or how it started, ended, was cancelled or missed"
    )
    based_on_version = serializers.IntegerField(
        help_text="the chain's version when planned or last changed: a change by a person after it suspends the start"
    )
    started_version = serializers.IntegerField(allow_null=True, help_text="the version its start made")
    summary = serializers.CharField(help_text="the plan in one line (UTC)")
    events = PlanEventSerializer(
        many=True,
        required=False,
        help_text="its history, oldest first: in a chain's plans, one plan and every change's answer; "
        "not in GET /api/v1/plans",
    )


def entry_response(plan: PlannedPin, status: int = 200) -> Response:
    return Response(plans.plan_entry(plan, events=True), status=status, headers={"Cache-Control": "no-cache"})


def known_chain(name: str, environment: str) -> None:
    """A 404 for an unknown chain, as every chain URL answers (a chain without plans has an
    empty list)."""
    if not Chain.objects.filter(name=name, environment=environment).exists():
        raise services.unknown_chain(name, environment)


class PlanListView(APIView):
    """Every plan still holding its time, of every chain."""

    OutputSerializer = PlanSerializer

    @extend_schema(
        operation_id="plans_list",
        description="Every plan still holding its time (planned, suspended, started), soonest first.",
        responses={200: inline_serializer("PlanList", {"plans": OutputSerializer(many=True)}), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        entries = [plans.plan_entry(plan) for plan in plans.holding_plans(environment=environment_of(request))]
        return Response({"plans": entries}, headers={"Cache-Control": "no-cache"})


class ChainPlansView(APIView):
    """A chain's plans: read its recent ones, or plan one (a write-scope token or the on-call role)."""

    permission_classes = [CanWrite]
    OutputSerializer = PlanSerializer

    class InputSerializer(serializers.Serializer):
        preset = StrictCharField(max_length=PRESET_NAME_MAX, help_text="a reviewed preset, not the chain's default")
        starts_at = AwareDateTimeField(help_text="RFC 3339 with a time zone, in the future")
        ends_at = AwareDateTimeField(help_text="after the start, at most PIN_MAX_MINUTES after it")
        reason = ReasonField()

    @extend_schema(
        operation_id="chains_plans_list",
        description="The chain's recent plans, the latest start first, each with its history.",
        responses={
            200: inline_serializer("ChainPlanList", {"plans": OutputSerializer(many=True)}),
            **READ_ERRORS,
        },
    )
    def get(self, request: Request, name: str) -> Response:
        environment = environment_of(request, name)
        known_chain(name, environment)
        entries = [
            plans.plan_entry(plan, events=True) for plan in plans.recent_plans(chain=name, environment=environment)
        ]
        return Response({"plans": entries}, headers={"Cache-Control": "no-cache"})

    @extend_schema(
        operation_id="chains_plans_create",
        description="Plan a pin of a reviewed preset from starts_at to ends_at; refused when it overlaps "
        "another plan of the chain still holding its time (named in the error's details.plan).",
        request=InputSerializer,
        responses={201: OutputSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, name: str) -> Response:
        data = _valid(self.InputSerializer, request)
        plan = plans.plan_pin(
            chain=name,
            environment=environment_of(request, name),
            preset=data["preset"],
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
            actor=actor_of(request.user),
            reason=data["reason"],
        )
        return entry_response(plan, status=201)


class ChainPlanView(APIView):
    """One plan: read it, or change a plan not started yet."""

    permission_classes = [CanWrite]
    OutputSerializer = PlanSerializer

    class InputSerializer(serializers.Serializer):
        preset = StrictCharField(required=False, max_length=PRESET_NAME_MAX)
        starts_at = AwareDateTimeField(required=False)
        ends_at = AwareDateTimeField(required=False)
        # Required, whatever the schema's PATCH body says (drf-spectacular marks every field of
        # a PATCH optional).
        reason = ReasonField(help_text="why (required)")

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            # Unknown fields are ignored, as on every endpoint: a change that names none of its
            # fields (a misspelt "start_at") would otherwise be recorded as changing nothing.
            if not any(field in attrs for field in CHANGE_FIELDS):
                raise serializers.ValidationError("send what to change: preset, starts_at or ends_at (or several)")
            return attrs

    @extend_schema(operation_id="chains_plans_read", responses={200: OutputSerializer, **READ_ERRORS})
    def get(self, request: Request, name: str, plan: int) -> Response:
        return entry_response(plans.get_plan(chain=name, environment=environment_of(request, name), plan=plan))

    @extend_schema(
        operation_id="chains_plans_change",
        description="Change a plan not started yet: it is checked again as a new plan, against the chain "
        "as it is now; a suspended plan changed is planned again.",
        request=InputSerializer,
        responses={200: OutputSerializer, **WRITE_ERRORS},
    )
    def patch(self, request: Request, name: str, plan: int) -> Response:
        data = _valid(self.InputSerializer, request)
        changed = plans.change_plan(
            chain=name,
            environment=environment_of(request, name),
            plan=plan,
            actor=actor_of(request.user),
            reason=data["reason"],
            preset=data.get("preset"),
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
        )
        return entry_response(changed)


class ReasonInput(serializers.Serializer):
    reason = ReasonField()


class PlanCancelView(APIView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="chains_plans_cancel",
        description="Cancel a plan not started yet (a started plan is a live pin: revert the chain instead).",
        request=ReasonInput,
        responses={200: PlanSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, name: str, plan: int) -> Response:
        data = _valid(ReasonInput, request)
        return entry_response(
            plans.cancel_plan(
                chain=name,
                environment=environment_of(request, name),
                plan=plan,
                actor=actor_of(request.user),
                reason=data["reason"],
            )
        )


class StartInput(ReasonInput):
    expected_version = StrictIntegerField(
        required=False,
        min_value=0,
        help_text="the chain's version you saw the plan would replace: 409 if it changed since",
    )


class PlanStartView(APIView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="chains_plans_start",
        description="Start a suspended plan anyway, until its end: its pin replaces what the chain serves.",
        request=StartInput,
        responses={200: PlanSerializer, **WRITE_ERRORS},
    )
    def post(self, request: Request, name: str, plan: int) -> Response:
        data = _valid(StartInput, request)
        started = plans.start_plan_anyway(
            chain=name,
            environment=environment_of(request, name),
            plan=plan,
            actor=actor_of(request.user),
            reason=data["reason"],
            expected_version=data.get("expected_version"),
        )
        return entry_response(started)


def _valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
