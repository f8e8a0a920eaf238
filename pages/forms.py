"""The on-call pages' forms. They check type and shape only: every rule (a reason is required,
how long a pin may last, which presets may be selected) lives in ``presets.services``, and the
views put a service's ``InvalidInput`` onto the field it names (``add_service_error``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from pages.display import format_minutes
from presets.exceptions import InvalidInput
from presets.models import PRESET_NAME_MAX
from presets.services import REASON_MAX
from presets.wording import SHORTEN_IN_API, Phrase, for_people

# Offered pin lengths; the configured default and maximum are always among them.
DURATION_STEPS = (30, 60, 120, 240, 480, 720, 1440)
# Expiries this close are one (the pages show minutes): no length is offered that would move a
# pin's end by less.
SAME_MINUTE = timedelta(minutes=1)


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


class ChangeForm(forms.Form):
    """What every change posts: why, the version the person saw, and whether they confirmed."""

    # Not required here: the service's rule (stripped, 1..500 characters) gives the message.
    reason = forms.CharField(
        required=False,
        strip=False,
        widget=ReasonInput,
        label="Reason",
        help_text="Why, for whoever reads the history later: the incident and what you saw.",
    )
    # The version on the page when it was loaded: the service refuses the change (a conflict)
    # when the chain moved meanwhile, so nobody overwrites a change they have not seen.
    expected_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    # Several change forms share the chain page: each prefixes its field ids.
    field_ids = "id_%s"
    # The error summary's heading when the change is refused: what did not happen.
    not_done = "Nothing was changed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", self.field_ids)
        super().__init__(*args, **kwargs)

    def add_service_error(self, error: InvalidInput) -> None:
        """Show a service's refusal on the field it names, or above the form, in the pages'
        words (``presets.wording``: "04:15 UTC (in 2 h)", "24 h", the button to use)."""
        field = {"expires_at": "duration_minutes"}.get(error.field, error.field)
        message = for_people(error.field_message, now=timezone.now(), phrases=PAGE_WORDS)
        self.add_error(field if field in self.fields else None, message)


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


class SelectForm(DurationMixin, ChangeForm):
    """Pin one of the chain's reviewed presets."""

    preset = forms.SlugField(
        max_length=PRESET_NAME_MAX, label="Preset", error_messages={"required": "choose one of the presets"}
    )
    field_order = ["preset", "duration_minutes", "reason"]
    not_done = "Nothing was pinned"


class ExtendForm(DurationMixin, ChangeForm):
    """Keep the live pin for longer: for a chosen time counted from now, or (the quick "+1 h"
    buttons) by adding ``add_minutes`` to its current expiry. Never shorter: the service
    refuses an earlier expiry, which is ``ShortenForm``'s job."""

    field_ids = "extend_%s"
    not_done = "The pin was not extended"
    add_minutes = forms.IntegerField(min_value=1, required=False, widget=forms.HiddenInput)
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
        if data.get("add_minutes") is None and data.get("duration_minutes") is None:
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
