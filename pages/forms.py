"""The on-call pages' forms. They check type and shape only: every rule (a reason is required,
how long a pin may last, which presets may be selected) lives in ``presets.services``, and the
views put a service's ``InvalidInput`` onto the field it names (``add_service_error``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django import forms
from django.conf import settings
from django.utils import timezone

from pages.display import format_minutes
from presets.documents import format_time
from presets.exceptions import InvalidInput
from presets.models import PRESET_NAME_MAX
from presets.services import REASON_MAX, SPEND_BOUND_ERRORS
from presets.wording import SHORTEN_IN_API, Phrase, for_people

# Offered pin lengths; the configured default and maximum are always among them.
DURATION_STEPS = (30, 60, 120, 240, 480, 720, 1440)
# Expiries this close are one (the pages show minutes): no length is offered that would move a
# pin's end by less.
SAME_MINUTE = timedelta(minutes=1)
# What a field's error says when a NUL comes with the text (pasted from a terminal, say): no field takes one.
NOT_TEXT = "holds a NUL character, which is not text: type it again"
# A form's hidden fields say which page sent it; wrong, that page is out of date (``_errors.html``).
PAGE_VERSION_ERRORS = {
    "required": "the page did not say which version of the chain it showed",
    "invalid": "the page's version of the chain is not a whole number",
    "min_value": "the page's version of the chain is not a whole number",
}
PRESET_ERRORS = {
    "required": "choose one of the presets",
    "invalid": "that is not one of the presets: choose one on the page",
    "max_length": "that is not one of the presets: choose one on the page",
}


def duration_choices() -> list[tuple[int, str]]:
    default, longest = settings.PIN_DEFAULT_MINUTES, settings.PIN_MAX_MINUTES
    minutes = sorted({m for m in DURATION_STEPS if m <= longest} | {default, longest})
    labels = []
    for m in minutes:
        label = format_minutes(m)
        if m == default:
            label += " (default)"
        elif m == longest:
            label += " (longest allowed)"
        labels.append((m, label))
    return labels


class ReasonInput(forms.TextInput):
    """A reason is typed on a phone at 02:00: no autocorrect, and the service's limit shown."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(
            {
                "autocomplete": "off",
                "autocapitalize": "off",
                "spellcheck": "false",
                "maxlength": str(REASON_MAX),
                "aria-required": "true",
                **(attrs or {}),
            }
        )


class ReasonForm(forms.Form):
    """What every change posts: why. A service's refusal goes onto the field it names."""

    # Not required here: the service's rule (stripped, 1..500 characters) gives the message.
    reason = forms.CharField(
        required=False,
        strip=False,
        widget=ReasonInput,
        label="Reason",
        help_text="Why, for whoever reads the history later: the incident and what you saw.",
    )
    # Several change forms share the chain page: each prefixes its field ids.
    field_ids = "id_%s"
    # The error summary's heading when the change is refused: what did not happen.
    not_done = "Nothing was changed"
    # The service's names of fields this form names otherwise.
    service_fields: dict[str, str] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", self.field_ids)
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.error_messages.setdefault("null_characters_not_allowed", NOT_TEXT)

    def add_service_error(self, error: InvalidInput) -> None:
        """Show a service's refusal on the field it names, or above the form, in the pages'
        words (``presets.wording``: "04:15 UTC (in 2 h)", "24 h", the button to use)."""
        field = self.service_fields.get(error.field, error.field)
        message = for_people(error.field_message, now=timezone.now(), phrases=PAGE_WORDS)
        self.add_error(field if field in self.fields else None, message)


class ChangeForm(ReasonForm):
    """What every change of the live selection posts: why, the version the person saw, and
    whether they confirmed."""

    # The version on the page when it was loaded: the service refuses the change (a conflict)
    # when the chain moved meanwhile, so nobody overwrites a change they have not seen.
    expected_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput, error_messages=PAGE_VERSION_ERRORS)
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    service_fields = {"expires_at": "duration_minutes"}


# Where the services name the API's way (a JSON field), the pages name their button.
PAGE_WORDS: list[Phrase] = [(SHORTEN_IN_API, lambda match: 'use "End the pin earlier" on the chain page')]


class DurationMixin(forms.Form):
    duration_minutes = forms.IntegerField(
        min_value=1,
        widget=forms.Select,
        label="Pin for",
        help_text="Then the chain goes back to its default by itself.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["duration_minutes"]
        field.widget.choices = duration_choices()
        field.initial = settings.PIN_DEFAULT_MINUTES
        # Only an edited page sends another value than the list's; the service's rule is the
        # longest pin (a longer one is refused in its words).
        self.set_minutes_errors(
            f"give a whole number of minutes from 1 to {settings.PIN_MAX_MINUTES}, e.g. {settings.PIN_DEFAULT_MINUTES}"
        )

    def set_minutes_errors(self, words: str) -> None:
        """What a length that is not a whole number of minutes, at least 1, is told."""
        field = self.fields["duration_minutes"]
        field.error_messages = {
            **field.error_messages,
            "required": "choose how long",
            "invalid": words,
            "min_value": words,
        }


class SelectForm(DurationMixin, ChangeForm):
    """Pin one of the chain's reviewed presets, guarded or not (``guard_of``)."""

    preset = forms.SlugField(max_length=PRESET_NAME_MAX, label="Preset", error_messages=PRESET_ERRORS)
    guard = forms.BooleanField(required=False, label="Guard this pin")
    # The box was on the form: unticked means no guard. A post without it: the setting decides.
    guard_asked = forms.BooleanField(required=False, widget=forms.HiddenInput)
    spend_bound_per_hour = forms.DecimalField(
        required=False,
        min_value=Decimal("0.01"),
        max_digits=12,
        decimal_places=2,
        label="Spend bound, an hour (optional)",
        help_text="A spend alert if the chain's spend passes this much an hour while the pin is live, in the "
        "provider registry's currency. Empty: none.",
        error_messages=SPEND_BOUND_ERRORS,
    )
    field_order = ["preset", "duration_minutes", "guard", "spend_bound_per_hour", "reason"]
    not_done = "Nothing was pinned"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["guard"].help_text = (
            f"For its first {format_minutes(settings.GUARD_BAKE_MINUTES)}: if the fleet finds the pin's first step "
            "clearly worse than the one it replaces was, what is live now is restored, once, and everyone is told. "
            "A pin that keeps the first step gets no guard."
        )

    @staticmethod
    def guard_of(data: dict[str, Any]) -> bool | None:
        """The guard asked for in ``data`` (cleaned): the box, or None (the setting decides)
        when the form that posted had no box."""
        return bool(data.get("guard")) if data.get("guard_asked") else None


class GuardOffForm(ReasonForm):
    """Switch the live pin's guard off: why."""

    field_ids = "guard_%s"
    not_done = "The guard was not switched off"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].help_text = "Why the guard must not undo this pin (e.g. the new head is slow on purpose)."


class ExtendForm(DurationMixin, ChangeForm):
    """Keep the live pin for longer: for a chosen time counted from now, or (the quick "+1 h"
    buttons) by adding ``add_minutes`` to its current expiry. Never shorter: the service
    refuses an earlier expiry, which is ``ShortenForm``'s job."""

    field_ids = "extend_%s"
    not_done = "The pin was not extended"
    add_minutes = forms.IntegerField(
        min_value=1,
        required=False,
        widget=forms.HiddenInput,
        error_messages={
            "invalid": "the minutes to add are not a whole number",
            "min_value": "the minutes to add are fewer than 1",
        },
    )
    shorten = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        duration = self.fields["duration_minutes"]
        duration.required = False
        duration.label = "Keep it pinned for"
        duration.help_text = "Counted from now; it must end later than it ends now."
        self.fields["reason"].help_text = "Why it must stay pinned longer."

    def clean(self) -> dict[str, Any] | None:
        data = super().clean() or {}
        # One problem, one message: a length the field refused already says what to give.
        if (
            data.get("add_minutes") is None
            and data.get("duration_minutes") is None
            and not self.has_error("duration_minutes")
        ):
            self.add_error("duration_minutes", "choose how long")
        return data

    def fits(self, minutes: int, left: timedelta) -> bool:
        """Whether a pin with ``left`` to go would end later, ``minutes`` from now."""
        return timedelta(minutes=minutes) > left + SAME_MINUTE

    def fit_to(self, left: timedelta) -> bool:
        """Offer only the lengths the service would accept for a pin with ``left`` to go (none
        that would be refused), the first of them chosen unless the default is among them;
        False when none is left."""
        field = self.fields["duration_minutes"]
        offered = [(m, label) for m, label in field.widget.choices if self.fits(m, left)]
        field.widget.choices = offered
        if field.initial not in {m for m, _ in offered}:
            field.initial = offered[0][0] if offered else None
        return bool(offered)


# How soon "End the pin earlier" may end it.
SHORTEN_STEPS = (15, 30, 60, 120)


class ShortenForm(ExtendForm):
    """End the live pin earlier than planned, on purpose (then the default serves again)."""

    field_ids = "shorten_%s"
    not_done = "The pin was not shortened"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        duration = self.fields["duration_minutes"]
        duration.widget.choices = [(m, format_minutes(m)) for m in SHORTEN_STEPS]
        duration.initial = SHORTEN_STEPS[0]
        duration.label = "End it in"
        duration.help_text = "Counted from now; it must be before the pin ends now. To end it now, revert."
        self.set_minutes_errors(f"give a whole number of minutes, at least 1, e.g. {SHORTEN_STEPS[0]}")
        self.fields["shorten"].initial = True
        self.fields["reason"].help_text = "Why the pin can end sooner."

    def fits(self, minutes: int, left: timedelta) -> bool:
        """Whether a pin with ``left`` to go would end sooner, ``minutes`` from now."""
        return timedelta(minutes=minutes) < left - SAME_MINUTE


class RevertForm(ChangeForm):
    """End the pin: serve the default preset again."""

    field_ids = "revert_%s"
    not_done = "Nothing was reverted"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].help_text = "Prefilled; edit it to say why the pin can end."


class RestoreForm(ChangeForm):
    """Undo one history entry: make its previous value live again."""

    field_ids = "restore_%s"
    not_done = "Nothing was restored"


# --- planned pins ---------------------------------------------------------------------------

UTC_ZONE = "UTC"
# A zone's IANA name is short ("America/Argentina/ComodRivadavia" is among the longest).
ZONE_NAME_MAX = 64


def zone_named(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, as a browser names its own; ValueError if there is none."""
    if not name or len(name) > ZONE_NAME_MAX:
        raise ValueError(f"no time zone named {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"no time zone named {name!r}: choose UTC") from None


def wall_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant at which a clock in ``zone`` shows ``wall`` (in UTC). Refused, in words, when
    that clock never shows it (the clocks go forward past it) or shows it twice (they go back):
    a plan must not start an hour off because of a guess. A ``wall`` with an offset is taken
    as it says."""
    if wall.tzinfo is not None:
        return wall.astimezone(UTC)
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first.astimezone(UTC)
    day = f"{wall:%a %d %b %Y}"
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
        raise ValueError(
            f"{wall:%H:%M} does not exist on {day} in {zone.key}: the clocks go forward then; "
            "choose a time before or after the change"
        )
    raise ValueError(f"{wall:%H:%M} happens twice on {day} in {zone.key} (the clocks go back then): give it in UTC")


def wall_time(value: datetime) -> str:
    """``value`` in UTC as a ``datetime-local`` input shows it: 2027-03-14T06:00."""
    value = value.astimezone(UTC)
    return f"{value:%Y-%m-%dT%H:%M}" if not value.second else f"{value:%Y-%m-%dT%H:%M:%S}"


class WallTimeField(forms.Field):
    """A date and time as a ``datetime-local`` input sends it (``2027-03-14T01:30``), read later
    on the clock the form's zone names (``PlanForm.clean``); an ISO offset typed is honoured."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local", "step": "60"})
    default_error_messages = {"invalid": "not a date and time: use YYYY-MM-DDTHH:MM, e.g. 2026-12-10T02:00"}

    def to_python(self, value: Any) -> datetime | None:
        text = str(value).strip() if value is not None else ""
        if not text:
            return None
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None


class WallClockForm(ReasonForm):
    """A form whose times (``time_fields``) are typed on the clock of ``zone``: UTC, or the
    browser's own zone (which the script offers). It turns them into instants; every rule
    about them is the service's."""

    zone = forms.CharField(
        required=False,
        max_length=ZONE_NAME_MAX,
        label="Times are in",
        widget=forms.Select,
        error_messages={"max_length": "that is not a time zone: choose UTC"},
        help_text="The clock the start and the end are read on: UTC, or this browser's time zone.",
    )
    time_fields: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["zone"].initial = UTC_ZONE
        zone = str(self["zone"].value() or UTC_ZONE)
        zones = [(UTC_ZONE, UTC_ZONE)]
        if zone != UTC_ZONE and len(zone) <= ZONE_NAME_MAX:
            zones.append((zone, zone))  # as it was posted; the script names the browser's own
        self.fields["zone"].widget.choices = zones

    def clean_zone(self) -> ZoneInfo:
        try:
            return zone_named(self.cleaned_data.get("zone") or UTC_ZONE)
        except ValueError as error:
            raise forms.ValidationError(str(error), code="invalid") from None

    def clean(self) -> dict[str, Any] | None:
        data = super().clean() or {}
        zone = data.get("zone")
        if zone is None:
            return data
        for name in self.time_fields:
            wall = data.get(name)
            if wall is None:
                continue
            try:
                data[name] = wall_to_utc(wall, zone)
            except ValueError as error:
                self.add_error(name, str(error))
        return data


class PlanForm(WallClockForm):
    """Plan a pin of one of the chain's reviewed presets, from a start to an end given on the
    clock of ``zone`` (``WallClockForm``); every rule about the window is the service's
    (``presets.plans``)."""

    preset = forms.SlugField(
        max_length=PRESET_NAME_MAX,
        label="Preset",
        widget=forms.Select,
        error_messages=PRESET_ERRORS,
    )
    starts_at = WallTimeField(label="Start", error_messages={"required": "give the start"})
    ends_at = WallTimeField(label="End", error_messages={"required": "give the end"})
    field_ids = "plan_%s"
    not_done = "Nothing was planned"
    field_order = ["preset", "zone", "starts_at", "ends_at", "reason"]
    time_fields = ("starts_at", "ends_at")

    def __init__(self, *args: Any, presets: list[tuple[str, str]], **kwargs: Any) -> None:
        """``presets``: the (name, label) of each preset one may plan."""
        super().__init__(*args, **kwargs)
        self.fields["preset"].widget.choices = [("", "Choose a preset"), *presets]
        self.fields["reason"].help_text = "Why, for whoever reads the plan later: the maintenance or incident."

    def show_instants(self, starts_at: datetime, ends_at: datetime) -> None:
        """Mark the unbound inputs with the instants they show in UTC, for the script to show
        them on the browser's clock instead."""
        self.fields["starts_at"].widget.attrs["data-instant"] = format_time(starts_at)
        self.fields["ends_at"].widget.attrs["data-instant"] = format_time(ends_at)


class PlanChangeForm(PlanForm):
    """Change a plan not started yet: its preset, start or end (prefilled), and why."""

    not_done = "The plan was not changed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].help_text = "Why the plan changes."


class PlanSettleForm(ReasonForm):
    """Cancel a plan, or start a suspended one anyway: why (and, to start it, the version of
    the chain the person saw what it replaces on)."""

    expected_version = forms.IntegerField(
        min_value=0, required=False, widget=forms.HiddenInput, error_messages=PAGE_VERSION_ERRORS
    )

    def __init__(self, *args: Any, not_done: str, help_text: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.not_done = not_done
        self.fields["reason"].help_text = help_text


# --- failover drills --------------------------------------------------------------------------


class NumberText(forms.TextInput):
    """A number typed on a phone: the numeric keyboard, no autocorrect; the service checks it."""

    def __init__(self, *, decimal: bool = False) -> None:
        super().__init__({"inputmode": "decimal" if decimal else "numeric", "autocomplete": "off"})


class DrillForm(WallClockForm):
    """Start a failover drill on the chain now, or plan it (``starts_at``, read on the clock
    of ``zone``): the hop to fail, the fault, the share of requests, the services, how long,
    how often it repeats, and why. Every rule is the service's (``presets.drills``); the form
    passes what was typed on, and the service names the field it refuses."""

    hop = forms.CharField(label="Hop to fail", widget=forms.Select, error_messages={"required": "choose the hop"})
    fault = forms.CharField(label="Fault", widget=forms.Select, error_messages={"required": "choose the fault"})
    share = forms.CharField(
        label="Share of requests, in %",
        widget=NumberText(decimal=True),
        error_messages={"required": "give the share of requests to drill, in percent"},
    )
    services = forms.CharField(
        required=False,
        label="Services",
        widget=forms.TextInput(attrs={"autocomplete": "off", "autocapitalize": "off", "spellcheck": "false"}),
        help_text="Their tokens' names, separated by commas. Empty: every service that reads the chain.",
    )
    minutes = forms.CharField(
        label="Minutes",
        widget=NumberText(),
        error_messages={"required": "give how many minutes it runs"},
    )
    starts_at = WallTimeField(required=False, label="Start")
    repeat_days = forms.CharField(
        required=False,
        label="Repeat every (days)",
        widget=NumberText(),
        help_text="Empty: once. Each next one is planned when one ends, this many days after its start.",
    )
    field_ids = "drill_%s"
    not_done = "No drill was started"
    field_order = ["hop", "fault", "share", "services", "minutes", "zone", "starts_at", "repeat_days", "reason"]
    time_fields = ("starts_at",)
    # The service's names of the fields the form names otherwise.
    service_fields = {"start": "starts_at"}

    def __init__(
        self, *args: Any, hops: list[tuple[str, str]], faults: list[tuple[str, str]], longest: int, **kwargs: Any
    ) -> None:
        """``hops``: the (number, label) of each hop one may fail; ``faults`` likewise;
        ``longest``: the longest drill, in minutes."""
        super().__init__(*args, **kwargs)
        self.fields["hop"].widget.choices = hops
        self.fields[
            "hop"
        ].help_text = (
            "Its requests fail on purpose before they are sent (it gets no call), so the next hop serves them."
        )
        self.fields["fault"].widget.choices = faults
        self.fields["fault"].initial = faults[0][0] if faults else None
        self.fields["share"].initial = "10"
        self.fields["share"].help_text = "From 0.1 % to 25 %: that share of the chain's requests is drilled."
        self.fields["minutes"].initial = "15"
        self.fields["minutes"].help_text = f"How long it runs: at most {format_minutes(longest)}."
        self.fields["starts_at"].help_text = "Empty: now. A later time plans it; it starts by itself then."
        self.fields["zone"].help_text = "The clock the start is read on: UTC, or this browser's time zone."
        self.fields["reason"].help_text = "Why, for whoever reads the history and the report later."

    @staticmethod
    def service_names(text: str) -> list[str]:
        """The token names typed, separated by commas or spaces."""
        return [name for name in text.replace(",", " ").split() if name]


class DrillAbortForm(ReasonForm):
    """Abort a running drill, or cancel a planned one: why. ``back``: the page it was sent
    from (the chain's or the drill's report), where it is shown again."""

    back = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, drill: int, planned: bool, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", f"drill{drill}_abort_%s")
        super().__init__(*args, **kwargs)
        self.not_done = f"Drill #{drill} was not {'cancelled' if planned else 'aborted'}"
        self.fields["reason"].help_text = (
            "Prefilled; edit it to say why it must not start." if planned else "Prefilled; edit it to say what you saw."
        )
        self.fields["reason"].initial = "not needed any more" if planned else "stopped by hand"
