"""Two environments (staging, production) in a real Chromium, at 390x844 in the dark theme and
1280x800 in the light one: each environment's dashboard says which it is (production in the
danger colours, staging calm), the switcher in the top bar leads to the same page in the other,
a pin is made through the pages in each environment and changes that one only, and axe finds
no violation on any of them.

Needs Debian's chromium and axe-core (see tests/browser.py); skipped without them locally,
failed in CI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from presets import services
from presets.models import Selection
from presets.presets_file import load_presets_file
from presets.providers import get_registry
from tests.browser import DANGER, reads_well

pytestmark = pytest.mark.system

REASON = "INC-4411 vendor_a returns 200s with garbage"
# The production band's background in each theme is the danger colour (tests.browser's DANGER);
# staging's is --button-bg.
CALM = {"light": "rgb(232, 237, 245)", "dark": "rgb(38, 48, 61)"}


@pytest.fixture
def open_as(
    open_page: Callable[..., Any], alice: User, example_file: Path, screen: tuple[dict[str, int], str]
) -> Iterator[Callable[..., Any]]:
    """open_as(path): the page on the test's screen, signed in as alice, with two environments:
    production's chains (synced as ``open_page`` syncs them) and staging's."""
    viewport, scheme = screen
    with override_settings(ENVIRONMENTS=["staging", "production"]):
        services.apply_presets(
            presets_file=load_presets_file(example_file, registry=get_registry()), environment="staging"
        )
        yield lambda path: open_page(alice, path, color_scheme=scheme, viewport=viewport)


def live(environment: str) -> Selection:
    return Selection.objects.select_related("preset").get(chain__name="chat", chain__environment=environment)


def background(locator: Any) -> str:
    return str(locator.evaluate("el => getComputedStyle(el).backgroundColor"))


def switcher(page: Any) -> dict[str, str | None]:
    """Each environment the switcher offers, and its aria-current."""
    links = page.get_by_role("navigation", name="Environments").get_by_role("link")
    return {link.inner_text(): link.get_attribute("aria-current") for link in links.all()}


def pin_through_the_pages(page: Any, environment: str, preset: str) -> None:
    """From the dashboard: the chain's card, the preset, a reason, the review (which says the
    environment it changes), the confirmation."""
    prefix = "" if environment == "production" else f"/env/{environment}"
    page.locator("section[data-chain=chat]").get_by_role("link", name=preset).click()
    page.wait_for_url(re.compile(rf"{prefix}/chains/chat/\?preset={preset}$"))
    page.locator("#id_reason").fill(REASON)
    page.get_by_role("button", name="Review and pin…").click()
    page.wait_for_url(re.compile(rf"{prefix}/chains/chat/select\?review="))
    bar = page.locator("form.confirm-bar")
    note = bar.locator(".env-note")
    assert note.is_visible()
    if environment == "production":
        assert note.inner_text() == "PRODUCTION This changes production."
    else:
        assert note.inner_text() == f"{environment.upper()} This changes {environment}, not production."
    reads_well(page, f"{environment}-review")
    bar.get_by_role("button", name=f"Pin {preset} for 4 h").click()
    page.wait_for_url(re.compile(rf"{prefix}/chains/chat/$"))
    assert page.locator(".message-success").inner_text().startswith(f"chat is now v2: {preset}")


def test_each_environment_says_which_it_is_and_a_pin_in_one_never_changes_the_other(
    open_as: Callable[..., Any], screen: tuple[dict[str, int], str]
) -> None:
    scheme = screen[1]
    page = open_as("/")
    band = page.locator("#environment")
    assert band.locator(".env-band-name").inner_text() == "PRODUCTION Changes here reach production's services."
    assert background(band) == DANGER[scheme]
    assert switcher(page) == {"staging": None, "production": "true"}
    assert page.title().startswith("[production] ")
    reads_well(page, "environments-production-dashboard")

    page.get_by_role("navigation", name="Environments").get_by_role("link", name="staging").click()
    page.wait_for_url(re.compile(r"/env/staging/$"))
    band = page.locator("#environment")
    assert band.locator(".env-band-name").inner_text() == (
        "STAGING Not production: changes here reach staging's services only."
    )
    assert background(band) == CALM[scheme]
    assert switcher(page) == {"staging": "true", "production": None}
    reads_well(page, "environments-staging-dashboard")

    pin_through_the_pages(page, "staging", "pin_secondary")
    assert (live("staging").version, live("staging").preset.name) == (2, "pin_secondary")
    assert (live("production").version, live("production").preset.name) == (1, "normal")
    reads_well(page, "environments-staging-chain")

    # The switcher keeps the chain: production's chat, which the staging pin did not touch.
    page.get_by_role("navigation", name="Environments").get_by_role("link", name="production").click()
    page.wait_for_url(re.compile(r"/chains/chat/$"))
    assert page.locator("section[data-chain=chat] .preset-name").first.inner_text() == "normal"
    page.get_by_role("link", name="Dashboard", exact=True).first.click()
    page.wait_for_url(re.compile(r"/$"))

    pin_through_the_pages(page, "production", "drop_vendor_b")
    assert (live("production").version, live("production").preset.name) == (2, "drop_vendor_b")
    assert (live("staging").version, live("staging").preset.name) == (2, "pin_secondary")
    reads_well(page, "environments-production-chain")
