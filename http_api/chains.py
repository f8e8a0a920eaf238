"""The HTTP API (DESIGN §7). Views only translate HTTP to service calls and back."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, TypedDict

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import drills
from audit.fleet_recorder import parse_identity, recorder
from http_api.authentication import CanWrite
from http_api.environments import environment_of, readable_selections
from http_api.fields import (
    AwareDateTimeField,
    ReasonField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    expiry_from,
    int_param,
)
from http_api.schema import WRITE_ERRORS, DocumentSerializer, errors, serializer_for
from presets import environments, selectors, services
from presets.documents import NO_MARKING, FailurePolicyDocument, Help, MarkingDocument, StepDocument, etag
from presets.history import HistoryEntry, history_entries
from presets.models import PRESET_NAME_MAX, Selection, ServiceToken, current_epoch
from presets.roles import actor_of
from presets.signing import sign
from read_path.counters import count_read
from read_path.http import matches, min_version, not_served_yet, wait_seconds


def document_response(selection: Selection, status: int = 200, *, epoch: int | None = None) -> Response:
    document = sign(selection.to_document(epoch=epoch))
    return Response(
        document,
        status=status,
        headers={"ETag": etag(document["epoch"], selection.version), "Cache-Control": "no-cache"},
    )


# --- reads ------------------------------------------------------------------------------


class CountedReadView(APIView):
    """Chain reads answered by Django (sessions, no token, WSGI) count in /metrics too."""

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        count_read(response.status_code)
        return response


class ChainListView(CountedReadView):
    @extend_schema(
        operation_id="chains_list",
        responses={
            200: inline_serializer("ChainList", {"chains": DocumentSerializer(many=True)}),
            **errors(401, 503),
        },
    )
    def get(self, request: Request) -> Response:
        selections = readable_selections(request)
        epoch = current_epoch()
        documents = [sign(s.to_document(epoch=epoch)) for s in selections]
        return Response({"chains": documents}, headers={"Cache-Control": "no-cache"})


class ChainDetailView(CountedReadView):
    @extend_schema(
        operation_id="chains_read",
        parameters=[
            OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER),
            OpenApiParameter(
                "wait",
                float,
                description="long poll: with If-None-Match, hold the "
                "request up to this many seconds (0..60) until the version changes",
            ),
            OpenApiParameter(
                "min_version",
                str,
                description="read-your-writes: the version (or the ETag) a change answered with; "
                "the read waits (about a second at most) until the process answering it serves "
                "that version or a newer one, and answers 409 if the chain never reached it",
            ),
        ],
        responses={200: DocumentSerializer, 304: None, **errors(400, 401, 404, 409, 503)},
    )
    def get(self, request: Request, name: str) -> Response:
        # Long polls are held by the ASGI read front (read_path/front.py); a request that
        # reaches Django (a session, or a WSGI deployment) is answered at once.
        wait_seconds(request.query_params.get("wait"))
        minimum = min_version(request.query_params.get("min_version"))
        environment = environment_of(request, name)
        selection = services.revert_expired_and_read(chain=name, environment=environment)
        identity = parse_identity(request.headers.get("X-Chain-Client"), request.headers.get("X-Chain-Applied-Version"))
        if identity is not None:
            token = request.auth.pk if isinstance(request.auth, ServiceToken) else None
            recorder.seen(environments.label(environment, name), *identity, token=token)
            recorder.flush()
        epoch = current_epoch()
        if minimum is not None and (epoch, selection.version) < minimum:
            raise not_served_yet(name, (epoch, selection.version), minimum)  # Django reads the database itself
        tag = etag(epoch, selection.version)
        if matches(request.headers.get("If-None-Match"), tag):
            return Response(status=304, headers={"ETag": tag, "Cache-Control": "no-cache"})
        return document_response(selection, epoch=epoch)


class PresetEntry(TypedDict):
    """A reviewed preset of a chain, as the chain API lists it (not in the chain document)."""

    name: str
    description: str
    chain: list[StepDocument]
    marking: MarkingDocument
    failure_policy: Annotated[
        FailurePolicyDocument | None, Help("what the SDK's routers do on a failure for it (null: their defaults)")
    ]
    is_default: bool
    is_live: Annotated[bool, Help("the chain serves it now (its default included)")]
    last_drill: Annotated[
        drills.LastDrill | None,
        Help(
            "its last judged failover drill (passed, failed or aborted once running): id, its start (at), the "
            "version whose document first carried it, the verdict; null if never drilled"
        ),
    ]


class ChainPresetsView(APIView):
    """A chain's reviewed presets, each with its last drill: what the chain document (the SDK's
    input, signed) does not carry."""

    OutputSerializer = serializer_for(PresetEntry)

    @extend_schema(
        operation_id="chains_presets",
        description="The chain's reviewed presets (retired ones left out), its default first, then by name, "
        "each with its last failover drill.",
        responses={
            200: inline_serializer(
                "ChainPresets",
                {
                    "chain": serializers.CharField(),
                    "version": serializers.IntegerField(help_text="the chain's live version"),
                    "presets": OutputSerializer(many=True),
                },
            ),
            **errors(400, 401, 403, 404, 503),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        # 404 for an unknown chain
        selection = services.revert_expired_and_read(chain=name, environment=environment_of(request, name))
        chain = selection.chain
        last = drills.last_drills(chain)
        presets = sorted(
            selectors.active_presets(chain=chain.pk).values(),
            key=lambda preset: (preset.pk != chain.default_preset_id, preset.name),
        )
        entries = [
            PresetEntry(
                name=preset.name,
                description=preset.description,
                chain=preset.steps,
                marking=preset.marking or NO_MARKING.copy(),
                failure_policy=preset.failure_policy,
                is_default=preset.pk == chain.default_preset_id,
                is_live=preset.pk == selection.preset_id,
                last_drill=last.get(preset.name),
            )
            for preset in presets
        ]
        return Response({"chain": chain.name, "version": selection.version, "presets": entries})


class HistoryView(APIView):
    OutputSerializer = serializer_for(HistoryEntry, "HistoryOutputSerializer")

    @extend_schema(
        operation_id="chains_history",
        parameters=[
            OpenApiParameter("limit", int, description="entries per page, 1..500 (default 100)"),
            OpenApiParameter("before", int, description="only versions below this one"),
        ],
        responses={
            200: inline_serializer("History", {"entries": OutputSerializer(many=True)}),
            **errors(400, 401, 404, 503),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        environment = environment_of(request, name)
        services.revert_expired_and_read(chain=name, environment=environment)  # 404 for an unknown chain
        limit = int_param(request, "limit", 100, 1, 500)
        before = int_param(request, "before", None, 1, None)
        entries = history_entries(chain=name, environment=environment, limit=limit, before=before)
        return Response({"entries": entries})


# --- changes ----------------------------------------------------------------------------


class ChangeInput(serializers.Serializer):
    """What every change sends: why, and (optionally) the version the caller saw, so that a
    change made meanwhile is a conflict rather than overwritten."""

    reason = ReasonField()
    expected_version = StrictIntegerField(required=False, min_value=0)


class PinInput(ChangeInput):
    """A change that sets a pin's expiry: a duration or a time, not both (neither: the default)."""

    duration_minutes = StrictIntegerField(required=False, min_value=1, max_value=10**9)
    expires_at = AwareDateTimeField(required=False)


WRITE_RESPONSES = {200: DocumentSerializer, **WRITE_ERRORS}


class WriteView(APIView):
    """A change: a POST with a write-scope token or the on-call role. Revert and restore take
    just ``ChangeInput``; the others name their ``InputSerializer``."""

    permission_classes = [CanWrite]
    InputSerializer: type[ChangeInput] = ChangeInput

    def change(self, request: Request, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The validated input, and what every service change takes from it: the chain's
        environment, who, why and the version they saw."""
        environment = environment_of(request, name)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        who = {
            "environment": environment,
            "actor": actor_of(request.user),
            "reason": data["reason"],
            "expected_version": data.get("expected_version"),
        }
        return data, who


class SelectView(WriteView):
    class InputSerializer(PinInput):
        preset = StrictCharField(max_length=PRESET_NAME_MAX)
        guard = StrictBooleanField(
            required=False,
            allow_null=True,
            help_text="guard the pin: restore what it replaced if the fleet finds its head clearly worse "
            "(GET .../guard reads it). Omitted or null: as GUARD_PINS_BY_DEFAULT says. Only a pin that "
            "changes the chain's head is guarded.",
        )
        spend_bound_per_hour = serializers.DecimalField(
            max_digits=12,
            decimal_places=2,
            min_value=Decimal("0.01"),
            required=False,
            allow_null=True,
            error_messages=dict(services.SPEND_BOUND_ERRORS),
            help_text="a spend alert when the chain's spend passes this an hour (the provider registry's currency) "
            "while the pin is live; omitted or null: no bound. It lasts as long as the pin (extend keeps it).",
        )

    @extend_schema(operation_id="chains_select", request=InputSerializer, responses=WRITE_RESPONSES)
    def post(self, request: Request, name: str) -> Response:
        data, who = self.change(request, name)
        # The answer stays the chain document (signed, parsed by the SDK): the guard is read apart.
        return document_response(
            services.select_preset(
                chain=name,
                preset=data["preset"],
                expires_at=expiry_from(data),
                guard=data.get("guard"),
                spend_bound=data.get("spend_bound_per_hour"),
                **who,
            )
        )


class RevertView(WriteView):
    @extend_schema(operation_id="chains_revert", request=ChangeInput, responses=WRITE_RESPONSES)
    def post(self, request: Request, name: str) -> Response:
        _, who = self.change(request, name)
        return document_response(services.revert_to_default(chain=name, **who))


class ExtendView(WriteView):
    class InputSerializer(PinInput):
        shorten = StrictBooleanField(
            required=False,
            default=False,
            help_text="true to end the pin earlier than it ends now; otherwise an expiry before the "
            "current one is refused (extending never shortens a pin).",
        )

    @extend_schema(operation_id="chains_extend", request=InputSerializer, responses=WRITE_RESPONSES)
    def post(self, request: Request, name: str) -> Response:
        data, who = self.change(request, name)
        expiry = expiry_from(data)
        return document_response(services.extend_pin(chain=name, expires_at=expiry, shorten=data["shorten"], **who))


class RestoreView(WriteView):
    @extend_schema(operation_id="chains_restore", request=ChangeInput, responses=WRITE_RESPONSES)
    def post(self, request: Request, name: str, version: int) -> Response:
        _, who = self.change(request, name)
        return document_response(services.restore(chain=name, version=version, **who))
