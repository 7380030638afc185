"""Item type → handler, run concurrently, every call_id answered.

All actionable calls of one response run at once (``asyncio.gather``); their outputs come back
in call order. Calls that touch one back-end resource keep a safe order through a per-resource
``asyncio.Lock`` (FIFO, acquired in call order): every computer action on the one browser, two
patches to the same file. Whatever a handler does — raise, overrun its deadline, find its
back-end dead, return something malformed — the call still gets an output of the right type
carrying the error text (:func:`sandloop.errors.describe`). Hosted items (server-run shells,
``mcp_call``, web search …) need nothing and are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import posixpath
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from executor.gate import Gate
from executor.handlers import (
    OUTPUT_TYPE,
    Output,
    as_dict,
    call_id_of,
    echo_caller,
    error_output,
)
from executor.handlers import apply_patch as patch_handlers
from executor.handlers import computer as computer_handlers
from executor.handlers.function import (
    AsyncTasks,
    FunctionTools,
    handle_custom_tool_call,
    handle_function_call,
)
from executor.handlers.local_shell import handle_local_shell_call
from executor.handlers.mcp_approval import handle_mcp_approval_request
from executor.handlers.shell import handle_shell_call
from executor.handlers.tool_search import ToolCatalog, handle_tool_search_call
from sandbox.base import Session
from sandloop.errors import NotEnabled, SafetyCheckRefused, SandboxTimeout, describe
from sandloop.limits import Limits
from sandloop.verdict import Decision, Verdict

__all__ = ["CallRecord", "DispatchResult", "Dispatcher", "EventSink", "Toolbox", "is_actionable"]

log = logging.getLogger("sandloop.dispatch")

#: progress events: (kind, fields) — "call_start", "call_end", "decision", …
EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class Toolbox:
    """Everything the handlers act on, and the tool definitions that follow from it."""

    gate: Gate | None = None
    session: Session | None = None
    browser: Any = None
    functions: FunctionTools = field(default_factory=FunctionTools)
    catalog: ToolCatalog | None = None
    #: tool definitions sent as given (hosted mcp, web_search, programmatic_tool_calling …)
    hosted_tools: list[dict[str, Any]] = field(default_factory=list)
    shell_limits: Any = None
    legacy_local_shell: bool = False  # send {"type":"local_shell"} instead of the shell tool
    #: which field of local_shell_call_output carries the call id (disputed, protocol.md A.4)
    local_shell_id_field: Literal["id", "call_id"] = "id"
    patch_tool: Literal["native", "custom", "off"] = "native"
    patch_read_only_globs: Sequence[str] = ()
    patch_dry_run: bool = False
    computer_safety: Any = None  # pending-safety-check callback handed to the computer handler
    #: (width, height) to offer the preview computer tool instead of the GA one
    computer_display: tuple[int, int] | None = None
    call_timeout_s: float = 600.0
    tasks: AsyncTasks = field(default_factory=AsyncTasks)

    def tool_params(self) -> list[dict[str, Any]]:
        """The tool list, built once so it stays byte-identical across turns (prompt cache)."""
        params = [t.to_param() for t in self.functions]
        if self.session is not None:
            params.append({"type": "local_shell"} if self.legacy_local_shell
                          else {"type": "shell", "environment": {"type": "local"}})
            if self.patch_tool == "native":
                params.append({"type": "apply_patch"})
            elif self.patch_tool == "custom":
                params.append(dict(patch_handlers.APPLY_PATCH_CUSTOM_TOOL))
        if self.browser is not None:
            if self.computer_display is not None:
                # The preview tool (computer-use-preview models) declares its display; the GA
                # tool declares nothing and gets screenshots at the browser's viewport.
                width, height = self.computer_display
                params.append({"type": "computer_use_preview", "display_width": width,
                               "display_height": height, "environment": "browser"})
            else:
                params.append({"type": "computer"})
        if self.catalog is not None:
            params.append(self.catalog.tool_param())
        params.extend(self.hosted_tools)
        return params


@dataclass
class CallRecord:
    call_id: str
    type: str
    summary: str
    ok: bool = True
    outcome: str = ""
    duration_s: float = 0.0
    background: bool = False  # an async tool left running


@dataclass
class DispatchResult:
    outputs: list[Output]
    records: list[CallRecord]
    #: set when a call must end the run (a refused safety check)
    stop: str | None = None


def is_actionable(item: dict[str, Any], answered: set[str]) -> bool:
    """Does this output item need an answer from us? (protocol.md table A)"""
    kind = item.get("type")
    if kind not in OUTPUT_TYPE:
        return False
    if kind == "shell_call":
        env = item.get("environment")
        if env is not None and env.get("type") != "local":
            return False  # container_auto / container_reference: the server ran it
    if kind == "tool_search_call" and (item.get("execution") != "client"
                                       or not item.get("call_id")):
        return False
    return call_id_of(item) not in answered


def _summary(item: dict[str, Any]) -> str:
    kind = item["type"]
    if kind == "function_call":
        return f"{item.get('name')}({str(item.get('arguments', ''))[:80]})"
    if kind == "custom_tool_call":
        return f"{item.get('name')}<{str(item.get('input', ''))[:80]!r}>"
    if kind == "shell_call":
        return " && ".join((item.get("action") or {}).get("commands") or [])[:120]
    if kind == "local_shell_call":
        return " ".join((item.get("action") or {}).get("command") or [])[:120]
    if kind == "apply_patch_call":
        op = item.get("operation") or {}
        return f"{op.get('type')} {op.get('path')}"
    if kind == "computer_call":
        actions = item.get("actions") or ([item["action"]] if item.get("action") else [])
        return ", ".join(str(a.get("type")) for a in actions) or "screenshot"
    if kind == "tool_search_call":
        return json.dumps(item.get("arguments"))[:120]
    if kind == "mcp_approval_request":
        return f"{item.get('server_label')}.{item.get('name')}"
    return kind


def _outcome(output: Output) -> tuple[bool, str]:
    """(looks successful, one-line outcome) for progress and the turn records."""
    kind = output.get("type")
    if kind == "shell_call_output":
        codes = [(c.get("outcome") or {}).get("exit_code", "timeout") for c in output["output"]]
        return all(c == 0 for c in codes), f"exit {codes}"
    if kind == "apply_patch_call_output":
        return output.get("status") == "completed", f"{output.get('status')}: " + str(
            output.get("output") or "")[:100]
    if kind == "mcp_approval_response":
        return True, str(output.get("reason"))
    if kind == "tool_search_output":
        return True, f"{len(output.get('tools') or [])} tool group(s)"
    if kind == "computer_call_output":
        return True, "screenshot"
    text = output.get("output")
    text = text if isinstance(text, str) else json.dumps(text)[:100]
    failed = text.startswith(("error", "denied", "internal error", "not enabled"))
    return not failed, text[:100]


_ENVELOPE_PATH = re.compile(r"^\*\*\* (?:Add|Delete|Update) File: (.+)$|^\*\*\* Move to: (.+)$",
                            re.MULTILINE)


def _file_key(path: str) -> tuple[str, ...]:
    return ("file", posixpath.normpath(path.strip()))


class Dispatcher:
    """Runs the actionable items of one response; owns the per-resource locks."""

    def __init__(self, toolbox: Toolbox, on_event: EventSink | None = None) -> None:
        self.toolbox = toolbox
        self._sink = on_event
        self._locks: dict[tuple[str, ...], asyncio.Lock] = {}

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        """Tell the observers; an observer that fails must never cost a call its answer."""
        if self._sink is None:
            return
        try:
            self._sink(kind, data)
        except Exception:
            log.exception("progress observer failed on %s", kind)

    # -- routing ------------------------------------------------------------------------

    def _resources(self, item: dict[str, Any]) -> list[tuple[str, ...]]:
        kind = item["type"]
        if kind == "computer_call":
            return [("browser",)]
        if kind == "apply_patch_call":
            return [_file_key(str((item.get("operation") or {}).get("path", "")))]
        if kind == "custom_tool_call" and self._is_custom_patch(item):
            found = _ENVELOPE_PATH.findall(str(item.get("input", "")))
            return sorted({_file_key(a or b) for a, b in found})
        if kind == "function_call":
            tool = self.toolbox.functions.get(item.get("name", ""), item.get("namespace"))
            if tool is not None and tool.resource is not None:
                return [tool.resource]
        return []

    def _is_custom_patch(self, item: dict[str, Any]) -> bool:
        return self.toolbox.patch_tool == "custom" and item.get("name") == "apply_patch" \
            and self.toolbox.functions.get("apply_patch") is None

    def _route(self, model: Any, item: dict[str, Any]) -> Callable[[], Awaitable[Output]]:
        tb, kind = self.toolbox, item["type"]
        loaded = tb.catalog.loaded if tb.catalog is not None else None
        if kind == "function_call":
            return lambda: handle_function_call(item, tb.functions, tb.gate, loaded=loaded)
        if kind == "custom_tool_call":
            if self._is_custom_patch(item):
                return lambda: self._custom_patch(model)
            return lambda: handle_custom_tool_call(item, tb.functions, tb.gate, loaded=loaded)
        if kind == "mcp_approval_request":
            return lambda: handle_mcp_approval_request(item, tb.gate)
        if kind == "tool_search_call":
            if tb.catalog is None:
                raise NotEnabled("client tool search is not enabled in this run (no catalog)")
            catalog = tb.catalog
            return lambda: handle_tool_search_call(item, catalog)
        if kind in ("shell_call", "local_shell_call"):
            return self._shell(item, kind)
        if kind == "apply_patch_call":
            return self._patch(model)
        if kind == "computer_call":
            return self._computer_call(model)
        raise NotEnabled(f"{kind} is not supported")

    def _shell(self, item: dict[str, Any], kind: str) -> Callable[[], Awaitable[Output]]:
        tb = self.toolbox
        if tb.session is None or tb.gate is None:
            raise NotEnabled(f"{kind} is not enabled in this run (no sandbox session)")
        limits = tb.shell_limits if tb.shell_limits is not None else Limits()
        session, gate = tb.session, tb.gate
        if kind == "local_shell_call":
            return lambda: handle_local_shell_call(item, session, gate, limits=limits,
                                                   id_field=tb.local_shell_id_field)
        return lambda: handle_shell_call(item, session, gate, limits=limits)

    def _patch_allow(self, call_id: str) -> Callable[..., Awaitable[Verdict]]:
        gate = self.toolbox.gate

        async def allow(path: str, kind: Any) -> Verdict:
            if gate is None:  # no policy, no writes: refusing is the only safe answer
                return Verdict(Decision.DENY, "file changes need a policy gate, and this run has none")
            return await gate.patch(path, kind, call_id=call_id)

        return allow

    def _patch(self, model: Any) -> Callable[[], Awaitable[Output]]:
        tb = self.toolbox
        if tb.session is None or tb.patch_tool == "off":
            raise NotEnabled("apply_patch is not enabled in this run")
        session = tb.session
        return lambda: patch_handlers.handle_apply_patch_call(  # type: ignore[return-value]
            model, session, allow=self._patch_allow(model.call_id),
            read_only_globs=tb.patch_read_only_globs, dry_run=tb.patch_dry_run)

    def _custom_patch(self, model: Any) -> Awaitable[Output]:
        tb = self.toolbox
        if tb.session is None:
            raise NotEnabled("the apply_patch custom tool is not enabled in this run")
        result: Awaitable[Output] = patch_handlers.handle_apply_patch_custom_call(  # type: ignore[assignment]
            model, tb.session, allow=self._patch_allow(model.call_id),
            read_only_globs=tb.patch_read_only_globs, dry_run=tb.patch_dry_run)
        return result

    def _computer_call(self, model: Any) -> Callable[[], Awaitable[Output]]:
        tb = self.toolbox
        if tb.browser is None:
            raise NotEnabled("computer use is not enabled in this run (no browser)")
        browser = tb.browser
        return lambda: computer_handlers.handle_computer_call(
            model, browser, safety=tb.computer_safety, display=tb.computer_display)

    # -- running ------------------------------------------------------------------------

    def _valid(self, item: dict[str, Any], output: Any) -> bool:
        """An output must be a dict of the matching type that answers exactly this call."""
        if not isinstance(output, dict) or output.get("type") != OUTPUT_TYPE[item["type"]]:
            return False
        key = {"mcp_approval_request": "approval_request_id",
               "local_shell_call": "id" if "id" in output else "call_id"}.get(item["type"],
                                                                               "call_id")
        return output.get(key) == call_id_of(item)

    def _is_safety_refusal(self, exc: BaseException) -> bool:
        return isinstance(exc, SafetyCheckRefused)

    async def _one(self, model: Any, item: dict[str, Any], record: CallRecord,
                   stop: list[str], deadline: float) -> Output | None:
        start = time.perf_counter()
        self.on_event("call_start", {"call_id": record.call_id, "type": record.type,
                                     "summary": record.summary})
        output: Output | None
        try:
            if item.get("status", "completed") != "completed":
                raise NotEnabled(f"not executed: the call is {item.get('status')}")
            run = self._route(model, item)
            if item["type"] in ("function_call", "custom_tool_call") and item.get("async"):
                self.toolbox.tasks.start(item, run)
                record.background, record.outcome = True, "running in the background"
                output = None
            else:
                try:
                    # The deadline covers waiting for the resource too: a call queued behind a
                    # slow one on the same browser or file still ends on time.
                    async with asyncio.timeout(deadline), contextlib.AsyncExitStack() as stack:
                        for key in self._resources(item):
                            await stack.enter_async_context(
                                self._locks.setdefault(key, asyncio.Lock()))
                        output = await run()
                except TimeoutError:
                    raise SandboxTimeout(f"the call ran past its {deadline:g} s deadline") from None
                if not self._valid(item, output):
                    output = error_output(item, "internal error: the handler returned an "
                                                "output that does not answer this call")
                else:
                    assert output is not None
                    output = echo_caller(item, output)
        except Exception as exc:
            if self._is_safety_refusal(exc):
                stop.append(describe(exc))
            output = error_output(item, describe(exc))
        record.duration_s = time.perf_counter() - start
        if output is not None:
            record.ok, record.outcome = _outcome(output)
        self.on_event("call_end", {"call_id": record.call_id, "type": record.type,
                                   "ok": record.ok, "outcome": record.outcome,
                                   "duration_s": record.duration_s,
                                   "background": record.background})
        return output

    @staticmethod
    def _work(items: Sequence[BaseModel | dict[str, Any]]) -> list[tuple[Any, dict[str, Any]]]:
        dicts = [as_dict(i) for i in items]
        # Hosted calls come back already answered by an output item in the same response.
        answered = {call_id_of(d) for d in dicts if str(d.get("type", "")).endswith("_output")}
        return [(m, d) for m, d in zip(items, dicts, strict=True) if is_actionable(d, answered)]

    def count_actionable(self, items: Sequence[BaseModel | dict[str, Any]]) -> int:
        return len(self._work(items))

    async def run(self, items: Sequence[BaseModel | dict[str, Any]], *,
                  timeout_s: float | None = None) -> DispatchResult:
        """Answer every actionable item in ``items`` (one response's output); no call runs
        longer than the per-call deadline, nor past ``timeout_s`` (the run's wall budget)."""
        work = self._work(items)
        deadline = self.toolbox.call_timeout_s
        if timeout_s is not None:
            deadline = min(deadline, timeout_s)
        records = [CallRecord(call_id_of(d), d["type"], _summary(d)) for _, d in work]
        stop: list[str] = []
        results = await asyncio.gather(
            *(self._one(m, d, r, stop, deadline)
              for (m, d), r in zip(work, records, strict=True)))
        outputs = [o for o in results if o is not None]
        return DispatchResult(outputs, records, stop[0] if stop else None)
