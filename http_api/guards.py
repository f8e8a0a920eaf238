"""The API of guarded pins (``presets.guards``): read the live pin's guard, switch it off. Views
only translate HTTP to the guards' operations and back; their refusals (``InvalidInput``,
``NotFound``) are rendered by ``http_api.errors``. A guard is made with its pin: ``"guard"`` on
``POST /api/v1/chains/{name}/select`` (``http_api.chains.SelectView``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from http_api.authentication import CanWrite
from http_api.environments import environment_of
from http_api.fields import ReasonField
from http_api.schema import errors
from presets import guards
from presets.models import GuardState, PinGuard
from presets.roles import actor_of

READ_ERRORS = errors(400, 401, 403, 404, 503)
# Switching off takes no expected version: a refusal is a 400 (no guard on), never a 409.
OFF_ERRORS = errors(400, 401, 403, 404, 503)


@extend_schema_serializer(component_name="GuardHead")
class GuardHeadSerializer(serializers.Serializer):
    """A head: a chain's first step."""

    provider = serializers.CharField()
    model = serializers.CharField()


@extend_schema_serializer(component_name="GuardRestores")
class GuardRestoresSerializer(serializers.Serializer):
    """The selection the pin replaced: what the guard restores."""

    version = serializers.IntegerField()
    preset = serializers.CharField()


# A head's figures (``audit.guards.Figures.as_json``). Made with type(): a field named "errors"
# declared in a class body reads as overriding ``Serializer.errors`` (the metaclass takes it out).
GuardFiguresSerializer = extend_schema_serializer(component_name="GuardFigures")(
    type(
        "GuardFiguresSerializer",
        (serializers.Serializer,),
        {
            "__doc__": "A head's figures from the fleet's reports over some minutes.",
            "__module__": __name__,
            "attempts": serializers.IntegerField(),
            "errors": serializers.IntegerField(help_text="attempts that failed"),
            "error_rate": serializers.FloatField(allow_null=True, help_text="errors / attempts; null without attempts"),
            "p95_ms": serializers.IntegerField(allow_null=True),
            "instances": serializers.IntegerField(help_text="reporting instances"),
            "tokens": serializers.ListField(
                child=serializers.CharField(), required=False, help_text="the tokens their reports came with"
            ),
        },
    )
)


@extend_schema_serializer(component_name="GuardEvidence")
class GuardEvidenceSerializer(serializers.Serializer):
    """What the guard acted on, or (``held``) why it does not act on a pin's head doing worse:
    empty until either."""

    baseline = GuardFiguresSerializer(required=False, help_text="the old head before the pin")
    current = GuardFiguresSerializer(required=False, help_text="the pin's head when it acted (or held)")
    worse_since = serializers.DateTimeField(required=False)
    tokens = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="the tokens the current evidence came with"
    )
    token_count = serializers.IntegerField(required=False, help_text="how many distinct tokens")
    sole_evidence = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="those of them marked sole evidence"
    )
    held = serializers.CharField(
        required=False,
        help_text="the head does worse but the guard does not act: its evidence came from fewer than "
        "EVIDENCE_MIN_TOKENS tokens and none is marked sole evidence",
    )


@extend_schema_serializer(component_name="Guard")
class GuardSerializer(serializers.Serializer):
    """A guard on one pin: during its bake window, if the fleet finds the pin's head clearly
    worse than the head it replaced was before the pin, the selection the pin replaced is
    restored (actor ``system:guard``), once."""

    chain = serializers.CharField()
    pin_version = serializers.IntegerField(help_text="the version that made the pin live")
    state = serializers.ChoiceField(choices=GuardState.choices)
    state_reason = serializers.CharField(
        allow_blank=True, help_text="why it passed, ended or was switched off, or what it restored"
    )
    pinned_at = serializers.DateTimeField()
    bake_until = serializers.DateTimeField(help_text="the end of its watch (GUARD_BAKE_MINUTES after the pin)")
    restores = GuardRestoresSerializer()
    new_head = GuardHeadSerializer(help_text="the pin's head")
    old_head = GuardHeadSerializer(help_text="the head the pin replaced")
    baseline = GuardFiguresSerializer(
        allow_null=True, help_text="the old head's figures before the pin, once read (a minute after the pin)"
    )
    evidence = GuardEvidenceSerializer()
    acted_version = serializers.IntegerField(allow_null=True, help_text="the version its restore made")
    summary = serializers.CharField(help_text="the guard in one line (UTC), as the chain's card says it")


def entry_response(guard: PinGuard) -> Response:
    return Response(guards.guard_entry(guard), headers={"Cache-Control": "no-cache"})


class ChainGuardView(APIView):
    """The live pin's guard, whatever its state."""

    OutputSerializer = GuardSerializer

    @extend_schema(
        operation_id="chains_guard_read",
        description="The guard of the pin the chain serves now, whatever its state; 404 when the live "
        "selection has none (the message says why, and what the chain's last guard did).",
        responses={200: OutputSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, name: str) -> Response:
        return entry_response(guards.get_live_guard(chain=name, environment=environment_of(request, name)))


class GuardOffView(APIView):
    """Switch the live pin's guard off (a write-scope token or the on-call role)."""

    permission_classes = [CanWrite]
    OutputSerializer = GuardSerializer

    class InputSerializer(serializers.Serializer):
        reason = ReasonField()

    @extend_schema(
        operation_id="chains_guard_off",
        description="Switch the live pin's guard off: it will not act on this pin. Refused (400) when the "
        "live pin has no guard watching or passed (none, already off, or the chain serves no pin).",
        request=InputSerializer,
        responses={200: OutputSerializer, **OFF_ERRORS},
    )
    def post(self, request: Request, name: str) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        reason = serializer.validated_data["reason"]
        return entry_response(
            guards.switch_off(
                chain=name, environment=environment_of(request, name), actor=actor_of(request.user), reason=reason
            )
        )
