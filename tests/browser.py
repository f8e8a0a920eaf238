"""Real Chromium (Playwright) for the page tests: the browser, a signed-in page on the live
server, axe-core checks and click counting. Test modules import the fixtures they use.

Needs Debian's chromium at /usr/bin/chromium (Playwright cannot download its own browser here)
and axe-core, whose axe.min.js the axe-playwright-python package ships (requirements-dev.txt).
Without them these tests are skipped on a developer's machine and fail in CI (CI=true), where
both must be installed.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import json
import os
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from tests.conftest import needs

# Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
# plain synchronous code, so Django's "called from an async context" guard must stand aside.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
AXE_PACKAGE = "axe_playwright_python"
SCREENSHOT = Path(settings.BASE_DIR) / "docs" / "screenshot.png"
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 860}
# The two screens the on-call pages are tried on: a phone at night, a laptop by day.
SCREENS = {"390x844-dark": (PHONE, "dark"), "1280x800-light": ({"width": 1280, "height": 800}, "light")}
# The danger colour in each theme (the stylesheet's --danger-bg): a destructive confirm button,
# the production band.
DANGER = {"light": "rgb(180, 35, 24)", "dark": "rgb(255, 138, 128)"}
# Where ``reads_well`` keeps screenshots of the pages, for a person to look at (not compared), if anywhere.
SCREENSHOTS = os.environ.get("SCREENSHOTS_DIR", "")


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements-dev.txt)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if importlib.util.find_spec(AXE_PACKAGE) is None:
        return f"axe-core is missing: the {AXE_PACKAGE} package is not installed (pip install -r requirements-dev.txt)"
    return None


@functools.cache
def axe_script() -> str:
    """axe-core's axe.min.js, as the axe-playwright-python package ships it."""
    return (importlib.resources.files(AXE_PACKAGE) / "axe.min.js").read_text()


MISSING = _missing()


def require_browser() -> None:
    """Skip without Chromium, Playwright or axe-core; in CI, where they must be, fail."""
    if MISSING:
        needs(f"the browser tests need {MISSING}")


@pytest.fixture(params=list(SCREENS))
def screen(request: pytest.FixtureRequest) -> tuple[dict[str, int], str]:
    """The test's screen, each test run on both of ``SCREENS``: its viewport and theme."""
    return SCREENS[request.param]


@pytest.fixture
def browser_ready(transactional_db: Any) -> None:
    """Chromium, Playwright and axe-core are there (else skip, or fail in CI), and the role
    groups too: a transactional test empties the tables afterwards, including the groups a
    data migration created; put them back for alice and bob."""
    require_browser()
    for name in ("viewer", "oncall"):
        Group.objects.get_or_create(name=name)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module. Playwright's sync API keeps an event loop running in the
    main thread while it is started; stopping it with the module leaves none behind for the
    tests that run their own loop (asyncio.run) in whatever module comes next."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser_ready: None, browser: Any, live_server: Any, synced: None) -> Iterator[Callable[..., Any]]:
    """open_page(user=None, path="/", color_scheme="light", viewport=PHONE, javascript=True,
    fake_clock=False, timezone_id=None, at=None): a new browser context, signed in as ``user``,
    showing ``path``; ``timezone_id`` is the browser's time zone (an IANA name; the machine's
    without it), ``at`` the time its clock says, fixed (for a server under ``time_machine``)."""
    contexts: list[Any] = []

    def open_(
        user: User | None = None,
        path: str = "/",
        *,
        color_scheme: str = "light",
        viewport: dict[str, int] = PHONE,
        javascript: bool = True,
        fake_clock: bool = False,
        timezone_id: str | None = None,
        at: datetime | None = None,
    ) -> Any:
        context = browser.new_context(
            base_url=live_server.url,
            color_scheme=color_scheme,
            viewport=viewport,
            java_script_enabled=javascript,
            **({"timezone_id": timezone_id, "locale": "en-US"} if timezone_id else {}),
        )
        context.set_default_timeout(10_000)
        if at is not None:
            context.clock.set_fixed_time(at)
        contexts.append(context)
        if user is not None:
            client = Client()
            client.force_login(user)
            context.add_cookies(
                [
                    {
                        "name": settings.SESSION_COOKIE_NAME,
                        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                        "url": live_server.url,
                    }
                ]
            )
        page = context.new_page()
        if fake_clock:
            page.clock.install()  # timers then run when the test says (page.clock.run_for)
        page.goto(path)
        return page

    yield open_
    for context in contexts:
        context.close()
    requests_finished()


def requests_finished(within_s: float = 10) -> None:
    """Wait until no other connection to the test database is in a query or a transaction:
    a page's last requests (timers a fake clock ran, a poll) may still run in the live
    server's threads when the test ends, and the flush after it (TRUNCATE of every table)
    would deadlock with one of them, leaving the next test its rows. The browser is closed,
    so no request starts now; any still running after ``within_s`` is ended."""
    if connection.vendor != "postgresql":
        return
    busy = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND state <> 'idle'"
    )
    deadline = time.monotonic() + within_s
    with connection.cursor() as cursor:
        while True:
            cursor.execute(busy)
            running = [pid for (pid,) in cursor.fetchall()]
            if not running:
                return
            if time.monotonic() >= deadline:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [running])
                return
            time.sleep(0.05)


class Clicks:
    """Counts the clicks a person makes; typing is not a click."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, locator: Any) -> None:
        locator.click()
        self.count += 1


def api_document(live_server: Any, token: str, chain: str = "chat") -> dict[str, Any]:
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/chains/{chain}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def axe_violations(page: Any) -> list[str]:
    # Not add_script_tag: that is an inline script, which the pages' CSP rightly refuses.
    page.evaluate(axe_script())
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in result["violations"]  # of any impact: minor and moderate ones too
    ]


def reads_well(page: Any, name: str) -> None:
    """No horizontal scroll on this screen and no axe violation of any impact; with
    SCREENSHOTS_DIR set, a screenshot kept there."""
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url} is {width}px wide"
    assert axe_violations(page) == [], page.url
    if not SCREENSHOTS:
        return
    Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
    size = f"{page.viewport_size['width']}x{page.viewport_size['height']}"
    scheme = page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'")
    page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}-{size}-{scheme}.png"), full_page=True)


def type_into_the_focus(page: Any, text: str, *, element_id: str = "id_reason") -> None:
    """Type as a person does once the page opens: into the box the page gives the focus, after
    it has it (keys typed before that are lost, the first letter of a reason on a busy machine)."""
    page.wait_for_function(f"() => document.activeElement && document.activeElement.id === {element_id!r}")
    page.keyboard.type(text)


def sign_in_on_the_page(page: Any, username: str = "alice", password: str = "alice-pass-123") -> None:
    """Fill in and send the sign-in form the page shows, as a person does."""
    page.wait_for_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
