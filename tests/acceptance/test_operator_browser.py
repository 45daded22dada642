"""The operator page in a real browser: Debian's Chromium, driven by Playwright for Python.

Three replicas on SQLite and on Postgres (tests/operator_scene.py), one backing off; the page is
read from the running app through both faces. The browser must show what the store holds, log
nothing to its console (a CSP violation would be logged there), show a hostile profile name as
text and run none of it, and be refused without authorization. Each run saves a screenshot to
`TALARIA_RELAY_TEST_ARTIFACTS` (default `.artifacts/` at the root).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from backends import on
from operator_scene import (
    HOSTILE_PROFILE,
    HOSTILE_TITLE,
    LONG_PROFILE,
    MEMBER,
    OWNER,
    PAGE,
    Scene,
    scene,
)
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Error, Page, sync_playwright

pytestmark = on("sqlite", "postgres")

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(
    os.environ.get("TALARIA_RELAY_TEST_ARTIFACTS", Path(__file__).parents[2] / ".artifacts")
)


@pytest.fixture
def browser(running: Scene) -> Iterator[Browser]:
    """Started after the scene: Playwright's sync API holds an event loop on this thread, where
    the store fixtures run theirs."""
    # Debian's Chromium, never a browser Playwright downloads (`.ci/run` installs it).
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=CHROMIUM)
        yield found
        found.close()


@pytest.fixture
def running(store_url: str) -> Iterator[Scene]:
    with scene(store_url) as found:
        yield found


class Watched:
    """A page with everything it logs, every error it throws and every dialog it opens."""

    def __init__(self, browser: Browser, headers: dict[str, str] | None = None) -> None:
        self.context = browser.new_context(
            extra_http_headers=headers or {}, viewport={"width": 1280, "height": 900}
        )
        self.page: Page = self.context.new_page()
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._logged)
        self.page.on("pageerror", self._threw)
        self.page.on("dialog", self._opened)

    def _opened(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _threw(self, error: Error) -> None:
        self.console.append(f"pageerror: {error}")

    def _logged(self, message: ConsoleMessage) -> None:
        self.console.append(f"{message.type}: {message.text}")

    def close(self) -> None:
        self.context.close()


def test_the_page_shows_the_fleet_profiles_and_registration(
    browser: Browser, running: Scene, backend: str
) -> None:
    """Served through ASGI by the replica that is backing off: the verdict says so, the three
    replicas are listed, both profiles (the hostile name as text) and the registration shown,
    no script or image came from the data, the console is empty; a screenshot is saved."""
    watched = Watched(browser, OWNER)
    try:
        response = watched.page.goto(running.asgi_url + PAGE)
        assert response is not None
        assert response.status == 200
        page = watched.page
        verdict = page.locator(".verdict").inner_text()
        assert "web-1/" in verdict
        assert "the relay answered HTTP 503 (RelayHttpError)" in verdict
        rows = page.locator("h2:has-text('Replicas') + table tbody tr")
        assert rows.count() == 3
        fleet = rows.all_inner_texts()
        assert [row.split("\t")[1].split("/")[0] for row in fleet] == ["web-1", "web-2", "web-3"]
        assert "backing off" in fleet[0]
        assert "The relay answered HTTP 503" in fleet[0]
        # What each replica recorded of itself (the fleet): its release, host and uptime.
        for row in fleet:
            assert "schema " in row
            assert "pid " in row
            assert "up " in row
        # Every replica's last hour: web-1's from its memory, the others' from their fleet rows.
        strips = page.locator("h2:has-text('Replicas') + table tbody tr svg.strip")
        assert strips.count() == 3
        assert " ok, " in fleet[1]
        assert "with a failure" in fleet[1]
        assert "with a failure" in fleet[2]
        assert "on its own page" not in page.content()
        if backend == "postgres":
            # Each replica's offset to the store's clock, as its own row records it.
            for row in fleet:
                assert "clock " in row
        profiles = page.locator("h2:has-text('Profiles') + table tbody tr").all_inner_texts()
        assert len(profiles) == 3
        assert any(HOSTILE_PROFILE in row for row in profiles)
        assert page.get_by_text(HOSTILE_PROFILE, exact=True).count() == 1
        assert page.locator("img").count() == 0
        assert page.locator("script").count() == 0
        assert HOSTILE_TITLE not in page.content()
        assert "SHA256:" in page.locator("dl").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=ARTIFACTS / f"operator-page-{backend}.png", full_page=True)
        assert watched.dialogs == []
        assert watched.console == []
    finally:
        watched.close()


# What the browser is refused, and the page's layout, are the web faces' and the page's own, not
# the store's: one backend (the page's content is read on both, in the tests around these).
@on("sqlite")
def test_refused_without_authorization_through_both_faces(browser: Browser, running: Scene) -> None:
    """Nobody gets 401, a member 403, through ASGI and WSGI; the owner reads the page (through
    WSGI it is `web-2`'s, which is not backing off). Every refusal, 405 included, carries the
    page's strict headers and an `{"error": …}` body."""
    for face, base in (("asgi", running.asgi_url), ("wsgi", running.wsgi_url)):
        for headers, status in ((None, 401), (MEMBER, 403)):
            watched = Watched(browser, headers)
            try:
                response = watched.page.goto(base + PAGE)
                assert response is not None
                assert response.status == status, face
                assert response.headers["content-security-policy"].startswith("default-src 'none'")
                assert "Talaria relay" not in watched.page.content()
            finally:
                watched.close()
        watched = Watched(browser, OWNER)
        try:
            response = watched.page.goto(base + PAGE)
            assert response is not None
            assert response.status == 200, face
            this_one = watched.page.locator("tr:has-text('(this one)')").inner_text()
            assert ("web-1/" if face == "asgi" else "web-2/") in this_one
            assert watched.console == []
        finally:
            watched.close()
        assert_refusals_carry_the_pages_headers(base)


@on("sqlite")
def test_a_4096_character_profile_name_keeps_the_page_at_the_viewports_width(
    browser: Browser, running: Scene
) -> None:
    """A profile named with 4,096 unbreakable characters: the page stays 1,280 px wide (no
    horizontal scroll) through either face, the name shows cut with its length, and the whole of
    it one click away (`<details>`), wrapped."""
    for face, base in (("asgi", running.asgi_url), ("wsgi", running.wsgi_url)):
        watched = Watched(browser, OWNER)
        try:
            response = watched.page.goto(base + PAGE)
            assert response is not None
            assert response.status == 200
            page = watched.page
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 1280, f"{face}: the page is {width} px wide"
            long = page.locator("details.long")
            assert long.count() == 1
            assert "(4,096 characters)" in long.inner_text()
            long.locator("summary").click()
            assert LONG_PROFILE in long.inner_text()
            opened = page.evaluate("document.documentElement.scrollWidth")
            assert opened <= 1280, f"{face}: opened, the page is {opened} px wide"
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=ARTIFACTS / f"operator-page-long-name-{face}.png")
            assert watched.console == []
        finally:
            watched.close()


def test_another_replicas_backoff_is_shown_while_it_lasts(browser: Browser, running: Scene) -> None:
    """`web-2`'s page (WSGI) shows `web-1` backing off: its fleet row, written when its pass
    failed, says until when (ahead of now) and why; the headline names it, and the JSON twin's
    `problems` are the headline's list, word for word."""
    watched = Watched(browser, OWNER)
    try:
        response = watched.page.goto(running.wsgi_url + PAGE)
        assert response is not None
        assert response.status == 200
        page = watched.page
        fleet = page.locator("h2:has-text('Replicas') + table tbody tr").all_inner_texts()
        (web1,) = [row for row in fleet if row.split("\t")[1].startswith("web-1/")]
        assert "backing off" in web1
        assert "The relay answered HTTP 503" in web1
        listed = page.locator(".verdict li").all_inner_texts()
        assert any(line.startswith("replica web-1/") and "backing off" in line for line in listed)
        with httpx.Client(base_url=running.wsgi_url, headers=OWNER, timeout=30) as client:
            document = client.get(PAGE + ".json").json()
        rows = {row["owner"].split("/")[0]: row for row in document["fleet"]["replicas"]}
        assert rows["web-1"]["backoff_until"] > document["generated_at"]
        assert (rows["web-1"]["backoff_failure"], rows["web-1"]["backoff_status"]) == (
            "RelayHttpError",
            503,
        )
        assert document["problems"] == listed
        assert document["level"] in ("warn", "bad")
        assert page.locator(".verdict").inner_text().startswith(document["headline"])
    finally:
        watched.close()


def assert_refusals_carry_the_pages_headers(base: str) -> None:
    """401, 403 and 405 (POST and HEAD alike: any method but GET, as the manual says), through
    a real server: each with the strict headers and an `{"error": …}` body."""
    with httpx.Client(base_url=base, timeout=30) as client:
        for path in (PAGE, PAGE + ".json"):
            answers = [
                (client.get(path), 401),
                (client.get(path, headers=MEMBER), 403),
                (client.post(path, headers=OWNER), 405),
                (client.delete(path, headers=OWNER), 405),
                (client.head(path, headers=OWNER), 405),
            ]
            for response, status in answers:
                said = f"{response.request.method} {path}: {response.status_code}"
                assert response.status_code == status, said
                assert response.headers["content-security-policy"].startswith(
                    "default-src 'none'"
                ), said
                assert response.headers["x-content-type-options"] == "nosniff", said
                assert response.headers["cache-control"] == "no-store", said
                assert response.headers["referrer-policy"] == "no-referrer", said
                assert response.headers["content-type"] == "application/json", said
                if response.request.method != "HEAD":
                    assert set(json.loads(response.content)) == {"error"}, said
                if status == 405:
                    assert response.headers["allow"] == "GET", said
