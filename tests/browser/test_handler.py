"""executor.handlers.computer: item -> safety checks -> actions -> computer_call_output; and the
browser's navigation tools (executor.navigation)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck
from openai.types.responses.response_input_item_param import ComputerCallOutput
from pydantic import TypeAdapter
from rich.console import Console

from executor.handlers.computer import handle_computer_call
from executor.navigation import handle_navigation, navigation_tool_params, navigation_tools
from executor.safety import SafetyAnswer, SafetyDecision, TerminalSafetyPrompt, acknowledge_all
from executor.tools import check_strict_schema
from sandbox.browser import BrowserConfig, LocalBrowser
from sandloop.errors import SafetyCheckRefused, SandloopError, describe
from tests.browser.conftest import Site, png_size

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[LocalBrowser]:
    b = LocalBrowser(BrowserConfig())
    yield b
    await b.close()


def call(checks: list[dict[str, Any]] | None = None, **fields: Any) -> ResponseComputerToolCall:
    return ResponseComputerToolCall.model_validate({
        "type": "computer_call", "id": "cu_1", "call_id": "call_7", "status": "completed",
        "pending_safety_checks": checks or [], **fields})


def decode(output: dict[str, Any]) -> bytes:
    url = output["output"]["image_url"]
    assert url.startswith("data:image/png;base64,")
    return base64.b64decode(url.split(",", 1)[1])


async def clicks(browser: LocalBrowser) -> int:
    return int(await browser.evaluate("seen.filter(e => e.kind == 'click').length"))


async def test_ga_call_batch_then_one_screenshot(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    item = call(actions=[{"type": "click", "button": "left", "x": 150, "y": 130},
                         {"type": "click", "button": "left", "x": 160, "y": 140}])
    out = (await handle_computer_call(item, browser, safety=None, display=None)).output
    assert set(out) == {"type", "call_id", "output"}  # never an id; no checks to echo
    assert out["type"] == "computer_call_output" and out["call_id"] == "call_7"
    assert out["output"]["type"] == "computer_screenshot" and out["output"]["detail"] == "original"
    assert png_size(decode(out)) == (1280, 800)
    assert await clicks(browser) == 2
    TypeAdapter(ComputerCallOutput).validate_python(out)


async def test_preview_call_uses_the_declared_display(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/grid"))
    # b12 is centred at (220, 140) in the viewport; the display is half the size
    item = call(action={"type": "click", "button": "left", "x": 110, "y": 70})
    out = (await handle_computer_call(item, browser, safety=None, display=(640, 400))).output
    assert "detail" not in out["output"]  # the preview tool predates detail
    assert png_size(decode(out)) == (640, 400)
    assert await browser.evaluate("window.hit") == "b12"
    off = (await handle_computer_call(call(actions=[{"type": "screenshot"}]), browser,
                                      safety=None, display=None, detail_original=False)).output
    assert "detail" not in off["output"]


async def test_safety_checks_acknowledged_are_echoed_exactly(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/menu"))
    checks = [{"id": "cu_sc_1", "code": "malicious_instructions", "message": "Look out"},
              {"id": "cu_sc_2"}]
    asked: list[tuple[str, str, str]] = []

    async def human(check: PendingSafetyCheck, item: ResponseComputerToolCall, url: str) -> SafetyAnswer:
        asked.append((check.id, item.call_id, url))
        return SafetyAnswer(SafetyDecision.ACKNOWLEDGE, "looks fine")

    item = call(checks, actions=[{"type": "click", "button": "left", "x": 150, "y": 130}])
    out = (await handle_computer_call(item, browser, safety=human, display=None)).output
    assert out["acknowledged_safety_checks"] == checks
    assert asked == [("cu_sc_1", "call_7", site.url("/menu")), ("cu_sc_2", "call_7", site.url("/menu"))]
    assert await clicks(browser) == 1
    out = (await handle_computer_call(item, browser, safety=acknowledge_all, display=None)).output
    assert out["acknowledged_safety_checks"] == checks


@pytest.mark.parametrize("safety", ["none", "refuse"])
async def test_refused_check_stops_before_any_action(browser: LocalBrowser, site: Site, safety: str) -> None:
    await browser.navigate(site.url("/menu"))

    async def refuse(check: PendingSafetyCheck, item: ResponseComputerToolCall, url: str) -> SafetyAnswer:
        return SafetyAnswer(SafetyDecision.REFUSE, "not on my watch")

    item = call([{"id": "cu_sc_1", "code": "sensitive_domain"}],
                actions=[{"type": "click", "button": "left", "x": 150, "y": 130}])
    with pytest.raises(SafetyCheckRefused) as raised:
        await handle_computer_call(item, browser, safety=refuse if safety == "refuse" else None,
                                   display=None)
    assert isinstance(raised.value, SandloopError)
    assert "cu_sc_1 (sensitive_domain)" in describe(raised.value)
    assert ("not on my watch" if safety == "refuse" else "no one is available") in str(raised.value)
    assert await clicks(browser) == 0


async def test_terminal_prompt(browser: LocalBrowser) -> None:
    check = PendingSafetyCheck(id="cu_sc_9", code="irrelevant_domain", message="Off task?")
    screen = io.StringIO()
    yes = TerminalSafetyPrompt(Console(file=screen, width=100), stream=io.StringIO("y\n"))
    answer = await yes(check, call(), "http://x.test/")
    assert answer.decision is SafetyDecision.ACKNOWLEDGE
    assert "cu_sc_9" in screen.getvalue() and "Off task?" in screen.getvalue()
    no = TerminalSafetyPrompt(Console(file=io.StringIO()), stream=io.StringIO("n\nfishy\n"))
    answer = await no(check, call(), "http://x.test/")
    assert answer == SafetyAnswer(SafetyDecision.REFUSE, "fishy")
    blank = TerminalSafetyPrompt(Console(file=io.StringIO()), stream=io.StringIO("\n\n"))
    assert (await blank(check, call(), "")).decision is SafetyDecision.REFUSE  # default is no


async def test_navigation_tools(browser: LocalBrowser, site: Site) -> None:
    params = navigation_tool_params()
    assert [p["name"] for p in params] == ["navigate", "back", "forward"]
    for p in params:
        assert p["strict"] is True
        check_strict_schema(p["name"], p["parameters"])
    tools = {t.name: t for t in navigation_tools(browser)}
    assert [t.to_param() for t in tools.values()] == params
    assert all(t.resource == ("computer",) for t in tools.values())

    text = await tools["navigate"].fn(url=site.url("/hello"))
    assert text == f"now at {site.url('/hello')} (hello)"
    await handle_navigation("navigate", f'{{"url": "{site.url("/grid")}"}}', browser)
    assert (await tools["back"].fn()).startswith(f"now at {site.url('/hello')}")
    assert (await tools["forward"].fn()).startswith(f"now at {site.url('/grid')}")
    refused = await handle_navigation("navigate", {"url": "file:///etc/passwd"}, browser)
    assert "blocked: rule browser.scheme" in refused
    assert (await handle_navigation("navigate", "{nope", browser)).startswith("error:")
    assert (await handle_navigation("navigate", {}, browser)).startswith("error:")
