"""One MCP session: its own sandloop run, opened at its first tool call and closed with it.

The run is :meth:`executor.run.Run.open` — the policy, the approvals (here: MCP elicitation),
the hash-chained audit log, the Docker session and the run folder — exactly as ``sandloop run``
opens it. The browser starts at the first computer or navigation call (most sessions never use
one). Every call is written to the run's request log as the call item and its output, in the
Responses API's shapes, so ``sandloop report`` renders the session; closing writes the summary
(with the audit chain's head) and removes the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.mcp import calls
from executor.mcp.approvals import Ask, ElicitApprovals
from executor.mcp.tools import APPLY_PATCH, COMPUTER, SHELL
from executor.run import Run, RunOptions, open_computer, open_desktop_computer
from sandloop.errors import SandboxUnavailable

__all__ = ["McpSession", "ServeOptions"]


@dataclass(frozen=True)
class ServeOptions:
    """What every session of one ``sandloop mcp`` server starts from."""

    repo: Path
    policy: str | None = None
    #: where the computer tool acts: auto, container, local or off (Chromium), or desktop; None:
    #: the policy's ``[computer] environment`` (resolved by the server: :func:`executor.run.placement`)
    browser: str | None = None
    backend: str | None = None
    image: str | None = None
    #: how clients reach the server ("stdio", or the HTTP URL), for the run's log
    endpoint: str = "stdio"


class McpSession:
    """One MCP session's run. :meth:`call` answers a tool call; :meth:`close` ends the run."""

    def __init__(self, options: ServeOptions, *, client: str, tell: Callable[[str], None]) -> None:
        self.options = options
        self.client = client
        self.id = uuid.uuid4().hex[:8]
        self.approvals = ElicitApprovals()
        self._tell = tell
        self._run: Run | None = None
        self._opening = asyncio.Lock()
        self._browser = asyncio.Lock()  # one call acts on the page at a time
        self._patches = asyncio.Lock()  # patches read and write files: one transaction at a time
        self._browser_stack = contextlib.AsyncExitStack()
        self._numbers = itertools.count(1)
        self._calls = 0
        self._started = time.monotonic()
        self._closed = False

    async def run(self) -> Run:
        """The session's run, opened on first use."""
        async with self._opening:
            if self._closed:
                raise SandboxUnavailable("this MCP session has ended")
            if self._run is None:
                opts = self.options
                run = await Run.open(RunOptions(repo=opts.repo, policy=opts.policy, browser="off",
                                                approvals=self.approvals, backend=opts.backend, image=opts.image))
                self._run = run
                await run.log_start(f"MCP session from {self.client}", model=None, endpoint=opts.endpoint,
                                    client=self.client, placement=opts.browser)
                self._tell(f"session {self.id} ({self.client}): run folder {run.folder}")
            return self._run

    async def _computer(self, run: Run) -> None:
        if run.toolbox.computer is not None:
            return
        where = self.options.browser or "auto"
        if where == "desktop":
            await open_desktop_computer(run.toolbox, run.gate, run.engine.policy, self._browser_stack,
                                        repo=self.options.repo)
        else:
            await open_computer(run.toolbox, run.gate, run.engine.policy, self._browser_stack, placement=where)

    async def _dispatch(self, name: str, call_id: str, args: dict[str, Any]) -> calls.CallAnswer:
        run = await self.run()
        toolbox = run.toolbox
        if name == SHELL.name:
            return await calls.shell(toolbox, call_id, args)
        if name == APPLY_PATCH.name:
            async with self._patches:
                return await calls.apply_patch(toolbox, call_id, args)
        async with self._browser:
            await self._computer(run)
            if name == COMPUTER:
                return await calls.computer(toolbox, call_id, args)
            return await calls.navigation(toolbox, name, call_id, args)

    async def call(self, name: str, args: dict[str, Any], ask: Ask) -> calls.CallAnswer:
        """Answer one tools/call (arguments already checked against the tool's schema); the
        policy's questions during it go to ``ask``. Never raises: a failure is the answer."""
        call_id = f"mcp_{self.id}_{next(self._numbers)}"
        started = time.monotonic()
        with self.approvals.asking(call_id, ask):
            try:
                answer = await self._dispatch(name, call_id, args)
            except Exception as exc:  # the client gets the reason, never a traceback
                answer = calls.failure(call_id, name, args, exc)
        self._calls += 1
        if self._run is not None:
            self._run.log.event("call", self._calls, tool=name, item=answer.item, output=answer.output,
                                is_error=answer.is_error, duration_s=round(time.monotonic() - started, 4))
        return answer

    async def close(self) -> None:
        """End the run: its summary (with the audit chain's head), then the browser and the
        sandbox. Idempotent; called when the MCP session ends, however it ends."""
        async with self._opening:
            if self._closed:
                return
            self._closed = True
            run = self._run
        if run is None:
            return
        try:
            run.log.summary({"final_text": "", "reason": "disconnected", "exit_code": 0,
                             "detail": f"the MCP session ended after {self._calls} tool call(s)",
                             "tool_calls": self._calls, "wall_s": round(time.monotonic() - self._started, 3),
                             "turns": []})
        finally:
            try:
                await self._browser_stack.aclose()
            finally:
                await run.close()
        self._tell(f"session {self.id} closed: audit head {run.audit_head} ({run.folder})")
