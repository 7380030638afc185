"""Every computer action on a real Chromium (local placement), one browser for the module."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandbox.browser import BrowserConfig, LocalBrowser
from tests.browser.conftest import Site, pixel, png_size

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[LocalBrowser]:
    b = LocalBrowser(BrowserConfig(wait_s=0.05))
    yield b
    await b.close()


async def until(browser: LocalBrowser, expression: str, expect: Any) -> Any:
    """The page's answer once it equals ``expect`` (events land asynchronously); else the last."""
    value = None
    for _ in range(50):
        value = await browser.evaluate(expression)
        if value == expect:
            break
        await asyncio.sleep(0.02)
    return value


async def test_form_click_type_select_all_delete_enter(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/form"))
    await browser.perform([{"type": "click", "button": "left", "x": 200, "y": 65},
                           {"type": "type", "text": "hello world"}])
    assert await browser.evaluate("document.getElementById('name').value") == "hello world"
    assert await browser.evaluate("document.activeElement.id") == "name"

    await browser.perform([{"type": "keypress", "keys": ["CTRL", "A"]},
                           {"type": "keypress", "keys": ["BACKSPACE"]}])
    assert await browser.evaluate("document.getElementById('name').value") == ""

    shot = await browser.perform([{"type": "type", "text": "penguin"},
                                  {"type": "keypress", "keys": ["ENTER"]}])
    assert shot.url.endswith("/submitted")
    assert ("POST", f"127.0.0.1:{site.port}", "/submitted", "name=penguin") in site.hits
    assert await browser.evaluate("document.getElementById('posted').textContent") == "name=penguin"


async def test_chord_as_one_string(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/form"))
    await browser.perform([{"type": "click", "button": "left", "x": 200, "y": 65},
                           {"type": "type", "text": "abc"},
                           {"type": "keypress", "keys": ["ctrl+a"]},
                           {"type": "type", "text": "z"}])
    assert await browser.evaluate("document.getElementById('name').value") == "z"


async def test_double_click_selects_a_word(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/words"))
    x, y = await browser.evaluate("wordCenter('beta')")
    await browser.perform([{"type": "double_click", "x": round(x), "y": round(y)}])
    assert await browser.evaluate("window.getSelection().toString().trim()") == "beta"


async def test_drag_moves_slider_and_item_along_the_path(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/drag"))
    # thumb starts at the left end (value 0); the track is 400 px wide
    await browser.perform([{"type": "drag", "path": [{"x": 108, "y": 108}, {"x": 300, "y": 108}]}])
    value = int(await browser.evaluate("document.getElementById('slider').value"))
    assert 40 <= value <= 60

    path = [{"x": 75, "y": 325}, {"x": 200, "y": 325}, {"x": 200, "y": 450}]
    await browser.perform([{"type": "drag", "path": path}])
    box = await browser.evaluate("[box.offsetLeft, box.offsetTop]")
    assert box == [175, 425]
    seen = await browser.evaluate("window.seen")
    assert [200, 325] in seen  # the corner of the path was visited, not cut
    assert all(y == 325 for x, y in seen if x < 200)


async def test_scroll_moves_the_page_by_the_delta(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/long"))
    await browser.perform([{"type": "scroll", "x": 400, "y": 400, "scroll_x": 120, "scroll_y": 300}])
    assert await until(browser, "[scrollX, scrollY]", [120, 300]) == [120, 300]
    await browser.perform([{"type": "scroll", "x": 400, "y": 400, "scroll_x": 0, "scroll_y": -100}])
    assert await until(browser, "[scrollX, scrollY]", [120, 200]) == [120, 200]


async def test_right_click_opens_custom_menu_and_buttons_map(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    await browser.perform([{"type": "click", "button": "right", "x": 150, "y": 130}])
    menu = await browser.evaluate(
        "[getComputedStyle(menu).display, menu.offsetLeft, menu.offsetTop]")
    assert menu == ["block", 150, 130]
    await browser.perform([{"type": "click", "button": "wheel", "x": 120, "y": 110}])
    downs = await browser.evaluate("seen.filter(e => e.kind == 'mousedown').map(e => e.button)")
    assert downs == [2, 1]  # right, then middle


async def test_modifier_held_for_the_mouse_action_only(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    await browser.perform([{"type": "click", "button": "left", "x": 150, "y": 130, "keys": ["SHIFT"]},
                           {"type": "click", "button": "left", "x": 160, "y": 140},
                           {"type": "click", "button": "left", "x": 170, "y": 150,
                            "keys": ["ctrl", "Alt"]}])
    clicks = await browser.evaluate("seen.filter(e => e.kind == 'click')")
    assert [(c["shift"], c["ctrl"], c["alt"]) for c in clicks] == [
        (True, False, False), (False, False, False), (False, True, True)]
    assert [(c["x"], c["y"]) for c in clicks] == [(150, 130), (160, 140), (170, 150)]


async def test_move_wait_and_screenshot_actions(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    await browser.evaluate("document.addEventListener('mousemove', e => window.last = [e.clientX, e.clientY])")
    shot = await browser.perform([{"type": "move", "x": 210, "y": 170}, {"type": "wait"},
                                  {"type": "screenshot"}])
    assert shot.notes == ()
    assert await browser.evaluate("window.last") == [210, 170]


async def test_screenshot_is_png_of_the_declared_size(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/grid"))
    assert png_size((await browser.screenshot()).png) == (1280, 800)
    assert png_size((await browser.screenshot(display=(640, 400))).png) == (640, 400)
    assert png_size((await browser.screenshot(display=(1024, 768))).png) == (1024, 768)


@pytest.mark.parametrize(("display", "target"), [((640, 400), "b23"), ((2560, 1600), "b47")])
async def test_scaled_display_click_lands_on_the_intended_button(
    browser: LocalBrowser, site: Site, display: tuple[int, int], target: str
) -> None:
    await browser.navigate(site.url("/grid"))
    row, col = int(target[1]), int(target[2])
    factor = display[0] / 1280
    # the button's centre in viewport px, as the model sees it in the scaled screenshot
    x, y = (40 + col * 80 + 20) * factor, (40 + row * 80 + 20) * factor
    shot = await browser.perform([{"type": "click", "button": "left", "x": round(x), "y": round(y)}],
                                 display=display)
    assert png_size(shot.png) == display
    assert await browser.evaluate("window.hit") == target
    # the button's pixels are where the model was told they are: a button (not the white page)
    assert pixel(shot.png, round(x), round(y)) != (255, 255, 255)


async def test_password_field_is_masked(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/secret"))
    shot = await browser.screenshot()
    assert all(pixel(shot.png, x, y) == (0, 0, 0) for x, y in [(110, 110), (200, 120), (290, 135)])
    # the plain text field beside it, styled the same, is not masked; nor is the .private div
    assert pixel(shot.png, 290, 205) == (255, 255, 255)
    assert pixel(shot.png, 290, 335) == (255, 255, 255)


async def test_bad_actions_are_reported_not_raised(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    shot = await browser.perform([{"type": "click", "button": "left", "x": 150, "y": 130},
                                  {"type": "click", "button": "left", "x": 5000, "y": 10},
                                  {"type": "click", "button": "left", "x": 160, "y": 140}])
    assert png_size(shot.png) == (1280, 800)
    assert len(shot.notes) == 1 and "outside the 1280x800 display" in shot.notes[0]
    assert "actions 3..3 were not run" in shot.notes[0]
    assert len(await browser.evaluate("seen.filter(e => e.kind == 'click')")) == 1

    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "click", "x": 1}, "malformed click"),
        ({"type": "teleport"}, "unknown action type"),
        ({"type": "keypress", "keys": ["HYPERDRIVE"]}, "unknown key name"),
        ({"type": "drag", "path": []}, "empty path"),
    ]
    for bad, words in cases:
        shot = await browser.perform([bad])
        assert len(shot.notes) == 1 and words in shot.notes[0], shot.notes
        assert png_size(shot.png) == (1280, 800)


async def test_navigation_and_history(browser: LocalBrowser, site: Site) -> None:
    first = await browser.navigate(site.url("/hello"))
    assert first.url == site.url("/hello") and first.title == "hello" and first.blocked is None
    await browser.navigate(site.url("/grid"))
    back = await browser.back()
    assert back.url == site.url("/hello")
    forward = await browser.forward()
    assert forward.url == site.url("/grid")
    # the click buttons back/forward mean history too
    shot = await browser.perform([{"type": "click", "button": "back", "x": 10, "y": 10}])
    assert shot.url == site.url("/hello")
    assert await browser.current_url() == site.url("/hello")
    assert json.dumps(first.describe())  # plain text for the function output
