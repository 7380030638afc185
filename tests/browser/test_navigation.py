"""An action that starts a navigation: the screenshot shows the new page once it has loaded.

Both placements. The test server holds the slow parts (the results document, or the image
that turns the results page green) and releases each one HOLD_S after it was
requested, or as soon as the call returned, whichever comes first. A browser that waits for the
new page therefore always sees it green, whatever the machine's speed; one that captures as soon
as its actions ran returns before the release, and its screenshot shows the page unrendered.
The hold is not a timing assertion: nothing here measures how long anything took.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from sandbox.browser import BrowserConfig, PlaywrightBrowser, Screenshot, open_browser
from tests.browser import pages
from tests.browser.conftest import RESOLVE, Held, Site, domain_rules, pixel
from tests.browser.sockets import wait_page

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SESSION = f"test-nav-{uuid.uuid4().hex[:8]}"
WAIT_S = 0.5  # the `wait` action; every hold below is longer
HOLD_S = 1.5  # how long a held response stays held once requested (unless the call returned)
DEADLINE_S = 120.0  # turns a hang into a failure; never reached by a passing test
GREEN_AT = (640, 600)  # a point of the results page's body, far from any text

SEARCH = (200, 65)  # the search field
GO = (450, 65)  # the form's submit button
LINK = (150, 170)  # a link to the results
LATER = (150, 270)  # a button that navigates 300 ms later, from a timer
TO_SEARCH = (150, 370)  # a link to the search page itself
ROUTE = (150, 70)  # the app's link its router intercepts
CLOSE = (150, 180)  # the app's dialog's close button (a method=dialog form)
INTO_FRAME = (150, 270)  # the app's form that targets its iframe


@pytest_asyncio.fixture(scope="module", loop_scope="module",
                        params=["local", pytest.param("container", marks=pytest.mark.docker)])
async def browser(request: pytest.FixtureRequest) -> AsyncIterator[PlaywrightBrowser]:
    if request.param == "container":
        request.getfixturevalue("docker_client")  # skips cleanly without an engine
    config = BrowserConfig(allow_url=domain_rules, resolve=RESOLVE, wait_s=WAIT_S,
                           settle_timeout_s=DEADLINE_S / 4, navigation_timeout_s=DEADLINE_S / 4)
    b = open_browser(config, placement=request.param, session_id=SESSION)
    await b.start()
    yield b
    await b.close()
    if request.param == "container":
        client = request.getfixturevalue("docker_client")
        assert client.api.containers(all=True, filters={"label": f"sandloop.session={SESSION}"}) == []


@dataclass
class Pages:
    """One test's search page, results page and its image, under a fresh prefix."""

    site: Site
    base: str
    search: Held
    results: Held
    image: Held

    def url(self, path: str) -> str:
        return self.site.url(self.base + path, host="allowed.test")


def make_pages(site: Site, *, results_held: bool = False, image_held: bool = False) -> Pages:
    base = f"/nav-{uuid.uuid4().hex[:10]}"
    return Pages(
        site, base,
        search=site.add(base + "/search", pages.SEARCH.replace("{base}", base)),
        results=site.add(base + "/results", pages.RESULTS.replace("{base}", base), held=results_held),
        image=site.add(base + "/green.svg", pages.RESULTS_IMAGE, "image/svg+xml", held=image_held),
    )


def click(at: tuple[int, int], button: str = "left") -> dict[str, Any]:
    return {"type": "click", "button": button, "x": at[0], "y": at[1]}


def search_by_enter(query: str) -> list[dict[str, Any]]:
    return [click(SEARCH), {"type": "type", "text": query}, {"type": "keypress", "keys": ["ENTER"]}]


async def _release_once_requested(held: Held) -> None:
    while not held.arrived.is_set():
        await asyncio.sleep(0.01)
    await asyncio.sleep(HOLD_S)
    held.release()


async def perform_holding(browser: PlaywrightBrowser, actions: Sequence[dict[str, Any]],
                          *held: Held) -> Screenshot:
    """Run ``actions``; each held response is released HOLD_S after its request, or at the end."""
    releasers = [asyncio.create_task(_release_once_requested(h)) for h in held]
    try:
        return await asyncio.wait_for(browser.perform(actions), DEADLINE_S)
    finally:
        for task in releasers:
            task.cancel()
        for h in held:
            h.release()


def assert_rendered(shot: Screenshot, url: str, *held: Held) -> None:
    assert shot.url == url, f"the screenshot is of {shot.url}: {shot.notes}"
    assert pixel(shot.png, *GREEN_AT) == pages.RESULTS_GREEN, f"results not rendered: {shot.notes}"
    for h in held:  # the slow path really was taken (not, say, a cached copy)
        assert h.arrived.is_set(), "a held response was never asked for"


async def test_enter_submit_then_wait_with_a_slow_image(browser: PlaywrightBrowser, site: Site) -> None:
    """The defect as found: the results commit during `wait`, their image comes later."""
    p = make_pages(site, image_held=True)
    await browser.navigate(p.url("/search"))
    shot = await perform_holding(browser, [*search_by_enter("penguin"), {"type": "wait"}], p.image)
    assert_rendered(shot, p.url("/results?q=penguin"), p.image)


async def test_enter_submit_then_wait_with_a_slow_results_page(browser: PlaywrightBrowser, site: Site) -> None:
    p = make_pages(site, results_held=True)
    await browser.navigate(p.url("/search"))
    shot = await perform_holding(browser, [*search_by_enter("slow"), {"type": "wait"}], p.results)
    assert_rendered(shot, p.url("/results?q=slow"), p.results)


async def test_submit_button_click(browser: PlaywrightBrowser, site: Site) -> None:
    p = make_pages(site, results_held=True, image_held=True)
    await browser.navigate(p.url("/search"))
    actions = [click(SEARCH), {"type": "type", "text": "button"}, click(GO)]
    shot = await perform_holding(browser, actions, p.results, p.image)
    assert_rendered(shot, p.url("/results?q=button"), p.results, p.image)


async def test_link_click_then_wait(browser: PlaywrightBrowser, site: Site) -> None:
    p = make_pages(site, image_held=True)
    await browser.navigate(p.url("/search"))
    shot = await perform_holding(browser, [click(LINK), {"type": "wait"}], p.image)
    assert_rendered(shot, p.url("/results?q=link"), p.image)


async def test_location_assign_from_a_timer(browser: PlaywrightBrowser, site: Site) -> None:
    """The click's handler navigates 300 ms later: well inside the settle budget."""
    p = make_pages(site, results_held=True, image_held=True)
    await browser.navigate(p.url("/search"))
    shot = await perform_holding(browser, [click(LATER)], p.results, p.image)
    assert_rendered(shot, p.url("/results?q=later"), p.results, p.image)


async def test_second_navigation_in_one_batch(browser: PlaywrightBrowser, site: Site) -> None:
    """A link to the search page, then a search there: the second navigation is waited for too."""
    p = make_pages(site, results_held=True)
    await browser.navigate(p.url("/search?first"))
    actions = [click(TO_SEARCH), *search_by_enter("twice")]
    shot = await perform_holding(browser, actions, p.results)
    assert_rendered(shot, p.url("/results?q=twice"), p.results)


async def test_submit_through_a_redirect(browser: PlaywrightBrowser, site: Site) -> None:
    p = make_pages(site, image_held=True)
    await browser.navigate(p.url("/search"))
    # a POST (a GET form would replace the action's query with its own), answered 303
    await browser.evaluate(f"document.forms[0].method = 'post';"
                           f"document.forms[0].action = '/redirect?to={p.base}/results'")
    shot = await perform_holding(browser, [*search_by_enter("hop"), {"type": "wait"}], p.image)
    # the form's own query went to /redirect; the redirect's target carries none
    assert_rendered(shot, p.url("/results"), p.image)


async def test_history_back_button(browser: PlaywrightBrowser, site: Site) -> None:
    p = make_pages(site)
    await browser.navigate(p.url("/results?q=before"))
    await browser.navigate(p.url("/search"))
    image = site.add(p.base + "/green.svg", pages.RESULTS_IMAGE, "image/svg+xml", held=True)  # from now on
    shot = await perform_holding(browser, [click((10, 10), button="back")], image)
    assert_rendered(shot, p.url("/results?q=before"), image)


@pytest.mark.parametrize("button", [(150, 70), (150, 170), (150, 270)], ids=["now", "next-task", "soon"])
async def test_the_screenshot_shows_what_the_click_did(
    browser: PlaywrightBrowser, site: Site, button: tuple[int, int]
) -> None:
    """At once, or from a timer the click's handler set: the capture taken alongside the settle
    round trip stands only when nothing was left to happen."""
    await browser.navigate(site.url("/paint", host="allowed.test"))
    shot = await browser.perform([click(button)])
    assert pixel(shot.png, *GREEN_AT) == pages.RESULTS_GREEN, shot.notes


async def test_what_stays_in_the_document_is_not_waited_for(browser: PlaywrightBrowser, site: Site) -> None:
    """An intercepted navigation, a method=dialog submission and a submission into an iframe
    announce nothing to wait for.

    The settle budget is made far longer than the call's deadline: a browser that waited for a
    navigation that is not coming would miss the deadline.
    """
    base = f"/app-{uuid.uuid4().hex[:10]}"
    site.add(base + "/app", pages.APP.replace("{base}", base))
    await browser.navigate(site.url(base + "/app", host="allowed.test"))
    with timeouts(browser, DEADLINE_S):
        shot = await asyncio.wait_for(browser.perform([click(ROUTE)]), DEADLINE_S / 4)
        assert shot.url == site.url(base + "/app/inbox", host="allowed.test") and shot.notes == ()
        assert await browser.evaluate("document.body.dataset.route") == base + "/app/inbox"
        shot = await asyncio.wait_for(browser.perform([click(CLOSE)]), DEADLINE_S / 4)
        assert shot.notes == ()
        assert await browser.evaluate("dialog.open") is False
        shot = await asyncio.wait_for(browser.perform([click(INTO_FRAME)]), DEADLINE_S / 4)
        assert shot.notes == () and shot.url == site.url(base + "/app/inbox", host="allowed.test")
        assert await wait_page(browser, "document.querySelector('iframe').contentDocument.title == 'hello'")


@contextmanager
def timeouts(browser: PlaywrightBrowser, seconds: float) -> Iterator[None]:
    saved = browser.config
    browser.config = dataclasses.replace(saved, settle_timeout_s=seconds, navigation_timeout_s=seconds)
    try:
        yield
    finally:
        browser.config = saved


async def perform_never_released(browser: PlaywrightBrowser, p: Pages, held: Held, seconds: float) -> Screenshot:
    """A search whose ``held`` response is released only after the call, with short timeouts."""
    await browser.navigate(p.url("/search"))
    try:
        with timeouts(browser, seconds):
            shot = await asyncio.wait_for(browser.perform(search_by_enter("never")), DEADLINE_S)
        assert held.arrived.is_set()
    finally:
        held.release()
    assert (await browser.navigate(p.url("/search?after"))).title == "search"  # the session goes on
    return shot


async def test_a_page_that_never_finishes_loading_does_not_hang_the_call(
    browser: PlaywrightBrowser, site: Site
) -> None:
    p = make_pages(site, image_held=True)
    # long enough for the document itself to arrive on a busy machine (it is not held)
    shot = await perform_never_released(browser, p, p.image, 5.0)
    assert shot.url == p.url("/results?q=never")  # it got that far: the document is there
    assert any("did not finish loading" in note for note in shot.notes), shot.notes


async def test_a_document_that_never_answers_does_not_hang_the_call(
    browser: PlaywrightBrowser, site: Site
) -> None:
    p = make_pages(site, results_held=True)
    shot = await perform_never_released(browser, p, p.results, 1.0)
    assert shot.url != p.url("/results?q=never")  # still the form, or the browser's error page
