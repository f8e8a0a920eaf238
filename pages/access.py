"""The access history page (``/access/``): every token issued or revoked and every role or
flag given or taken, newest first, with who did it. Staff and on-call engineers may see it
(``roles.can_see_access``), a viewer is told so and someone without a role gets the no-role
page; the list pages by keyset (``older_than``, a change's id), and
``subject`` narrows it to one person or token (a link on each row)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from pages.display import format_clock
from pages.layout import no_role_page, render_page
from presets.access_history import access_entry, access_page
from presets.exceptions import InvalidInput
from presets.models import AccessAction
from presets.roles import can_see_access, can_view

ACCESS_PAGE_SIZE = 50
CURSOR_MAX = 2**63 - 1  # AccessChange ids are bigints

# How each action reads on the page.
ACTION_WORDS = {
    AccessAction.TOKEN_CREATED: "token created",
    AccessAction.TOKEN_REVOKED: "token revoked",
    AccessAction.ROLE_GRANTED: "role granted",
    AccessAction.ROLE_REVOKED: "role taken away",
    AccessAction.USER_CREATED: "person added",
    AccessAction.USER_DEACTIVATED: "person deactivated",
    AccessAction.USER_REACTIVATED: "person reactivated",
    AccessAction.USER_DELETED: "person deleted",
    AccessAction.STAFF_GRANTED: "made staff",
    AccessAction.STAFF_REVOKED: "staff taken away",
    AccessAction.SUPERUSER_GRANTED: "made superuser",
    AccessAction.SUPERUSER_REVOKED: "superuser taken away",
    AccessAction.IDENTITY_LINKED: "sign-in identity linked",
    AccessAction.IDENTITY_UNLINKED: "sign-in identity unlinked",
    AccessAction.KEY_CREATED: "signing key created",
    AccessAction.KEY_ACTIVATED: "signing key now signs",
    AccessAction.KEY_RETIRED: "signing key retired",
    AccessAction.KEY_RESEALED: "signing key resealed with a new secret",
}


class AccessFilterForm(forms.Form):
    subject = forms.CharField(required=False, max_length=150)
    older_than = forms.IntegerField(required=False, min_value=1, max_value=CURSOR_MAX)


@require_safe
@login_required
def access_history(request: HttpRequest) -> HttpResponse:
    """Every access change, newest first."""
    if not can_see_access(request.user):
        if not can_view(request.user):
            return no_role_page(request)
        refusal = {"message": "The access history is for staff and on-call engineers. Nothing was changed."}
        return render_page(request, "presets/access_denied.html", refusal, status=403)
    form = AccessFilterForm(request.GET)
    problems: list[str] = []
    page = None
    if form.is_valid():
        subject = form.cleaned_data["subject"] or None
        try:
            page = access_page(subject=subject, older_than=form.cleaned_data["older_than"], size=ACCESS_PAGE_SIZE)
        except InvalidInput as error:
            problems.append(error.field_message)
    else:
        problems = [f"{name}: {error}" for name, errors in form.errors.items() for error in errors]
    if page is None:
        return render_page(request, "presets/access.html", {"problems": problems}, status=400)
    params = {"subject": subject} if subject else {}
    context: dict[str, Any] = {
        "subject": subject,
        "items": [_item(row, now=timezone.now()) for row in page.rows],
        "paged": form.cleaned_data["older_than"] is not None,
        "newest_url": _link(request, params),
        "older_url": _link(request, {**params, "older_than": page.older_than}) if page.older_than else None,
        "all_url": request.path,
    }
    return render_page(request, "presets/access.html", context)


def _item(row: Any, *, now: datetime) -> dict[str, Any]:
    entry = access_entry(row)
    return {
        "entry": entry,
        "words": ACTION_WORDS.get(AccessAction(entry["action"]), entry["action"]),
        "facts": [_fact(key, value, now=now) for key, value in entry["details"].items() if value is not None],
    }


def _fact(key: str, value: Any, *, now: datetime) -> str:
    """One detail of a change as the page reads it: "scope: write", "expires 06:00 UTC"."""
    if key == "expires_at" and isinstance(value, str):
        return "expires " + format_clock(datetime.fromisoformat(value.replace("Z", "+00:00")), now=now)
    if isinstance(value, bool):
        value = "yes" if value else "no"
    return f"{key.removeprefix('is_')}: {value}"


def _link(request: HttpRequest, params: dict[str, Any]) -> str:
    query = urlencode(params)
    return f"{request.path}?{query}" if query else request.path
