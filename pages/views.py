"""The on-call pages (DESIGN §8): see what is live, pin a reviewed preset, revert, extend, restore.

Views stay thin: they read through ``presets.selectors``, ``presets.services`` and ``presets.history``, call the
service for every change, and render its refusals (``InvalidInput`` on the form field it names,
``Conflict`` as "someone changed it meanwhile: here is what, confirm again"). A change is two
POSTs to the same URL: the first shows what will happen and asks for confirmation, the second
(``confirmed``) makes it; then POST-redirect-GET to the chain page with a success message. Every
POST answers with a redirect: a review or a refusal is shown by a GET of the change's URL with
a ``?review=`` token, its fields kept in the session, so Back never resends a POST.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_safe

from audit import actions, change_review, provider_health, spend
from audit import drills as fleet_drills
from audit.alerts import alert_texts, recent_alerts
from audit.fleet import fleet_summaries, idle_head_warnings
from audit.models import Alert
from audit.notifications import changes_notified, recent_notifications
from pages import plots
from pages.display import (
    DRILL_STATUS_WORDS,
    ActionLink,
    DrillItem,
    HealthMap,
    LiveState,
    PlanAhead,
    PlanItem,
    change_facts,
    drill_status,
    fault_choices,
    format_clock,
    format_minutes,
    hop_choices,
    plan_preset_choices,
    preset_choices,
    start_words,
    step_rows,
)
from pages.forms import (
    UTC_ZONE,
    ChangeForm,
    DrillAbortForm,
    DrillForm,
    ExtendForm,
    GuardOffForm,
    PlanChangeForm,
    PlanForm,
    PlanSettleForm,
    ReasonForm,
    RestoreForm,
    RevertForm,
    SelectForm,
    ShortenForm,
    wall_time,
)
from pages.layout import environment_of, in_environment, live_card, live_or_404, render_page, viewer_required
from presets import drills as chain_drills
from presets import environments, guards, plans, selectors, services
from presets.documents import format_duration
from presets.exceptions import Conflict, InvalidInput, NotFound
from presets.history import entry, history_rows
from presets.models import (
    Chain,
    Drill,
    DrillState,
    GuardState,
    PinGuard,
    PlannedPin,
    PlanState,
    Preset,
    Selection,
)
from presets.roles import ONCALL_GROUP, actor_of, can_change
from presets.selectors import PinStart
from presets.wire import DRILL_MAX_MINUTES

ALERTS_PAGE_SIZE = 100
OPEN_ALERTS_MAX = 1000
CHANGE_NOTIFICATIONS_SHOWN = 20


# --- reading pages ----------------------------------------------------------------------


@require_safe
@viewer_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Every chain as a card: what it serves, since when, why, until when."""
    now = timezone.now()
    environment = environment_of(request)
    selections = services.revert_expired_and_read_all(environment=environment, now=now)
    presets = selectors.active_presets_by_chain({s.chain_id: s.chain for s in selections})
    # Every chain's live and reviewed steps' health in one read.
    healths = provider_health.health_by_chain(
        {s.chain: [s.steps, *(p.steps for p in presets.get(s.chain_id, []))] for s in selections}, now=now
    )
    fleet = fleet_summaries(selections, now)  # every chain's fleet line in two queries
    starts = selectors.live_pin_starts(selections)  # every pin's start in one
    holding = plans.holding_plans(environment=environment)  # every chain's plans to come in one
    serving = {s.chain_id: s for s in selections}
    waiting = {  # why each suspended plan still waits, on its chain as served now
        p.pk: plans.why_waiting(p, serving[p.chain_id], now=now)
        for p in holding
        if p.state == PlanState.SUSPENDED and p.chain_id in serving
    }
    ahead = _plans_ahead(holding, waiting=waiting)
    watching, acted = _card_guards(selections, starts)  # every card's guard in one
    last_drills = fleet_drills.last_drill_by_chain([s.chain_id for s in selections])  # every chain's last drill in two
    cards = []
    for s in selections:
        health, suggestion = _health(s, presets.get(s.chain_id, []), now=now, health=healths[s.chain_id])
        cards.append(
            {
                "live": live_card(s, now=now, health=health, fleet_line=fleet[s.chain_id], pin_starts=starts),
                "choices": [c for c in preset_choices(presets.get(s.chain_id, []), s) if not c.is_live],
                "suggestion": suggestion,
                "plans": ahead.get(s.chain_id, []),
                "guarded": s.chain_id in watching,
                "guard_acted": acted.get(s.chain_id),
                "last_drill": last_drills.get(s.chain_id),
                "spend": _card_spend(s, health, now=now),
            }
        )
    context = {"cards": cards, "failing": _failing_in(environment, now=now), "refresh": "reload"}
    return render_page(request, "presets/dashboard.html", context)


@require_safe
@viewer_required
def chain_page(request: HttpRequest, name: str) -> HttpResponse:
    """One chain: its live state, the reviewed presets to pin, revert and extend."""
    return _chain_page(request, name)


@require_safe
@viewer_required
def alerts(request: HttpRequest) -> HttpResponse:
    """Open and recent alerts, when the audit app provides them."""
    return render_page(request, "presets/alerts.html", _alerts_context(environment_of(request)))


# --- changes ----------------------------------------------------------------------------


def _oncall_change(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A change's view: a POST, by someone signed in with the on-call role (someone without
    a role that reads gets the no-role page, a viewer the 403 that says what changing needs).

    A GET of a change's URL (a bookmark, or signing in again after the session expired
    mid-change, which lands on the URL the form posted to) changes nothing: it goes to the
    chain's page, saying so; with the token of a POST made from this session (``?review=``,
    Post/Redirect/Get), it shows what that POST met: its review, or why it was refused."""

    @viewer_required
    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            _require_oncall(request)
            return view(request, *args, **kwargs)
        pending = _pending(request) if request.method == "GET" else None
        if pending is None:
            return _nothing_changed(request, kwargs["name"], kind=view.__name__)
        _require_oncall(request)
        # The view works out again, against what is live now, what that POST sent; the data
        # never carries ``confirmed``, and ``_change`` applies nothing on a GET.
        request.POST = _as_posted(pending["data"])  # type: ignore[assignment]  # immutable, as a POST's is
        return view(request, *args, **kwargs)

    @require_http_methods(["GET", "HEAD", "POST"])
    @wraps(view)
    def signed_out_kept(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST" and not request.user.is_authenticated:
            _keep_unsent_change(request)
        return checked(request, *args, **kwargs)

    return signed_out_kept


# Where a change's POST waits for the GET that shows it (Post/Redirect/Get), by token; and
# a change posted after the session expired, for the page the person lands on once signed in.
PENDING_CHANGES = "pages.pending_changes"
PENDING_KEPT = 20
UNSENT_CHANGE = "pages.unsent_change"
PREFILL = "pages.prefill"
NOT_POSTED_BACK = ("csrfmiddlewaretoken", "confirmed")


def _posted_fields(request: HttpRequest) -> dict[str, list[str]]:
    """A change's POST as the session keeps it: never its CSRF token, never its confirmation."""
    return {key: request.POST.getlist(key) for key in request.POST if key not in NOT_POSTED_BACK}


def _as_posted(data: dict[str, list[str]]) -> QueryDict:
    return QueryDict(urlencode(data, doseq=True))


def _pending(request: HttpRequest) -> dict[str, Any] | None:
    """The change POST this GET's ``?review=`` token names, if this session made it to this URL."""
    pending = request.session.get(PENDING_CHANGES, {}).get(request.GET.get("review", ""))
    return pending if pending is not None and pending["path"] == request.path else None


def _show_after_post(
    request: HttpRequest,
    data: dict[str, list[str]],
    *,
    status: int = 200,
    refused: list[InvalidInput] | None = None,
    path: str | None = None,
) -> HttpResponse:
    """Post/Redirect/Get: what a change's POST showed (its review, or why it was refused) is
    shown by a GET of the same URL, so Back never offers to send the POST again. The POST's
    fields wait in this session under a token, not in the URL (the reason is among them).
    ``path``: the change's URL when this is not its POST (a deep link's review)."""
    token = secrets.token_urlsafe(12)
    path = path or request.path
    kept = request.session.get(PENDING_CHANGES, {})
    kept[token] = {
        "path": path,
        "data": data,
        "status": status,
        # What the service refused when confirming: shown again as it was, never re-applied.
        "refused": [[error.field, error.field_message] for error in refused or []],
    }
    request.session[PENDING_CHANGES] = dict(list(kept.items())[-PENDING_KEPT:])
    return redirect(f"{path}?{urlencode({'review': token})}")


@require_safe
@viewer_required
def act(request: HttpRequest, token: str) -> HttpResponse:
    """A notification's deep link (``audit.actions``): the suggested change's review,
    prefilled, as if its form had been sent. The link carries no authority: the review and
    the confirmation check this person's role and the chain's version as every change does
    (a viewer is refused here; a chain changed since shows the conflict). A link the control
    plane did not sign, or an old one, opens nothing and says why."""
    try:
        action = actions.read_link(token)
    except actions.BadLink as error:
        messages.error(request, f"Nothing was prefilled: {error}.")
        return redirect("dashboard")
    try:
        environment = environments.resolve(action.environment)
    except NotFound as error:
        messages.error(request, f"Nothing was prefilled: {error.message}.")
        return redirect("dashboard")
    if environment != environment_of(request):
        # The change is reviewed in its chain's environment, on its pages (marked as theirs).
        return redirect(in_environment(request, environment, request.path_info))
    live = live_or_404(request, action.chain)
    _require_oncall(request)
    if action.kind == actions.PIN and live.preset.name == action.preset:
        return _suggested_pin_live(request, live, action)
    fields: dict[str, Any] = {"expected_version": action.version, "reason": action.reason}
    if action.kind == actions.PIN:
        fields |= {"preset": action.preset, "duration_minutes": action.minutes, "guard": "on", "guard_asked": "on"}
        view = "chain-select"
    elif action.kind == actions.EXTEND:
        fields |= {"add_minutes": action.minutes}
        view = "chain-extend"
    else:
        view = "chain-revert"
    messages.info(
        request,
        f"Suggested by the control plane's notification for {action.chain} (v{action.version}). "
        "Nothing has changed yet: check it, edit the reason if you like, and confirm.",
    )
    data = {key: [str(value)] for key, value in fields.items()}
    return _show_after_post(request, data, path=reverse(view, args=[action.chain]))


def _suggested_pin_live(request: HttpRequest, live: Selection, action: actions.Action) -> HttpResponse:
    """A deep link's pin of the preset that is live already (someone pinned it since the alert,
    or the link is opened again): pinning it would only be refused, so the link offers what can
    be done, extending that pin (or, on the default, nothing)."""
    now, chain, preset = timezone.now(), live.chain.name, live.preset.name
    by = f"v{live.version} by {live.updated_by} at {format_clock(live.updated_at, now=now)}"
    if live.expires_at is None:
        messages.info(request, f"{chain} already serves {preset}, its default ({by}): there is nothing to pin.")
        return redirect("chain", name=chain)
    messages.info(
        request,
        f"{preset} is already live on {chain}, pinned until {format_clock(live.expires_at, now=now)} ({by}): "
        f"pinning it again would change nothing, so here is extending its pin by "
        f"{format_minutes(action.minutes)} instead. Nothing has changed yet: check it and confirm.",
    )
    data = {"expected_version": [str(live.version)], "reason": [action.reason], "add_minutes": [str(action.minutes)]}
    return _show_after_post(request, data, path=reverse("chain-extend", args=[chain]))


def _keep_unsent_change(request: HttpRequest) -> None:
    """A change posted after the session expired: nothing is changed, the sign-in page says
    why, and what was typed waits in the session (kept when signing in) for the page after."""
    request.session[UNSENT_CHANGE] = {"path": request.path, "data": _posted_fields(request)}
    messages.warning(
        request,
        "Your session had expired, so nothing was changed. Sign in again: the reason you typed "
        "is kept, and you can review the change again.",
    )


def _nothing_changed(request: HttpRequest, name: str, *, kind: str) -> HttpResponse:
    live_or_404(request, name)  # an unknown chain is a 404, not a redirect to one
    history = kind == "restore"
    if request.method != "GET":  # a HEAD (a link checker, say) leaves no message for later
        return redirect("chain-history" if history else "chain", name=name)
    unsent = request.session.get(UNSENT_CHANGE)
    if unsent is not None and unsent["path"] == request.path:
        del request.session[UNSENT_CHANGE]
        messages.warning(
            request,
            f"Nothing was changed on {name}: your session had expired before the change was made. "
            "What you typed is filled in again: check it against what is live now, then review the change.",
        )
        if history:  # a restore's reason is asked on its review page: go there with it
            return _show_after_post(request, unsent["data"])
        request.session[PREFILL] = {"chain": name, "kind": kind, "data": unsent["data"]}
        return redirect("chain", name=name)
    messages.warning(
        request,
        f"Nothing was changed: a change is made from its review page, with a reason and a "
        f"confirmation. Here is {name} as it is now; start again if it still needs the change.",
    )
    return redirect("chain-history" if history else "chain", name=name)


@_oncall_change
def select(request: HttpRequest, name: str) -> HttpResponse:
    """Pin a reviewed preset (review, then confirm)."""

    def describe(live: Selection, data: dict[str, Any]) -> dict[str, Any]:
        review = change_review.review_pin(
            live,
            preset=data["preset"],
            expires_at=timedelta(minutes=data["duration_minutes"]),
            guard=SelectForm.guard_of(data),
        )
        review.refuse()
        if review.to_default:  # selecting the default serves it with no expiry: say so
            return {
                "title": f"Serve {name}'s default, {review.target}, again?",
                "confirm_label": f"Revert to {review.target}",
                **_summary(review),
                "hidden": {"preset": review.target, "duration_minutes": data["duration_minutes"]},
            }
        assert review.until is not None
        return {
            "title": f"Pin {review.target} on {name}?",
            "confirm_label": f"Pin {review.target} for {format_duration(review.until - timezone.now())}",
            **_summary(review),
            "hidden": {
                "preset": review.target,
                "duration_minutes": data["duration_minutes"],
                "guard": "on" if data.get("guard") else "",
                "guard_asked": "on" if data.get("guard_asked") else "",
                "spend_bound_per_hour": data.get("spend_bound_per_hour") or "",
            },
            "spend_bound": data.get("spend_bound_per_hour"),
        }

    def apply(data: dict[str, Any]) -> Selection:
        expiry = timedelta(minutes=data["duration_minutes"])
        guard = SelectForm.guard_of(data)
        return services.select_preset(
            chain=name,
            environment=environment_of(request),
            preset=data["preset"],
            expires_at=expiry,
            guard=guard,
            spend_bound=data.get("spend_bound_per_hour"),
            **_who(request, data),
        )

    def already(live: Selection, data: dict[str, Any]) -> bool:
        if live.preset.name != data["preset"]:
            return False
        return live.is_default or _same_expiry(live, timezone.now() + timedelta(minutes=data["duration_minutes"]))

    origin = _back_to_chain_page(request, name, "select_form")
    return _change(request, name, SelectForm, describe=describe, apply=apply, already=already, origin=origin)


@_oncall_change
def revert(request: HttpRequest, name: str) -> HttpResponse:
    """Serve the chain's default preset again (review, then confirm)."""

    def describe(live: Selection, data: dict[str, Any]) -> dict[str, Any]:
        review = change_review.review_revert(live)
        review.refuse()
        return {
            "title": f"Revert {name} to its default, {review.target}?",
            "confirm_label": f"Revert to {review.target}",
            **_summary(review),
            "hidden": {},
        }

    def apply(data: dict[str, Any]) -> Selection:
        return services.revert_to_default(chain=name, environment=environment_of(request), **_who(request, data))

    return _change(
        request,
        name,
        RevertForm,
        describe=describe,
        apply=apply,
        already=lambda live, data: live.is_default,
        origin=_back_to_chain_page(request, name, "revert_form"),
    )


@_oncall_change
def extend(request: HttpRequest, name: str) -> HttpResponse:
    """Keep the live pin for longer (from now, or "+1 h" on its expiry), or, from the separate
    "End the pin earlier" form, end it sooner (review, then confirm)."""
    shorten = request.POST.get("shorten") == "true"

    def until_of(live: Selection, data: dict[str, Any]) -> services.Expiry:
        if data.get("add_minutes"):
            if live.expires_at is None:
                # The pin ended between review and confirm (reverted, or expired and swept):
                # the service refuses it on its version, and the conflict page says how.
                return timedelta(minutes=data["add_minutes"])
            return live.expires_at + timedelta(minutes=data["add_minutes"])
        return timedelta(minutes=data["duration_minutes"])

    def describe(live: Selection, data: dict[str, Any]) -> dict[str, Any]:
        if not live.is_pinned:  # it ended meanwhile: the conflict banner says how
            return {"title": f"{name} has no pin to extend any more", "blocked": True}
        now = timezone.now()
        review = change_review.review_extend(live, expires_at=until_of(live, data), shorten=shorten)
        review.refuse()
        until = review.until
        assert until is not None
        if shorten:
            title, label = f"End the pin of {live.preset.name} on {name} earlier?", "End the pin at"
        else:
            title, label = f"Extend the pin of {live.preset.name} on {name}?", "Extend until"
        label = f"{label} {format_clock(until, now=now)}"
        if data.get("add_minutes"):
            label += f" (+{format_minutes(data['add_minutes'])})"
        return {
            "title": title,
            "confirm_label": label,
            **_summary(review),
            "hidden": {
                "duration_minutes": data.get("duration_minutes") or "",
                "add_minutes": data.get("add_minutes") or "",
                "shorten": "true" if shorten else "",
            },
        }

    def apply(data: dict[str, Any]) -> Selection:
        return services.extend_pin(
            chain=name,
            environment=environment_of(request),
            expires_at=until_of(live_or_404(request, name), data),
            shorten=shorten,
            **_who(request, data),
        )

    def already(live: Selection, data: dict[str, Any]) -> bool:
        # The pin the person reviewed, moved as they asked: is that what is live now?
        seen = history_rows(chain=name, environment=environment_of(request))
        seen = seen.filter(version=data["expected_version"]).first()
        if seen is None or seen.expires_at is None or not live.is_pinned or live.preset_id != seen.preset_id:
            return False
        if data.get("add_minutes"):
            return _same_expiry(live, seen.expires_at + timedelta(minutes=data["add_minutes"]))
        return _same_expiry(live, timezone.now() + timedelta(minutes=data["duration_minutes"]))

    form_class, form_name = (ShortenForm, "shorten_form") if shorten else (ExtendForm, "extend_form")
    back = _back_to_chain_page(request, name, form_name)
    return _change(request, name, form_class, describe=describe, apply=apply, already=already, origin=back)


@_oncall_change
def restore(request: HttpRequest, name: str, version: int) -> HttpResponse:
    """Undo one history entry: its previous value goes live again (review, then confirm)."""
    row = history_rows(chain=name, environment=environment_of(request)).filter(version=version).first()
    if row is None:
        raise Http404(f"{name} has no version {version}")

    def describe(live: Selection, data: dict[str, Any]) -> dict[str, Any]:
        review = change_review.review_restore(live, version=version, previous=row.previous_preset)
        review.refuse()
        return {
            "title": f"Undo v{version} on {name}: serve {review.target} again?",
            "confirm_label": f"Restore {review.target}",
            "undo": entry(row),
            **_summary(review),
            "hidden": {},
        }

    def apply(data: dict[str, Any]) -> Selection:
        return services.restore(chain=name, environment=environment_of(request), version=version, **_who(request, data))

    def origin(bound: ChangeForm) -> HttpResponse:
        # The reason was typed on the history page: ask for it again on the confirmation page.
        live = live_or_404(request, name)
        try:
            summary = describe(live, {})
        except InvalidInput as error:
            bound.add_service_error(error)
            summary = {"title": f"Undo v{version} on {name}?", "blocked": True}
        return _confirm_page(
            request, name, bound, live=live, summary=summary, status=400, cancel=reverse("chain-history", args=[name])
        )

    def already(live: Selection, data: dict[str, Any]) -> bool:
        previous = row.previous_preset
        if previous is None or live.preset_id != previous.pk:
            return False
        return live.is_default or _same_expiry(live, services.resolve_expiry(None, now=timezone.now()))

    history = reverse("chain-history", args=[name])
    return _change(
        request, name, RestoreForm, describe=describe, apply=apply, already=already, origin=origin, cancel=history
    )


# --- planned pins -------------------------------------------------------------------------
#
# A plan changes nothing live until its start, so planning, changing and cancelling one is one
# POST, without a review; "Start anyway" says on the chain page what it replaces, on the
# version it posts back (a chain changed since is refused, and the page shows what it replaces
# now). Each answers with a redirect: to the plan on the chain page, or, refused, to the GET
# that shows the form with its errors (Post/Redirect/Get, as every change).


@_oncall_change
def plan(request: HttpRequest, name: str) -> HttpResponse:
    """Plan a pin of a reviewed preset, from a start to an end."""
    form = PlanForm(request.POST, presets=_plan_presets(request, name))

    def apply(data: dict[str, Any]) -> PlannedPin:
        return plans.plan_pin(
            chain=name,
            environment=environment_of(request),
            preset=data["preset"],
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
            actor=actor_of(request.user),
            reason=data["reason"],
        )

    def done(held: PlannedPin) -> str:
        return f"Planned pin #{held.pk} on {name}: {plans.describe(held)}."

    return _one_post_change(request, name, form, apply=apply, done=done, page={"plan_form": form})


@_oncall_change
def plan_change(request: HttpRequest, name: str, plan: int) -> HttpResponse:
    """Change a plan not started yet: its preset, start or end."""
    _plan_or_404(request, name, plan)
    form = PlanChangeForm(request.POST, presets=_plan_presets(request, name), auto_id=f"plan{plan}_change_%s")

    def apply(data: dict[str, Any]) -> PlannedPin:
        return plans.change_plan(
            chain=name,
            environment=environment_of(request),
            plan=plan,
            actor=actor_of(request.user),
            reason=data["reason"],
            preset=data["preset"],
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
        )

    def done(held: PlannedPin) -> str:
        return f"Plan #{held.pk} changed: {plans.describe(held)}."

    return _one_post_change(request, name, form, apply=apply, done=done, page={"plan_action": (plan, "change", form)})


@_oncall_change
def plan_cancel(request: HttpRequest, name: str, plan: int) -> HttpResponse:
    """Cancel a plan not started yet."""
    _plan_or_404(request, name, plan)
    form = _settle_form(plan, "cancel", request.POST)

    def apply(data: dict[str, Any]) -> PlannedPin:
        return plans.cancel_plan(
            chain=name,
            environment=environment_of(request),
            plan=plan,
            actor=actor_of(request.user),
            reason=data["reason"],
        )

    def done(held: PlannedPin) -> str:
        return f"Plan #{held.pk} on {name} cancelled: it will not start."

    return _one_post_change(request, name, form, apply=apply, done=done, page={"plan_action": (plan, "cancel", form)})


@_oncall_change
def plan_start(request: HttpRequest, name: str, plan: int) -> HttpResponse:
    """Start a suspended plan anyway, replacing what the chain serves."""
    _plan_or_404(request, name, plan)
    form = _settle_form(plan, "start", request.POST)

    def apply(data: dict[str, Any]) -> PlannedPin:
        live = live_or_404(request, name)
        seen = data.get("expected_version")
        if seen is not None and seen != live.version:
            facts = change_facts(live)
            raise InvalidInput(
                "plan",
                f"{name} changed since the page was loaded: it is now v{live.version}, {live.preset.name} "
                f"({facts.done} by {facts.actor} at {format_clock(facts.at, now=timezone.now())}). "
                "Read what starting the plan replaces now, then start it again.",
            )
        return plans.start_plan_anyway(
            chain=name,
            environment=environment_of(request),
            plan=plan,
            actor=actor_of(request.user),
            reason=data["reason"],
            expected_version=seen,
        )

    def done(held: PlannedPin) -> str:
        return f"Plan #{held.pk} started anyway. {_changed_message(live_or_404(request, name))}"

    return _one_post_change(request, name, form, apply=apply, done=done, page={"plan_action": (plan, "start", form)})


@_oncall_change
def guard_off(request: HttpRequest, name: str) -> HttpResponse:
    """Switch the live pin's guard off."""
    form = GuardOffForm(request.POST)

    def apply(data: dict[str, Any]) -> PinGuard:
        return guards.switch_off(
            chain=name, environment=environment_of(request), actor=actor_of(request.user), reason=data["reason"]
        )

    def done(guard: PinGuard) -> str:
        return f"The guard on {name}'s pin (v{guard.pin_version}) is off: it will not undo this pin."

    return _one_post_change(
        request, name, form, apply=apply, done=done, page={"guard_form": form}, anchor=lambda _: "#guard"
    )


# --- failover drills ------------------------------------------------------------------------
#
# A drill is started or planned, aborted or cancelled in one POST each, as a plan is: what it
# does is said on the form (the hop, the fault, the share, the window) and it never replaces
# what the chain serves. Started, it lands on its report, which follows it live; planned,
# aborted or refused, on the chain page (or on the report it was aborted from).


@_oncall_change
def drill_start(request: HttpRequest, name: str) -> HttpResponse:
    """Start a failover drill on the chain now, or plan it."""
    form = _drill_form(live_or_404(request, name), request.POST)

    def apply(data: dict[str, Any]) -> Drill:
        return fleet_drills.start_drill(
            chain=name,
            environment=environment_of(request),
            hop=data["hop"],
            fault=data["fault"],
            share=data["share"],
            services=DrillForm.service_names(data["services"]),
            start=data["starts_at"],
            minutes=data["minutes"],
            repeat_days=data["repeat_days"] or None,
            reason=data["reason"],
            actor=actor_of(request.user),
        )

    def done(drill: Drill) -> str:
        now = timezone.now()
        if drill.state == DrillState.RUNNING:
            return (
                f"Drill #{drill.pk} started on {name} (v{drill.started_version}): {chain_drills.describe(drill)}, "
                f"until {format_clock(drill.ends_at, now=now)}."
            )
        return (
            f"Drill #{drill.pk} planned on {name} from {format_clock(drill.starts_at, now=now)} to "
            f"{format_clock(drill.ends_at, now=now)}: {chain_drills.describe(drill)}."
        )

    def landing(drill: Drill) -> str:
        if drill.state == DrillState.RUNNING:
            return reverse("drill", args=[drill.pk])
        return f"{reverse('chain', args=[name])}#drill-{drill.pk}"

    return _one_post_change(request, name, form, apply=apply, done=done, page={"drill_form": form}, landing=landing)


@_oncall_change
def drill_abort(request: HttpRequest, name: str, drill: int) -> HttpResponse:
    """Abort a running drill (the chain's document loses it at once), or cancel a planned one;
    from the chain page or from the drill's report (``back``), where it is shown again."""
    held = _drill_or_404(request, name, drill)
    planned = held.state == DrillState.PLANNED
    form = DrillAbortForm(request.POST, drill=held.pk, planned=planned)
    on_report = request.POST.get("back") == "report"

    def apply(data: dict[str, Any]) -> Drill:
        return chain_drills.abort_drill(drill=held.pk, actor=actor_of(request.user), reason=data["reason"])

    def done(ended: Drill) -> str:
        if planned:
            return f"Drill #{ended.pk} on {name} cancelled: it will not start."
        return (
            f"Drill #{ended.pk} on {name} aborted: {name} is now v{ended.ended_version}, without it. "
            "Clients stop failing requests as soon as they read it."
        )

    def landing(ended: Drill) -> str:
        return reverse("drill", args=[ended.pk]) if on_report else f"{reverse('chain', args=[name])}#drill-{ended.pk}"

    def shown_on(status: int) -> HttpResponse:
        if on_report:
            return _drill_page(request, held.pk, abort_form=form, status=status)
        return _chain_page(request, name, status=status, drill_abort=(held.pk, form))

    return _one_post_change(request, name, form, apply=apply, done=done, page={}, landing=landing, shown_on=shown_on)


@require_safe
@viewer_required
def drill_page(request: HttpRequest, drill: int) -> HttpResponse:
    """A drill's report: its verdict and why, what was drilled, the window, the fleet's counts
    per instance and per minute; live (refreshed by the script) until it is judged."""
    return _drill_page(request, drill)


# The report page refreshes itself this often until the drill is judged (clients report every
# DRILL_REPORT_INTERVAL_S while they take part).
DRILL_REFRESH_MS = 5000
RECENT_DRILLS = 10


def _drill_or_404(request: HttpRequest, name: str, drill: int) -> Drill:
    """The drill ``drill`` of chain ``name`` in the page's environment, or a 404 (a drill is
    found on its own chain only)."""
    live = live_or_404(request, name)  # an unknown chain says so
    try:
        held = chain_drills.get(drill)
    except NotFound:
        raise Http404(f"{name} has no drill #{drill}") from None
    if held.chain_id != live.chain_id:
        raise Http404(f"{name} has no drill #{drill}")
    return held


def _drill_form(live: Selection, data: Any = None, **kwargs: Any) -> DrillForm:
    return DrillForm(
        data,
        hops=hop_choices(live.steps),
        faults=fault_choices(),
        longest=DRILL_MAX_MINUTES,
        **kwargs,
    )


def _abort_form(drill: Drill, back: str) -> DrillAbortForm:
    form = DrillAbortForm(drill=drill.pk, planned=drill.state == DrillState.PLANNED)
    form.fields["back"].initial = back
    return form


def _drill_page(
    request: HttpRequest, drill_id: int, *, abort_form: DrillAbortForm | None = None, status: int = 200
) -> HttpResponse:
    try:
        drill = chain_drills.get(drill_id)
    except NotFound:
        raise Http404(f"no drill #{drill_id}") from None
    environment = environment_of(request)
    if drill.chain.environment != environment:
        raise Http404(
            f"{environment} has no drill #{drill_id}: it is a drill of {drill.chain.name} in {drill.chain.environment}"
        )
    report = fleet_drills.report(drill)
    refused = abort_form if abort_form is not None and abort_form.errors else None
    if drill.state == DrillState.ENDED:
        abort_form = None  # nothing left to abort: a refusal says so at the top
    elif abort_form is None and can_change(request.user):
        abort_form = _abort_form(drill, "report")
    status_name = drill_status(drill)
    context = {
        "drill": drill,
        "report": report,
        "status": status_name,
        "status_words": DRILL_STATUS_WORDS.get(status_name, status_name),
        "abort_form": abort_form,
        "fallback_hop": drill.hop + 1,
        "min_fallback_attempts": chain_drills.MIN_FALLBACK_ATTEMPTS,
        "judge_after": settings.DRILL_JUDGE_AFTER_SECONDS,
        "refused_form": refused,
        # Until it is judged, the script fetches the page again and shows what changed.
        "live_every": DRILL_REFRESH_MS if not drill.is_judged else None,
        "refresh": "",
    }
    return render_page(request, "presets/drill.html", context, status=status)


def _drill_items(
    request: HttpRequest, chain: Chain, *, bound: tuple[int, DrillAbortForm] | None
) -> tuple[list[DrillItem], list[DrillItem]]:
    """The chain's drills to come or running (the running one with the fleet's counts), and the
    latest ones that ended, each with its state; for someone on call, each to come with the
    form that aborts or cancels it (``bound``: the one a refused abort sent back)."""
    oncall = can_change(request.user)
    now_items: list[DrillItem] = []
    recent: list[DrillItem] = []
    for drill in chain_drills.of_chain(chain, limit=RECENT_DRILLS + 10):
        summary = chain_drills.describe(drill)
        if drill.state == DrillState.ENDED:
            if len(recent) < RECENT_DRILLS:
                recent.append(DrillItem(drill=drill, summary=summary, status=drill_status(drill)))
            continue
        form = None
        if bound is not None and bound[0] == drill.pk:
            form = bound[1]
        elif oncall:
            form = _abort_form(drill, "chain")
        running = drill.state == DrillState.RUNNING
        now_items.append(
            DrillItem(
                drill=drill,
                summary=summary,
                status=drill_status(drill),
                report=dict(fleet_drills.report(drill)) if running else None,
                abort_form=form,
            )
        )
    # The running one first, then the planned ones by their start.
    now_items.sort(key=lambda item: (item.status != "running", item.drill.starts_at, item.drill.pk))
    return now_items, recent


# The forms that settle a plan: what did not happen when refused, and what to say in the reason.
SETTLE_WORDS = {
    "cancel": ("The plan was not cancelled", "Why it must not start."),
    "start": ("The plan was not started", "Why it starts although it was suspended."),
}


def _settle_form(plan: int, action: str, data: Any = None) -> PlanSettleForm:
    not_done, help_text = SETTLE_WORDS[action]
    return PlanSettleForm(data, auto_id=f"plan{plan}_{action}_%s", not_done=not_done, help_text=help_text)


def _plan_presets(request: HttpRequest, name: str) -> list[tuple[str, str]]:
    selection = live_or_404(request, name)
    return plan_preset_choices(list(selectors.active_presets(chain=selection.chain_id).values()))


def _plan_or_404(request: HttpRequest, name: str, plan: int) -> PlannedPin:
    try:
        return plans.get_plan(chain=name, environment=environment_of(request), plan=plan)
    except NotFound:
        live_or_404(request, name)  # an unknown chain says so
        raise Http404(f"{name} has no plan #{plan}") from None


def _one_post_change(
    request: HttpRequest,
    name: str,
    form: ReasonForm,
    *,
    apply: Callable[[dict[str, Any]], Any],
    done: Callable[[Any], str],
    page: dict[str, Any],
    anchor: Callable[[Any], str] = lambda held: f"#plan-{held.pk}",
    landing: Callable[[Any], str] | None = None,
    shown_on: Callable[[int], HttpResponse] | None = None,
) -> HttpResponse:
    """Apply a change made in one POST (a plan's, a guard's, a drill's), then show it on the
    chain page (at ``anchor``; or at ``landing``'s URL) with ``done``'s message; a refusal is
    shown by the GET this redirects to (``_show_after_post``): the chain page with the form
    (``page``: how ``_chain_page`` takes it; or the page ``shown_on`` renders with a status)
    and each error on its field."""
    if request.method != "POST":
        pending = _pending(request)
        assert pending is not None  # ``_oncall_change`` lets a GET through only with one
        _check_form(form)
        for field, message in pending["refused"]:
            form.add_service_error(InvalidInput(field, message))
        if shown_on is not None:
            return shown_on(pending["status"])
        return _chain_page(request, name, status=pending["status"], **page)
    live_or_404(request, name)  # an unknown chain is a 404, whatever was posted
    refused: list[InvalidInput] = []
    if form.is_valid():
        try:
            held = apply(form.cleaned_data)
        except InvalidInput as error:
            refused.append(error)
        except Conflict as error:
            # The chain changed under the lock since the page was read (start anyway): said
            # above the form, as the page shows the chain now; nothing was written.
            return _show_after_post(
                request, _posted_fields(request), status=409, refused=[InvalidInput("chain", error.message)]
            )
        except NotFound as error:
            raise Http404(str(error)) from None
        else:
            messages.success(request, done(held))
            if landing is not None:
                return redirect(landing(held))
            return redirect(f"{reverse('chain', args=[name])}{anchor(held)}")
    return _show_after_post(request, _posted_fields(request), status=400, refused=refused)


def _check_form(form: ReasonForm) -> None:
    """Validate ``form``, a blank reason reported with its other errors (the service, which
    would say so, is not asked while the form has any)."""
    if not form.is_valid() and "reason" not in form.errors:
        try:
            services.clean_reason(form.data.get("reason", ""))
        except InvalidInput as error:
            form.add_service_error(error)


def _plans_ahead(holding: list[PlannedPin], *, waiting: dict[int, str]) -> dict[int, list[PlanAhead]]:
    """By chain, the plans a chain's card shows: each suspended one (it waits for a person),
    with why it still waits now (``waiting``, by plan), then the next to start; none started
    (its pin is the card's live one)."""
    ahead: dict[int, list[PlanAhead]] = {}
    for held in sorted(holding, key=lambda p: (p.state != PlanState.SUSPENDED, p.starts_at, p.pk)):
        shown = ahead.setdefault(held.chain_id, [])
        if held.state == PlanState.SUSPENDED or (
            held.state == PlanState.PLANNED and not any(a.plan.state == PlanState.PLANNED for a in shown)
        ):
            shown.append(PlanAhead(held, waiting.get(held.pk, "")))
    return ahead


# --- the review -> confirm -> apply flow shared by every change --------------------------


def _back_to_chain_page(request: HttpRequest, name: str, form_name: str) -> Callable[[ChangeForm], HttpResponse]:
    """Where a refused change goes back to: the chain page, the form showing its errors."""
    return lambda form: _chain_page(request, name, status=400, **{form_name: form})  # type: ignore[arg-type]


def _who(request: HttpRequest, data: dict[str, Any]) -> dict[str, Any]:
    """What every service change takes from the confirmed form: who, why, and the version
    the person saw (the service refuses the change if the chain moved since)."""
    return {"actor": actor_of(request.user), "reason": data["reason"], "expected_version": data["expected_version"]}


def _summary(review: change_review.ChangeReview) -> dict[str, Any]:
    """What the review page shows of a change (``audit.change_review``, as every surface)."""
    guard = review.guard
    return {
        "review": review,
        "target": review.target,
        "steps": review.steps,
        "marking": review.marking,
        "change": review.change,
        "until": review.until,
        "was_until": review.was_until,
        "caution": review.ends,
        "warning": review.warning,
        "guard_note": None if guard is None else {"guarded": guard.acts, "text": guard.text},
    }


def _change(
    request: HttpRequest,
    name: str,
    form_class: type[ChangeForm],
    *,
    describe: Callable[[Selection, dict[str, Any]], dict[str, Any]],
    apply: Callable[[dict[str, Any]], Selection],
    already: Callable[[Selection, dict[str, Any]], bool],
    origin: Callable[[ChangeForm], HttpResponse],
    cancel: str | None = None,
) -> HttpResponse:
    """Review, then confirm, then apply a change. ``already`` says whether a live selection is
    what the change asks for: when someone else's change got there first, there is nothing
    to confirm again.

    A POST answers with a redirect only (Post/Redirect/Get): a page it would show, the review
    or a refusal, is shown by the GET it redirects to (``_show_after_post``), which works the
    POST out again against what is live then and never applies it."""
    form = form_class(request.POST)
    cancel = cancel or reverse("chain", args=[name])
    if request.method != "POST":
        pending = _pending(request)
        assert pending is not None  # ``_oncall_change`` lets a GET through only with one
        if pending["refused"]:  # what the service refused on confirming, shown as it was
            form.is_valid()
            for field, message in pending["refused"]:
                form.add_service_error(InvalidInput(field, message))
            return origin(form)
        return _review(
            request,
            name,
            form,
            describe=describe,
            already=already,
            origin=origin,
            cancel=cancel,
            conflict_status=pending["status"],
        )
    if not form.is_valid() or not form.cleaned_data["confirmed"]:
        response = _review(request, name, form, describe=describe, already=already, origin=origin, cancel=cancel)
        return response if response.status_code == 302 else _show_after_post(request, _posted_fields(request))
    data = form.cleaned_data
    live_or_404(request, name)  # an unknown chain is a 404, whatever was posted
    refused: list[InvalidInput] = []
    try:
        selection = apply(data)
    except InvalidInput as error:
        refused.append(error)
    except Conflict:
        # Someone changed the chain since this person looked: nothing was written. If that
        # change did what this one asked, say so; else show what happened and ask again,
        # against the version that is live now (the GET after this sees the versions differ).
        if already(live_or_404(request, name), data):
            return _nothing_to_do(request, live_or_404(request, name))
        return _show_after_post(request, _posted_fields(request), status=409)
    else:
        messages.success(request, _changed_message(selection))
        return redirect("chain", name=name)
    return _show_after_post(request, _posted_fields(request), status=400, refused=refused)


def _review(
    request: HttpRequest,
    name: str,
    form: ChangeForm,
    *,
    describe: Callable[[Selection, dict[str, Any]], dict[str, Any]],
    already: Callable[[Selection, dict[str, Any]], bool],
    origin: Callable[[ChangeForm], HttpResponse],
    cancel: str,
    conflict_status: int = 200,
) -> HttpResponse:
    """A change's review: the confirm page, or the form it came from with why it was refused.
    ``conflict_status`` is the status of a review that shows a conflict (409 after a
    confirmation the service refused on its version)."""
    if not form.is_valid():
        if "reason" not in form.errors:  # report a blank reason too, not one error at a time
            try:
                services.clean_reason(form.data.get("reason", ""))
            except InvalidInput as error:
                form.add_service_error(error)
        return origin(form)
    data = form.cleaned_data
    live = live_or_404(request, name)
    try:
        services.clean_reason(data["reason"])  # a blank reason is refused before confirming
        conflict = None
        # Shown before confirming; the service checks the version again when it writes.
        if live.version != data["expected_version"]:
            if already(live, data):
                return _nothing_to_do(request, live)
            conflict = {"current": live.to_document(), "action": live.action}
        summary = describe(live, data)
    except InvalidInput as error:
        form.add_service_error(error)
        return origin(form)
    return _confirm_page(
        request,
        name,
        form,
        live=live,
        summary=summary,
        conflict=conflict,
        cancel=cancel,
        status=conflict_status if conflict else 200,
    )


def _confirm_page(
    request: HttpRequest,
    name: str,
    form: ChangeForm,
    *,
    live: Selection,
    summary: dict[str, Any],
    cancel: str,
    conflict: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    # The health of the steps about to serve, next to the live ones': one read for both.
    now = timezone.now()
    review: change_review.ChangeReview | None = summary.get("review")
    steps = summary.get("steps", [])
    health = review.health if review else provider_health.health_by_step(live.chain, [live.steps], now=now)
    response = render_page(
        request,
        "presets/confirm.html",
        {
            "chain_name": name,
            "live": live_card(live, now=now, health=health),
            "summary": summary,
            "dangers": review.dangers if review else [],
            "currency": spend.currency(),
            "cost": review.cost if review else None,
            "step_rows": step_rows(steps, health),
            "form": form,
            "reason": form.data.get("reason", ""),
            # The page asks about the version live now; confirming sends that version back.
            "expected_version": live.version,
            "hidden": summary.get("hidden", {}),
            "conflict": conflict,
            "action_url": request.path,
            "cancel_url": cancel,
        },
        status=status,
    )
    # A review offers a change: Back after confirming must not show it again from a cache.
    add_never_cache_headers(response)
    return response


# Two people asking for the same pin a moment apart ask for the same thing: expiries this
# close (the pages show minutes) are one.
SAME_EXPIRY = timedelta(minutes=1)


def _same_expiry(live: Selection, until: datetime) -> bool:
    return live.expires_at is not None and abs(live.expires_at - until) <= SAME_EXPIRY


def _nothing_to_do(request: HttpRequest, live: Selection) -> HttpResponse:
    """The chain already is as the change asked (someone else's change got there first):
    say so, with that change, and show the chain; nothing to confirm again."""
    now, chain, preset = timezone.now(), live.chain.name, live.preset.name
    facts = change_facts(live)
    by = f"v{live.version}, {facts.done} by {live.updated_by} at {format_clock(live.updated_at, now=now)}"
    if live.expires_at is None:
        state = f"on its default preset {preset}" if live.is_default else f"on {preset}"
    else:
        state = f"pinned to {preset} until {format_clock(live.expires_at, now=now)}"
    messages.info(request, f"{chain} is already {state} ({by}): nothing to do")
    return redirect("chain", name=chain)


def _changed_message(selection: Selection) -> str:
    chain = selection.chain.name
    if selection.is_default:
        return f"{chain} is now v{selection.version}: {selection.preset.name} (default, no expiry)."
    expires_at, now = selection.expires_at, timezone.now()
    assert expires_at is not None  # a pin always has an expiry
    return (
        f"{chain} is now v{selection.version}: {selection.preset.name}, pinned until "
        f"{format_clock(expires_at, now=now)} (expires in {format_duration(expires_at - now)})."
    )


# --- page helpers -----------------------------------------------------------------------


def _chain_page(
    request: HttpRequest,
    name: str,
    *,
    select_form: ChangeForm | None = None,
    revert_form: ChangeForm | None = None,
    extend_form: ExtendForm | None = None,
    shorten_form: ExtendForm | None = None,
    plan_form: PlanForm | None = None,
    plan_action: tuple[int, str, ReasonForm] | None = None,
    guard_form: GuardOffForm | None = None,
    drill_form: DrillForm | None = None,
    drill_abort: tuple[int, DrillAbortForm] | None = None,
    status: int = 200,
) -> HttpResponse:
    now = timezone.now()
    selection = live_or_404(request, name, now=now)
    presets = list(selectors.active_presets(chain=selection.chain_id).values())
    health, suggestion = _health(selection, presets, now=now)
    live = live_card(selection, now=now, health=health)
    version = selection.version
    unbound = (
        select_form is None
        and revert_form is None
        and extend_form is None
        and shorten_form is None
        and plan_form is None
        and plan_action is None
        and guard_form is None
        and drill_form is None
        and drill_abort is None
    )
    typed_into, typed = _typed_before_sign_in(request, name) if unbound else ("", {})
    chosen = request.GET.get("preset", "") or (typed.get("preset", "") if typed_into == "select" else "")

    def initial(form: str, **fields: Any) -> dict[str, Any]:
        if form != typed_into:
            return {"expected_version": version, **fields}
        kept = {key: typed[key] for key in ("reason", "duration_minutes") if typed.get(key)}
        return {"expected_version": version, **fields, **kept}

    # A pin made from an alert (its link, or the card's suggestion) is guarded unless unticked.
    from_alert = request.GET.get("from") == "alert"
    if select_form is None:
        guarded = settings.GUARD_PINS_BY_DEFAULT or from_alert
        if typed_into == "select" and typed.get("guard_asked"):
            guarded = bool(typed.get("guard"))  # the box as it was before the session expired
        select_form = SelectForm(initial=initial("select", preset=chosen, guard=guarded, guard_asked=True))
    if guard_form is None:
        typed_reason = typed.get("reason") if typed_into == "guard_off" else None
        guard_form = GuardOffForm(initial={"reason": typed_reason} if typed_reason else None)
    if revert_form is None:
        revert_form = RevertForm(initial=initial("revert", reason=live.revert_reason))
    if extend_form is None:
        extend_form = ExtendForm(initial=initial("extend"))
    if shorten_form is None:
        shorten_form = ShortenForm(initial=initial("shorten", shorten=True))
    if drill_form is None:
        typed_drill = {key: typed[key] for key in DrillForm.base_fields if typed.get(key)}
        if typed_into != "drill_start":
            typed_drill = {}
        drill_form = _drill_form(selection, initial=typed_drill)
    drills_now, drills_recent = _drill_items(request, selection.chain, bound=drill_abort)
    plan_presets = plan_preset_choices(presets)
    if plan_form is None:
        kept = ("preset", "zone", "starts_at", "ends_at", "reason")
        plan_form = PlanForm(
            initial={key: typed[key] for key in kept if typed.get(key)} if typed_into == "plan" else None,
            presets=plan_presets,
        )
    focus = _plan_focus(request) if plan_action is None else None
    plan_items = _plan_items(
        request, live, presets=plan_presets, bound=plan_action or focus, focused=focus is not None, now=now
    )
    # Only the lengths the service would accept for this pin are offered (none, when it already
    # ends at the longest allowed, or too soon to end earlier).
    left = selection.expires_at - now if selection.expires_at is not None else None
    can_extend = left is not None and extend_form.fit_to(left)
    can_shorten = left is not None and shorten_form.fit_to(left)
    forms = (
        select_form,
        revert_form,
        extend_form,
        shorten_form,
        plan_form,
        guard_form,
        drill_form,
        *(plan_action[2:] if plan_action else ()),
        *(drill_abort[1:] if drill_abort else ()),
    )
    refused_form = next((form for form in forms if form.errors), None)
    # The reason box takes the focus when the person came to pin (a preset chosen on the
    # dashboard, an alert's link, or an error to fix); after signing in again, the form that
    # holds what they typed before the session expired. Never on a plain visit: on a phone the
    # pin form is far down, and the page must open at its top (the live card, what a guard did).
    typed_form = {"revert": revert_form, "extend": extend_form, "shorten": shorten_form}.get(typed_into)
    if typed_form is not None and live.is_pinned:
        typed_form.fields["reason"].widget.attrs["autofocus"] = True
    elif typed_into == "plan" or plan_form.is_bound:
        plan_form.fields["reason"].widget.attrs["autofocus"] = True
    elif typed_into == "guard_off" or guard_form.is_bound:
        guard_form.fields["reason"].widget.attrs["autofocus"] = True
    elif typed_into == "drill_start" or drill_form.is_bound:
        drill_form.fields["reason"].widget.attrs["autofocus"] = True
    elif drill_abort is not None:
        drill_abort[1].fields["reason"].widget.attrs["autofocus"] = True
    elif focus is not None or plan_action is not None:
        pass  # the plan's form the person came to (``_plan_items``)
    elif chosen or from_alert or select_form.is_bound or typed_into == "select":
        select_form.fields["reason"].widget.attrs["autofocus"] = True
    last_drills = fleet_drills.last_drills(selection.chain)
    choices = preset_choices(
        presets,
        selection,
        warn=idle_head_warnings(selection.chain),
        health=health,
        last_drills=last_drills,
    )
    context = {
        "live": live,
        "suggestion": suggestion,
        "choices": choices,
        "pinnable": any(not c.is_live for c in choices),
        "default_preset": selection.chain.default_preset,
        "select_form": select_form,
        "revert_form": revert_form,
        "extend_form": extend_form,
        "shorten_form": shorten_form,
        "chosen": select_form["preset"].value() or "",
        "can_extend": can_extend,
        "can_shorten": can_shorten,
        "longest_pin": format_minutes(settings.PIN_MAX_MINUTES),
        "plan_form": plan_form,
        "guard_form": guard_form,
        **_guard_context(selection),
        "plans": plan_items,
        "plans_ahead": _plans_ahead(
            [item.plan for item in plan_items if item.plan.is_holding],
            waiting={item.plan.pk: item.waiting for item in plan_items if item.waiting},
        ).get(selection.chain_id, []),
        "drill_form": drill_form,
        "drills_now": drills_now,
        "drills_recent": drills_recent,
        # Every reviewed preset, the default first, with its last drill (None: never drilled).
        "preset_drills": [
            (p.name, p.is_default, last_drills.get(p.name)) for p in sorted(presets, key=lambda p: not p.is_default)
        ],
        # A refused change's errors, summed up at the top of the page and focused there.
        "refused_form": refused_form,
        "refresh": "notice",
        **_spend_context(selection, health, now=now),
    }
    return render_page(request, "presets/chain.html", context, status=status)


def _card_spend(selection: Selection, health: HealthMap, *, now: datetime) -> str | None:
    """A dashboard card's spend line: the live steps' pace now, when they served in the last hour."""
    live = [(step["provider"], step["model"]) for step in selection.steps]
    steps = [health[key] for key in dict.fromkeys(live) if key in health]
    if not any(step["hour"]["served"] for step in steps):
        return None
    return spend.chain_spend(selection.chain, steps, live_head=live[0], now=now, hours=False)["summary"]


def _spend_context(selection: Selection, health: HealthMap, *, now: datetime) -> dict[str, Any]:
    """The chain's spend per step (the live steps first, then any other reported in the last
    hour) and its plot over the last hours; ``health``: the page's, read once."""
    live = [(step["provider"], step["model"]) for step in selection.steps]
    reported = provider_health.chain_health(selection.chain, first=live, now=now, known=health)
    found = spend.chain_spend(selection.chain, reported, live_head=live[0] if live else None, now=now)
    bound = selection.spend_bound_per_hour if selection.is_pinned else None
    return {"spend": found, "spend_plot": plots.spend_figure(found), "spend_bound": bound}


def _guard_context(selection: Selection) -> dict[str, Any]:
    """The live pin's guard (``guard``, whatever its state; ``guarded`` while it watches) and,
    while the chain serves what a guard restored (nothing changed since), that guard
    (``guard_acted``)."""
    guard = guards.live_guard(chain=selection.chain.name, environment=selection.chain.environment)
    acted = (
        PinGuard.objects.filter(chain_id=selection.chain_id, state=GuardState.ACTED, acted_version=selection.version)
        .select_related("pin_preset")
        .first()
    )
    return {
        "guard": guard,
        "guarded": guard is not None and guard.state == GuardState.WATCHING,
        "guard_acted": acted,
    }


def _card_guards(
    selections: list[Selection], starts: dict[int, PinStart | None]
) -> tuple[set[int], dict[int, PinGuard]]:
    """The dashboard's guards in one query: the chains whose live pin's guard is watching, and
    by chain the guard whose restore is the live version (nothing changed since it acted).

    A pin starts at its select or restore (``starts``, as the cards read them). A presets sync
    of a pinned chain also ends its guard (``guards.pin_start``): the beat settles it within
    GUARD_EVERY_SECONDS, and the card shows it guarded until then."""
    wanted = Q()
    for s in selections:
        start = starts.get(s.chain_id)
        if s.is_pinned and start is not None:
            wanted |= Q(chain_id=s.chain_id, pin_version=start.version, state=GuardState.WATCHING)
        wanted |= Q(chain_id=s.chain_id, acted_version=s.version, state=GuardState.ACTED)
    if not wanted:
        return set(), {}
    watching, acted = set(), {}
    for guard in PinGuard.objects.filter(wanted).select_related("pin_preset"):
        if guard.state == GuardState.WATCHING:
            watching.add(guard.chain_id)
        else:
            acted[guard.chain_id] = guard
    return watching, acted


def _typed_before_sign_in(request: HttpRequest, name: str) -> tuple[str, dict[str, str]]:
    """Which of this chain's change forms held what was typed before the session expired
    (kept by ``_nothing_changed`` once signed in again), and its fields: once, then forgotten."""
    prefill = request.session.get(PREFILL)
    if request.method != "GET" or prefill is None or prefill["chain"] != name:
        return "", {}
    del request.session[PREFILL]
    typed = {key: values[0] for key, values in prefill["data"].items() if values}
    if prefill["kind"] == "extend" and typed.get("shorten") == "true":
        return "shorten", typed
    return prefill["kind"], typed


PLAN_ACTIONS = ("start", "cancel", "change")


def _plan_focus(request: HttpRequest) -> tuple[int, str, None] | None:
    """The plan and the form the person came to (``?plan=3&action=start``, from an alert or
    a chain's card), if any."""
    plan, action = request.GET.get("plan", ""), request.GET.get("action", "")
    if not plan.isdigit() or action not in PLAN_ACTIONS:
        return None
    return int(plan), action, None


def _plan_items(
    request: HttpRequest,
    live: LiveState,
    *,
    presets: list[tuple[str, str]],
    bound: tuple[int, str, ReasonForm | None] | None,
    focused: bool,
    now: datetime,
) -> list[PlanItem]:
    """The chain's plans, latest start first, each with its history and, for someone on
    call, its forms: ``bound`` is the plan and form a refused change sent back (or the one the
    person came to, ``focused``: its reason takes the focus)."""
    oncall = can_change(request.user)
    items = []
    for held in plans.recent_plans(chain=live.chain, environment=live.selection.chain.environment):
        forms: dict[str, ReasonForm] = {}
        replaces, blocked = "", ""
        # Why it still waits, worked out on the chain now; why it was suspended then is its history.
        waiting = plans.why_waiting(held, live.selection, now=now) if held.state == PlanState.SUSPENDED else ""
        if oncall and held.state in (PlanState.PLANNED, PlanState.SUSPENDED):
            change = PlanChangeForm(
                initial={
                    "preset": held.preset.name,
                    "zone": UTC_ZONE,
                    "starts_at": wall_time(held.starts_at),
                    "ends_at": wall_time(held.ends_at),
                },
                presets=presets,
                auto_id=f"plan{held.pk}_change_%s",
            )
            change.show_instants(held.starts_at, held.ends_at)
            forms = {"change": change, "cancel": _settle_form(held.pk, "cancel")}
            if held.state == PlanState.SUSPENDED:
                forms["start"] = _settle_form(held.pk, "start")
                replaces, blocked = start_words(held, live, now=now)
        opened = ""
        if bound is not None and bound[0] == held.pk:
            opened = bound[1]
            if bound[2] is not None:
                forms[opened] = bound[2]
            elif opened in forms and focused:
                forms[opened].fields["reason"].widget.attrs["autofocus"] = True
        items.append(
            PlanItem(
                plan=held,
                summary=plans.describe(held),
                events=list(held.events.all()),
                replaces=replaces,
                waiting=waiting,
                start_blocked=blocked,
                forms=forms,
                open=opened,
            )
        )
    return items


def _alerts_context(environment: str) -> dict[str, Any]:
    """Every open alert of ``environment``'s chains however old (a condition still going on),
    then the recent rest; the latest change notifications and where each was sent."""
    now = timezone.now()
    still_open = recent_alerts(limit=OPEN_ALERTS_MAX, open_only=True, environment=environment)
    shown = {alert.pk for alert in still_open}
    recent = recent_alerts(limit=ALERTS_PAGE_SIZE, environment=environment)
    alerts = still_open + [a for a in recent if a.pk not in shown]
    return {
        "alerts": alerts,
        # Each alert's words as of now (how long, the figures now), not those frozen when raised.
        "alert_texts": alert_texts(alerts, now=now),
        "alert_actions": _alert_actions(still_open, now=now),
        "notifications": recent_notifications(limit=CHANGE_NOTIFICATIONS_SHOWN, kind="change", environment=environment),
        "changes_notified": changes_notified(),
        # Provider alerts not raised because their evidence came from too few tokens, and why.
        "held": [
            (name, held)
            for label, alerts in provider_health.alert_evidence(now=now).held.items()
            for held in alerts
            if (name := _chain_in(environment, label)) is not None
        ],
    }


def _chain_in(environment: str, label: str) -> str | None:
    """The name of the chain ``label`` names (``staging/chat``, as lists of every
    environment's chains name it) when it is one of ``environment``'s, else None: a page of
    one environment lists its own chains, each by its name."""
    found, name = environments.from_label(label)
    return name if found == environment else None


def _failing_in(environment: str, *, now: datetime) -> list[provider_health.Failing]:
    """The steps failing now on ``environment``'s chains, each with its chain's name."""
    return [
        replace(step, chain=name)
        for step in provider_health.failing_steps(now=now)
        if (name := _chain_in(environment, step.chain)) is not None
    ]


def _alert_actions(still_open: list[Alert], *, now: datetime) -> dict[int, list[ActionLink]]:
    """What each open alert suggests doing, by id: the actions its notifications offered
    (``actions.for_alert``, Slack's buttons), each a link to its review, prefilled. The page
    dates the links it makes: an alert still open after a deep link's age limit
    (``DEEP_LINK_MAX_AGE_HOURS``) still offers its actions; the review checks the chain's
    version, as every change does."""
    at = int(now.timestamp())
    return {
        alert.pk: [
            ActionLink(
                label=action.label,
                href=reverse("act", args=[actions.link_token(replace(action, at=at))]),
                caution=action.kind == actions.REVERT,
            )
            for action in actions.for_alert(alert)
        ]
        for alert in still_open
    }


def _health(
    selection: Selection, presets: list[Preset], *, now: Any, health: HealthMap | None = None
) -> tuple[HealthMap, provider_health.Suggestion | None]:
    """The fleet's health of the live steps and of every reviewed preset's (one read, unless
    given), and the preset to consider if the live head is failing (shown, never applied)."""
    if health is None:
        health = provider_health.health_by_step(
            selection.chain, [selection.steps, *(p.steps for p in presets)], now=now
        )
    return health, provider_health.healthiest_preset(presets, health, live=selection.preset.name)


def _require_oncall(request: HttpRequest) -> None:
    if not can_change(request.user):
        raise PermissionDenied(f"changing a selection needs the {ONCALL_GROUP} role")
