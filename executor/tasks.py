"""Async tools (``async: true``): calls that run in the background while the loop carries on.

The model gets each task's output, under the original call_id, in a later request; the built-in
``wait`` tool lets it block on those task handles (the call_ids). A task that raises is answered
with the error like any other call: the dispatcher hands in how to build that answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence

from executor.items import Output
from executor.tools import FunctionTool

__all__ = ["WAIT_TOOL_NAME", "AsyncTasks"]

WAIT_TOOL_NAME = "wait"


class AsyncTasks:
    """Background runs of ``async: true`` calls, keyed by call_id (the model's task handle)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Output]] = {}
        self._delivered: set[str] = set()

    def start(self, call_id: str, run: Callable[[], Awaitable[Output]],
              on_error: Callable[[Exception], Output]) -> None:
        async def guarded() -> Output:
            try:
                return await run()
            except Exception as exc:  # the call is answered even when the tool raises
                return on_error(exc)

        self._tasks[call_id] = asyncio.create_task(guarded(), name=f"async-tool-{call_id}")

    @property
    def pending(self) -> list[str]:
        return [cid for cid, task in self._tasks.items() if not task.done()]

    def __len__(self) -> int:
        return len(self._tasks)

    def take_ready(self) -> list[Output]:
        """Outputs of tasks that finished since the last call, in start order."""
        ready = []
        for cid, task in list(self._tasks.items()):
            if task.done():
                ready.append(task.result())
                del self._tasks[cid]
                self._delivered.add(cid)
        return ready

    async def wait(self, handles: Sequence[str] | None, timeout_s: float | None) -> dict[str, str]:
        """Block until the given tasks (all pending ones when None) finish or the timeout."""
        wanted = list(handles) if handles else list(self._tasks)
        tasks = [self._tasks[h] for h in wanted if h in self._tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        status = {}
        for h in wanted:
            if h in self._delivered:
                status[h] = "done (output already sent)"
            elif h not in self._tasks:
                status[h] = "unknown handle"
            else:
                status[h] = "done (output sent with this request)" if self._tasks[h].done() \
                    else "still running"
        return status

    async def wait_any(self, timeout_s: float | None) -> None:
        """Block until at least one pending task finishes (or the timeout)."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)

    async def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def wait_tool(self) -> FunctionTool:
        """The built-in ``wait`` function tool bound to these tasks."""

        async def wait(handles: list[str] | None, timeout_s: float | None) -> str:
            return json.dumps(await self.wait(handles, timeout_s))

        return FunctionTool(
            name=WAIT_TOOL_NAME,
            fn=wait,
            description=(
                "Block until background (async) tool calls finish. handles: the call_ids to "
                "wait for, or null for all pending ones; timeout_s: seconds, or null for no "
                "limit. Finished results arrive as their own tool outputs."),
            parameters={
                "type": "object",
                "properties": {
                    "handles": {"type": ["array", "null"], "items": {"type": "string"}},
                    "timeout_s": {"type": ["number", "null"]},
                },
                "required": ["handles", "timeout_s"],
                "additionalProperties": False,
            },
            gated=False,
        )
