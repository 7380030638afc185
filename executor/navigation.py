"""The browser's navigation function tools: ``navigate(url)``, ``back()``, ``forward()``.

The public computer-use samples offer them beside the computer tool when the computer is a
browser. Each runs through the browser's domain rules and answers with where the page ended
(:meth:`sandbox.browser.Navigation.describe`); they take the computer in turn with computer calls.
"""

from __future__ import annotations

import json
from typing import Any

from executor.items import COMPUTER
from executor.tools import FunctionTool
from sandbox.browser import Browser, Navigation

__all__ = ["NAVIGATION_TOOL_NAMES", "handle_navigation", "navigation_tool_params", "navigation_tools"]

NAVIGATION_TOOL_NAMES = ("navigate", "back", "forward")

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "required": [],
                            "additionalProperties": False}
_DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "navigate": (
        "Open a URL in the browser (http or https only). Domain rules may block it.",
        {"type": "object",
         "properties": {"url": {"type": "string", "description": "The absolute http(s) URL to open."}},
         "required": ["url"], "additionalProperties": False},
    ),
    "back": ("Go back one page in the browser's history.", _NO_ARGS),
    "forward": ("Go forward one page in the browser's history.", _NO_ARGS),
}


def navigation_tool_params() -> list[dict[str, Any]]:
    """The strict function-tool definitions, as sent in ``tools``."""
    return [
        {"type": "function", "name": name, "description": description,
         "parameters": parameters, "strict": True}
        for name, (description, parameters) in _DEFINITIONS.items()
    ]


async def handle_navigation(name: str, arguments: str | dict[str, Any], browser: Browser) -> str:
    """Run one navigation call; the text is the function_call_output (errors included)."""
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
    except json.JSONDecodeError as exc:
        return f"error: arguments are not valid JSON ({exc.msg})"
    result: Navigation
    if name == "navigate":
        url = args.get("url") if isinstance(args, dict) else None
        if not isinstance(url, str) or not url:
            return "error: navigate needs a url string"
        result = await browser.navigate(url)
    elif name == "back":
        result = await browser.back()
    elif name == "forward":
        result = await browser.forward()
    else:
        return f"error: unknown navigation tool {name!r}"
    return result.describe()


def navigation_tools(browser: Browser) -> list[FunctionTool]:
    """The three tools ready for ``FunctionTools.extend``; they share the computer's lock slot."""

    def make(name: str) -> FunctionTool:
        description, parameters = _DEFINITIONS[name]

        async def run(**kwargs: Any) -> str:
            return await handle_navigation(name, kwargs, browser)

        return FunctionTool(name=name, fn=run, description=description,
                            parameters=parameters, strict=True, resource=COMPUTER)

    return [make(name) for name in NAVIGATION_TOOL_NAMES]
