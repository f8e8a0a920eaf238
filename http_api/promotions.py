"""The API of promotions (``audit.promotions``): what a promotion to an environment would stand
on now, the promotions to and from it, asking for one (a config repository's CI can), and a
second person's approval. Refusals (``Conflict`` with the evidence, ``Forbidden``) are rendered
by ``http_api.errors``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit import promotions
from http_api.authentication import CanWrite
from http_api.environments import check_acts_in
from http_api.fields import ReasonField
from http_api.schema import errors
from presets import environments
from presets.exceptions import Conflict
from presets.roles import actor_of

PROMOTION_FIELDS: dict[str, serializers.Field[Any, Any, Any, Any]] = {
    "id": serializers.IntegerField(),
    "source": serializers.CharField(help_text="the environment it was promoted from"),
    "target": serializers.CharField(help_text="the environment it was promoted to"),
    "state": serializers.ChoiceField(choices=["pending", "promoted"]),
    "revision": serializers.DictField(help_text="the presets file: sha256 and name"),
    "requested_by": serializers.CharField(),
    "requested_at": serializers.CharField(),
    "reason": serializers.CharField(),
    "approved_by": serializers.CharField(allow_null=True),
    "approved_at": serializers.CharField(allow_null=True),
    "promoted_at": serializers.CharField(allow_null=True),
    "evidence": serializers.DictField(
        help_text="served (since, seconds, required_seconds), health (before, after, margin_points), drills "
        "(passed, missing, not_drillable), approval, refusals"
    ),
    "changes": serializers.ListField(child=serializers.CharField(), help_text="what the target's sync changed"),
}
PromotionSerializer = inline_serializer("Promotion", PROMOTION_FIELDS)


class PromotionsView(APIView):
    """An environment's promotions: the evidence a promotion to it would stand on now, the
    promotions to and from it, and asking for one."""

    permission_classes = [CanWrite]

    class InputSerializer(serializers.Serializer):
        reason = ReasonField()

    @extend_schema(
        operation_id="environments_promotions",
        description="The promotions to and from the environment, newest first, and what a promotion to it would "
        "stand on now (evidence, null when there is nothing to promote: why in nothing_to_promote).",
        responses={
            200: inline_serializer(
                "Promotions",
                {
                    "environment": serializers.CharField(),
                    "evidence": serializers.DictField(allow_null=True),
                    "nothing_to_promote": serializers.CharField(allow_null=True),
                    "promotions": inline_serializer("PromotionEntry", PROMOTION_FIELDS, many=True),
                },
            ),
            **errors(401, 403, 404, 503),
        },
    )
    def get(self, request: Request, environment: str) -> Response:
        environment = environments.resolve(environment)
        now: dict[str, Any] = {"evidence": None, "nothing_to_promote": None}
        if environments.before(environment) is None:
            now["nothing_to_promote"] = f"{environment} is the first environment: a sync reaches it"
        else:
            try:
                now["evidence"] = promotions.evidence(to=environment).as_json()
            except Conflict as exc:
                now["nothing_to_promote"] = exc.message
        entries = [promotions.entry(promotion) for promotion in promotions.promotions_of(environment)]
        return Response({"environment": environment, **now, "promotions": entries})

    @extend_schema(
        operation_id="environments_promotions_create",
        description="Promote the presets revision the environment below this one serves to it. Refused (409, the "
        "evidence in details.evidence, each point that does not hold in its refusals) until it has served there "
        "for PROMOTION_MIN_SERVED_MINUTES with an error rate no worse than before and a passed drill of each "
        "changed default; with PROMOTION_APPROVAL it waits (202, pending) for a second person's approval. A token "
        "must be a write token of this environment.",
        request=InputSerializer,
        responses={201: PromotionSerializer, 202: PromotionSerializer, **errors(400, 401, 403, 404, 409, 503)},
    )
    def post(self, request: Request, environment: str) -> Response:
        environment = environments.resolve(environment)
        check_acts_in(request, environment)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        promotion = promotions.promote(
            to=environment, actor=actor_of(request.user), reason=serializer.validated_data["reason"]
        )
        return Response(promotions.entry(promotion), status=202 if promotion.state == "pending" else 201)


class PromotionApproveView(APIView):
    """A second person's approval of a pending promotion (PROMOTION_APPROVAL)."""

    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="environments_promotions_approve",
        description="Approve a pending promotion: someone other than who asked for it; its evidence is judged "
        "again now (409 if it no longer holds), then the environment gets the revision.",
        request=None,
        responses={200: PromotionSerializer, **errors(400, 401, 403, 404, 409, 503)},
    )
    def post(self, request: Request, environment: str, promotion: int) -> Response:
        environment = environments.resolve(environment)
        check_acts_in(request, environment)
        if promotions.get(promotion).target != environment:
            raise Conflict(f"promotion {promotion} is not to {environment}", details={"promotion": promotion})
        return Response(promotions.entry(promotions.approve(promotion=promotion, actor=actor_of(request.user))))
