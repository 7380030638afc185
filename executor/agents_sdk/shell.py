"""The ShellTool executor: the SDK's shell calls run through sandloop's shell handler.

Every command asks the gate (an approved prompt is answered by the SDK's approval, see
:mod:`executor.agents_sdk.policy`), runs in the session with the policy's limits, and comes back
as sandloop answers it: stdout and stderr, a refusal on stderr with exit code 126, a timeout as
a ``timeout`` outcome. Every ``exit`` outcome carries its exit code — the SDK would send
``"exit_code": null`` for a missing one, which the Responses API refuses.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.tool import ShellCallOutcome, ShellCommandOutput, ShellCommandRequest, ShellResult
from openai.types.responses import ResponseFunctionShellToolCall

from executor.agents_sdk.policy import PolicyBridge, as_dict
from executor.handlers.shell import EXIT_BACKEND_ERROR, handle_shell_call
from sandloop.errors import describe

__all__ = ["SandboxShell"]

log = logging.getLogger("sandloop.agents_sdk")


def _outcome(entry: dict[str, Any]) -> ShellCallOutcome:
    outcome = entry.get("outcome") or {}
    if outcome.get("type") == "timeout":
        return ShellCallOutcome(type="timeout")
    return ShellCallOutcome(type="exit", exit_code=int(outcome.get("exit_code", EXIT_BACKEND_ERROR)))


class SandboxShell:
    """A ``ShellExecutor``: ``ShellTool(executor=SandboxShell(bridge, "shell"))``."""

    def __init__(self, bridge: PolicyBridge, tool_name: str) -> None:
        self.bridge, self.tool_name = bridge, tool_name

    async def __call__(self, request: ShellCommandRequest) -> ShellResult:
        data = request.data
        commands = list(data.action.commands)
        tb = self.bridge.toolbox
        assert tb.session is not None  # PolicyBridge checked it
        try:
            # the original call: a model on a fresh run, a dict after a RunState round trip
            call = ResponseFunctionShellToolCall.model_validate(as_dict(data.raw))
            out = await handle_shell_call(call, tb.session, self.bridge.executing_gate(request.ctx_wrapper,
                                                                                       self.tool_name),
                                          limits=tb.limits, memory=tb.memory)
        except Exception as exc:  # the model gets the reason, never the SDK's traceback text
            log.warning("shell call %s failed: %s", data.call_id, exc)
            return ShellResult(output=[ShellCommandOutput(
                stderr=describe(exc), outcome=ShellCallOutcome(type="exit", exit_code=EXIT_BACKEND_ERROR))])
        entries = list(out.get("output") or [])
        return ShellResult(output=[
            ShellCommandOutput(stdout=str(e.get("stdout") or ""), stderr=str(e.get("stderr") or ""),
                               outcome=_outcome(e), command=commands[i] if i < len(commands) else None)
            for i, e in enumerate(entries)])
