"""Fleet API: where each chain's live version has reached, and the SDK's usage reports."""

from __future__ import annotations

import logging
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import drills, fleet, fleet_seen, provider_alerts, provider_health, spend
from audit import usage as usage_reports
from audit.fleet_recorder import MAX_VERSION_LENGTH, recorder
from audit.models import MAX_CLIENT_LENGTH
from http_api.authentication import TokenPrincipal
from http_api.environments import environment_of, readable_selections
from http_api.fields import AwareDateTimeField, StrictCharField, StrictIntegerField, int_param
from http_api.schema import errors, serializer_for
from presets import services
from presets.exceptions import InvalidInput
from presets.wire import (
    CHAIN_MAX_STEPS,
    LATENCY_BOUNDS_MS,
    OUTCOME_CLASSES,
    REPORT_MAX_PROVIDERS,
    REPORT_MAX_STEPS,
    TOKEN_FIELDS,
)
from read_path.http import error_body

log = logging.getLogger(__name__)

BUCKETS = len(LATENCY_BOUNDS_MS) + 1


class FleetView(APIView):
    OutputSerializer = serializer_for(fleet.FleetSummary, "FleetOutputSerializer")

    @extend_schema(
        operation_id="fleet",
        parameters=[
            OpenApiParameter(
                "detail",
                int,
                description=(
                    f"live instances listed in each chain's detail, 0..{fleet.DETAIL_MAX} (default "
                    f"{fleet.DETAIL_SHOWN}); the rest from GET /api/v1/chains/{{name}}/instances"
                ),
            ),
        ],
        responses={
            200: inline_serializer("Fleet", {"chains": OutputSerializer(many=True)}),
            **errors(400, 401, 503),
        },
    )
    def get(self, request: Request) -> Response:
        detail = int_param(request, "detail", fleet.DETAIL_SHOWN, 0, fleet.DETAIL_MAX)
        recorder.flush()  # this process's latest reads count too
        statuses = fleet.fleet_statuses(readable_selections(request), detail=detail)
        chains = [fleet.FleetSummary(**status, summary=fleet.fleet_summary(status)) for status in statuses.values()]
        return Response({"chains": chains})


class ChainInstancesView(APIView):
    """A chain's live service instances (seen in the last FLEET_INSTANCE_TTL_MINUTES) by
    client, a page at a time: to continue, send the page's after (keyset paging)."""

    OutputSerializer = serializer_for(fleet.InstanceStatus)

    @extend_schema(
        operation_id="chains_instances",
        parameters=[
            OpenApiParameter(
                "limit", int, description=f"instances per page, 1..{fleet.INSTANCES_PAGE_MAX} (default 100)"
            ),
            OpenApiParameter(
                "after",
                str,
                description=(
                    "only instances whose client sorts after this one: the previous page's after "
                    "(or the fleet's detail_after)"
                ),
            ),
        ],
        responses={
            200: inline_serializer(
                "ChainInstances",
                {
                    "chain": serializers.CharField(),
                    "version": serializers.IntegerField(help_text="the chain's live version"),
                    "instances": OutputSerializer(
                        many=True, help_text="live instances (seen in FLEET_INSTANCE_TTL_MINUTES), by client"
                    ),
                    "after": serializers.CharField(
                        allow_null=True, help_text="the next page's after; null on the last page"
                    ),
                },
            ),
            **errors(400, 401, 404, 503),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        # 404 for an unknown chain
        selection = services.revert_expired_and_read(chain=name, environment=environment_of(request, name))
        limit = int_param(request, "limit", 100, 1, fleet.INSTANCES_PAGE_MAX)
        after = request.query_params.get("after", "")
        if len(after) > MAX_CLIENT_LENGTH or not after.isprintable():
            raise InvalidInput(
                "after", f"must be an instance's client as listed: printable, at most {MAX_CLIENT_LENGTH} characters"
            )
        recorder.flush()  # this process's latest reads count too
        page = fleet.instances_page(selection.chain, after=after, size=limit)
        return Response(
            {
                "chain": selection.chain.name,
                "version": selection.version,
                "instances": page.instances,
                "after": page.after,
            }
        )


# Versions are stored as PostgreSQL integers: a larger one is a client error, not a 503.
MAX_VERSION = 2**31 - 1


class AheadSerializer(serializers.Serializer):
    """What an instance holding a later document than the server's reports."""

    server_epoch = StrictIntegerField(min_value=0, max_value=2**63 - 1)
    server_version = StrictIntegerField(min_value=0, max_value=MAX_VERSION)
    since = AwareDateTimeField()


class HealthStepSerializer(serializers.Serializer):
    """One step's attempts since the instance's last accepted report."""

    provider = StrictCharField(max_length=100)
    model = StrictCharField(max_length=100)
    outcomes = serializers.DictField(child=StrictIntegerField(min_value=0, max_value=10**12))
    latency_ms = serializers.ListField(
        child=StrictIntegerField(min_value=0, max_value=10**12),
        min_length=len(LATENCY_BOUNDS_MS) + 1,
        max_length=len(LATENCY_BOUNDS_MS) + 1,
    )
    # Streamed attempts' time to their first chunk, in the latency buckets; an SDK sends it
    # only for a step that streamed (absent: nothing streamed, or an SDK without streams).
    first_chunk_ms = serializers.ListField(
        child=StrictIntegerField(min_value=0, max_value=10**12),
        min_length=len(LATENCY_BOUNDS_MS) + 1,
        max_length=len(LATENCY_BOUNDS_MS) + 1,
        required=False,
        help_text="streamed attempts by time to their first chunk, bucketed as latency_ms; absent when none",
    )

    # The tokens the step's attempts said they used (presets.wire.TOKEN_FIELDS); absent from a
    # step none of whose attempts said any, or from an SDK that does not count them.
    input_tokens = StrictIntegerField(min_value=0, max_value=10**15, required=False, default=0)
    output_tokens = StrictIntegerField(min_value=0, max_value=10**15, required=False, default=0)
    served_with_tokens = StrictIntegerField(
        min_value=0,
        max_value=10**12,
        required=False,
        default=0,
        help_text="served attempts whose input and output tokens are both in the sums; the step's other served "
        "attempts count as unknown, never as zero",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["served_with_tokens"] > attrs["outcomes"].get("served", 0):
            raise serializers.ValidationError(
                {"served_with_tokens": "more than the step's served attempts (outcomes.served)"}
            )
        # Spend is worked out from these sums: no attempt uses more than a context window's worth.
        most = MAX_TOKENS_PER_ATTEMPT * sum(attrs["outcomes"].values())
        for name in ("input_tokens", "output_tokens"):
            if attrs[name] > most:
                raise serializers.ValidationError(
                    {name: f"more than {MAX_TOKENS_PER_ATTEMPT:,} tokens an attempt (over the step's outcomes)"}
                )
        return attrs

    def validate_outcomes(self, value: dict[str, int]) -> dict[str, int]:
        # Classes this control plane does not know are dropped and counted (a newer SDK may
        # have more); a step naming more than this is no SDK's.
        if len(value) > MAX_OUTCOME_CLASSES:
            raise serializers.ValidationError(
                f"at most {MAX_OUTCOME_CLASSES} outcome classes per step; known: {', '.join(OUTCOME_CLASSES)}"
            )
        return value


MAX_OUTCOME_CLASSES = 50
# More tokens than any model's context window holds, for one attempt's input or output.
MAX_TOKENS_PER_ATTEMPT = 10_000_000


class HealthSerializer(serializers.Serializer):
    """Provider health (chainclient 0.3.0): attempts by outcome class, served latency and
    (streamed attempts) time to first chunk per step, circuit-breaker openings per provider."""

    latency_bounds_ms = serializers.ListField(child=StrictIntegerField())
    steps = serializers.ListField(child=HealthStepSerializer(), max_length=REPORT_MAX_STEPS)
    breaker_openings = serializers.DictField(
        child=StrictIntegerField(min_value=0, max_value=10**12), required=False, default=dict
    )

    def validate_latency_bounds_ms(self, value: list[int]) -> list[int]:
        if tuple(value) != LATENCY_BOUNDS_MS:
            raise serializers.ValidationError(
                f"must be {list(LATENCY_BOUNDS_MS)}, the histogram this control plane merges"
            )
        return value

    def validate_breaker_openings(self, value: dict[str, int]) -> dict[str, int]:
        if len(value) > REPORT_MAX_PROVIDERS:
            raise serializers.ValidationError(f"at most {REPORT_MAX_PROVIDERS} providers per report")
        if any(len(name) > 100 or "\x00" in name for name in value):
            raise serializers.ValidationError("provider names are at most 100 characters, without NUL")
        return value


class DrillLatencySerializer(serializers.Serializer):
    drilled = serializers.ListField(child=StrictIntegerField(min_value=0, max_value=10**12), max_length=BUCKETS)
    other = serializers.ListField(child=StrictIntegerField(min_value=0, max_value=10**12), max_length=BUCKETS)


class DrillSectionSerializer(serializers.Serializer):
    """What the instance routed during a failover drill it takes part in (chainclient 0.9.0),
    since its last report: ``audit.drills`` adds it to the drill's report."""

    id = StrictIntegerField(min_value=1, max_value=2**31 - 1)
    requests = StrictIntegerField(min_value=0, max_value=10**12)
    drilled = StrictIntegerField(min_value=0, max_value=10**12)
    ended_on = serializers.DictField(
        child=StrictIntegerField(min_value=0, max_value=10**12), required=False, default=dict
    )
    failed = StrictIntegerField(min_value=0, max_value=10**12)
    deadline = StrictIntegerField(min_value=0, max_value=10**12, required=False, default=0)
    refusals = StrictIntegerField(min_value=0, max_value=10**12, required=False, default=0)
    fallback_attempts = StrictIntegerField(min_value=0, max_value=10**12, required=False, default=0)
    fallback_failures = StrictIntegerField(min_value=0, max_value=10**12, required=False, default=0)
    latency_ms = DrillLatencySerializer(required=False)

    def validate_ended_on(self, value: dict[str, int]) -> dict[str, int]:
        steps = {str(n) for n in range(1, CHAIN_MAX_STEPS + 1)}
        if not set(value) <= steps:
            raise serializers.ValidationError(f"keys are the 1-based steps that served: {', '.join(sorted(steps))}")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["drilled"] > attrs["requests"] or attrs["failed"] > attrs["drilled"]:
            raise serializers.ValidationError("drilled is at most requests, and failed at most drilled")
        return attrs


class SentWithAToken(permissions.BasePermission):
    """Usage reports are a service's evidence: a service token sends them, never a session."""

    message = (
        "usage reports need a service token (send 'Authorization: Bearer <token>'); a signed-in session cannot send one"
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.user, TokenPrincipal)


class UsageView(APIView):
    """An SDK instance's batched report: requests served per provider, documents refused,
    provider health. Evidence within limits (``audit.usage``): a service token only, at most
    USAGE_REPORTS_PER_*_PER_MINUTE (429 with Retry-After past one), what the registry and the
    chain do not know dropped and counted in the answer."""

    permission_classes = [SentWithAToken]

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
        health = HealthSerializer(required=False)
        drill = DrillSectionSerializer(required=False, allow_null=True)

        def validate_providers(self, value: dict[str, Any]) -> dict[str, Any]:
            if len(value) > REPORT_MAX_PROVIDERS:
                raise serializers.ValidationError(f"at most {REPORT_MAX_PROVIDERS} providers per report")
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
            202: inline_serializer(
                "UsageAccepted",
                {
                    "accepted": serializers.BooleanField(),
                    "dropped": serializers.DictField(
                        child=serializers.IntegerField(),
                        help_text="what the report held that was not kept, by kind: providers, steps, "
                        "outcome_classes and breaker_openings the registry does not know, rejections of "
                        f"versions the chain never had or past the newest {usage_reports.MAX_REJECTIONS}, "
                        "health (1: from an instance that has not read the chain within "
                        "FLEET_INSTANCE_TTL_MINUTES), drill (1: a drill section not kept: another chain's, "
                        "an unknown drill or one long ended, or from such an instance)",
                    ),
                },
            ),
            **errors(400, 401, 403, 404, 429, 503),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        # A token reports for its own environment's chains, those it is bound to (403 else).
        selection = services.revert_expired_and_read(chain=name, environment=environment_of(request, name))
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        principal = request.user
        if not isinstance(principal, TokenPrincipal):  # SentWithAToken let nothing else through
            raise exceptions.PermissionDenied(SentWithAToken.message)
        refusal = usage_reports.reports_refusal(principal.token)
        if refusal is not None:
            raise exceptions.PermissionDenied(refusal)
        taken = usage_reports.take_report(
            chain=selection.chain,
            live_version=selection.version,
            token=principal.token,
            report=_usage_report(serializer.validated_data),
        )
        if isinstance(taken, usage_reports.Refused):
            details = {"limit": taken.limit, "allowed_per_minute": taken.allowed, "retry_after": taken.retry_after}
            return Response(
                error_body(429, taken.message, details), status=429, headers={"Retry-After": str(taken.retry_after)}
            )
        if taken.evidence:
            # The report is stored: judging the alerts must not fail it (an SDK would resend
            # it and count it twice), so a failure here is logged and left to the beat.
            try:
                provider_alerts.sweep_after_report()
            except Exception:
                log.exception("provider alerts: the sweep after a usage report failed")
        return Response({"accepted": True, "dropped": taken.dropped.as_dict()}, status=202)


# The most characters of a fleet report item's chain and applied version (what fleet status
# could ever take as a version: ``audit.fleet_recorder.parse_identity``).
SEEN_CHAIN_MAX = 100
SEEN_VERSION_MAX = MAX_VERSION_LENGTH


class FleetSeenView(APIView):
    """The service instances a relay has seen read each chain (their X-Chain-Client and
    X-Chain-Applied-Version headers), sent on once a second: fleet status counts the instances
    behind relays as it counts those reading the control plane itself. What is not a valid
    identity is dropped and counted, as on a read. Only from a relay's token (purpose
    ``relay``), at most FLEET_SEEN_PER_TOKEN_PER_MINUTE calls a minute per token
    (``audit.fleet_seen``); the instances count against the relay token's
    FLEET_MAX_INSTANCES_PER_TOKEN."""

    permission_classes = [SentWithAToken]
    MAX_INSTANCES = fleet_seen.MAX_INSTANCES

    class SeenSerializer(serializers.Serializer):
        chain = StrictCharField(max_length=SEEN_CHAIN_MAX)
        client = StrictCharField(max_length=MAX_CLIENT_LENGTH)
        applied_version = StrictCharField(max_length=SEEN_VERSION_MAX)

    class InputSerializer(serializers.Serializer):
        instances = serializers.ListField(max_length=fleet_seen.MAX_INSTANCES)

    @extend_schema(
        operation_id="fleet_seen",
        request=inline_serializer(
            "FleetSeen", {"instances": serializers.ListField(child=SeenSerializer(), max_length=MAX_INSTANCES)}
        ),
        responses={
            202: inline_serializer(
                "FleetSeenAccepted",
                {"accepted": serializers.IntegerField(), "dropped": serializers.IntegerField()},
            ),
            **errors(400, 401, 403, 429),
        },
    )
    def post(self, request: Request) -> Response:
        principal = request.user
        if not isinstance(principal, TokenPrincipal):  # SentWithAToken let nothing else through
            raise exceptions.PermissionDenied(SentWithAToken.message)
        refusal = fleet_seen.purpose_refusal(principal.token)
        if refusal is not None:
            raise exceptions.PermissionDenied(refusal)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        taken = fleet_seen.take_seen(
            token=principal.token, instances=[self._identity(item) for item in serializer.validated_data["instances"]]
        )
        if isinstance(taken, fleet_seen.SeenRefused):
            details = {"allowed_per_minute": taken.allowed, "retry_after": taken.retry_after}
            return Response(
                error_body(429, taken.message, details), status=429, headers={"Retry-After": str(taken.retry_after)}
            )
        return Response({"accepted": taken.accepted, "dropped": taken.dropped}, status=202)

    def _identity(self, item: Any) -> tuple[str, str | None, str | None]:
        """(chain, client, applied version) of one item; an item of the wrong shape has none.

        ``SeenSerializer``'s rules (strings, not blank, no NUL, at most their lengths, trimmed),
        checked here by hand: a relay sends a thousand items a call, after each change one per
        instance behind it, and a serializer per item cost 50 us each (bench/README.md, "A
        hundred thousand services through relays")."""
        if not isinstance(item, dict):
            return ("", None, None)
        values = (item.get("chain"), item.get("client"), item.get("applied_version"))
        taken = []
        for value, most in zip(values, (SEEN_CHAIN_MAX, MAX_CLIENT_LENGTH, SEEN_VERSION_MAX), strict=True):
            if not isinstance(value, str):
                return ("", None, None)
            value = value.strip()
            if not value or len(value) > most or "\x00" in value:
                return ("", None, None)
            taken.append(value)
        return (taken[0], taken[1], taken[2])


def _usage_report(data: dict[str, Any]) -> usage_reports.UsageReport:
    """The report ``UsageView.InputSerializer`` validated, as ``audit.usage`` takes it."""
    health = data.get("health")
    ahead = data.get("ahead_of_server")
    return usage_reports.UsageReport(
        client=data["client"],
        providers={name: usage_reports.Served(**usage) for name, usage in data["providers"].items()},
        rejected=[usage_reports.Refusal(**item) for item in data["rejected"]],
        health=None
        if health is None
        else usage_reports.Health(
            steps=[
                provider_health.StepReport(
                    provider=step["provider"],
                    model=step["model"],
                    outcomes=step["outcomes"],
                    latency_ms=tuple(step["latency_ms"]),
                    first_chunk_ms=tuple(step.get("first_chunk_ms", ())),
                    **{name: step[name] for name in TOKEN_FIELDS},
                )
                for step in health["steps"]
            ],
            breaker_openings=health["breaker_openings"],
        ),
        ahead=usage_reports.Ahead(**ahead) if ahead else None,
        drill=_drill_section(data.get("drill")),
    )


def _drill_section(data: dict[str, Any] | None) -> drills.Section | None:
    if not data:
        return None
    latency = data.get("latency_ms") or {}
    return drills.Section(
        id=data["id"],
        **{name: data[name] for name in drills.COUNTS},
        ended_on=data["ended_on"],
        latency_drilled=tuple(latency.get("drilled", ())),
        latency_other=tuple(latency.get("other", ())),
    )


class ChainHealthView(APIView):
    """How each provider and model of a chain is doing, from the fleet's usage reports."""

    OutputSerializer = serializer_for(provider_health.StepHealth, "StepHealthSerializer")
    HeldSerializer = serializer_for(provider_health.HeldAlert, "HeldAlertSerializer")

    @extend_schema(
        operation_id="chains_health",
        responses={
            200: inline_serializer(
                "ChainHealth",
                {
                    "chain": serializers.CharField(),
                    "live": serializers.ListField(
                        child=serializers.CharField(),
                        help_text="The live chain's steps as provider/model, in order.",
                    ),
                    "error_classes": serializers.ListField(
                        child=serializers.CharField(),
                        help_text="The outcome classes that count as the provider's errors.",
                    ),
                    "steps": OutputSerializer(
                        many=True,
                        help_text="The live chain's steps in order, then other steps reported in the last hour.",
                    ),
                    "held_alerts": HeldSerializer(
                        many=True,
                        help_text="Provider alerts whose instances are enough but whose evidence came from fewer "
                        "than EVIDENCE_MIN_TOKENS tokens (none marked sole evidence): not raised, and why.",
                    ),
                },
            ),
            **errors(401, 404, 503),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        selection = services.revert_expired_and_read(chain=name, environment=environment_of(request, name))
        live = [(step["provider"], step["model"]) for step in selection.steps]
        # The live chain's steps in its order, then any other step reported lately, worst first.
        steps = provider_health.chain_health(selection.chain, first=live)
        return Response(
            {
                "chain": selection.chain.name,
                "live": [f"{provider}/{model}" for provider, model in live],
                "error_classes": list(provider_health.ERROR_CLASSES),
                "steps": steps,
                "held_alerts": provider_health.alert_evidence().held.get(selection.chain.label, []),
            }
        )


class ChainSpendView(APIView):
    """What a chain's traffic costs, per step: the tokens the fleet reported at the registry's
    prices (``audit.spend``)."""

    OutputSerializer = serializer_for(spend.ChainSpend, "ChainSpendSerializer")

    @extend_schema(operation_id="chains_spend", responses={200: OutputSerializer, **errors(401, 404, 503)})
    def get(self, request: Request, name: str) -> Response:
        selection = services.revert_expired_and_read(chain=name, environment=environment_of(request, name))
        live = [(step["provider"], step["model"]) for step in selection.steps]
        health = provider_health.chain_health(selection.chain, first=live)
        return Response(spend.chain_spend(selection.chain, health, live_head=live[0] if live else None))
