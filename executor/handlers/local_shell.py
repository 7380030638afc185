"""local_shell_call (legacy, codex-mini) → local_shell_call_output.

The action is an argv, not a shell string: it is quoted back into one command line (so the
policy sees exactly what runs) and executed like a shell_call command. The usual ``bash -lc CMD``
runs as ``bash -c CMD``: never as a login shell, whose start-up files the sandbox can write. The answer's ``output``
is a JSON string of stdout, stderr, exit code and whether it timed out.

Which field carries the call id on the answer is disputed: the SDK's param type requires ``id``
(set to the call id), the guide and the Agents SDK send ``call_id``. We accept both on the way
in (a call with only ``id``), send the SDK's shape by default, and make it one switch.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from typing import Any, Literal

from openai.types.responses.response_output_item import LocalShellCall

from executor.gate import Gate
from executor.handlers.shell import Step, effective_timeout_ms, run_steps, session_unavailable
from executor.items import Output
from executor.kinds import ToolKind
from sandbox.base import Session
from sandloop.limits import Limits

__all__ = ["LocalShellCallKind", "handle_local_shell_call", "local_shell_command"]

IdField = Literal["id", "call_id"]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_SHELL_C = re.compile(r"^-[a-z]*c[a-z]*$")


def _without_login(argv: list[Any]) -> list[str]:
    """``bash -lc CMD`` (how these calls usually arrive) as ``bash -c CMD``: a login or
    interactive shell would first run start-up files the sandbox can write, so sandloop runs
    the command in a plain shell."""
    words = [str(a) for a in argv]
    if len(words) >= 3 and posixpath.basename(words[0]) in ("bash", "sh") and _SHELL_C.match(words[1]):
        return [words[0], "-c", *words[2:]]
    return words


def local_shell_command(action: dict[str, Any], workspace: str) -> str:
    """The argv as one command line, run in ``working_directory`` when it is in the workspace.

    The action's ``env`` becomes ``NAME=value`` assignments in front of the command, so the
    policy decides on exactly what runs (``BASH_ENV=…``, ``LD_PRELOAD=…`` are not knowable and
    get the default decision) instead of variables slipping in beside the gate."""
    assignments = [
        f"{name}={shlex.quote(str(value))}"
        for name, value in (action.get("env") or {}).items()
        if _ENV_NAME.fullmatch(str(name))
    ]
    line = " ".join([*assignments, shlex.join(_without_login(action.get("command") or []))])
    cwd = action.get("working_directory")
    if cwd:
        target = posixpath.normpath(posixpath.join(workspace, str(cwd)))
        if (target == workspace or target.startswith(workspace.rstrip("/") + "/")) and target != workspace:
            line = f"cd {shlex.quote(target)} && {line}"
        # A directory outside the workspace is not there to go to; the command runs at the root.
    return line


async def handle_local_shell_call(
    call: LocalShellCall,
    session: Session,
    gate: Gate,
    *,
    limits: Limits | None = None,
    id_field: IdField = "id",
) -> Output:
    limits = limits or Limits()
    action = call.action
    timeout_ms = effective_timeout_ms(action.timeout_ms, limits)
    command = local_shell_command(action.model_dump(mode="json"), session.workspace)
    (step,) = await run_steps([command], session, gate, call_id=call.call_id, timeout_ms=timeout_ms,
                              limits=limits)
    return _output(call.call_id, step, id_field)


def _output(call_id: str, step: Step, id_field: IdField) -> Output:
    body = {
        "stdout": step.stdout,
        "stderr": step.stderr,
        "exit_code": step.exit_code,
        "timed_out": step.exit_code is None,
    }
    return {"type": "local_shell_call_output", id_field: call_id, "output": json.dumps(body)}


class LocalShellCallKind(ToolKind[LocalShellCall]):
    call_type = "local_shell_call"
    output_type = "local_shell_call_output"
    model = LocalShellCall

    def call_id(self, item: dict[str, Any]) -> str:
        # Some producers send the correlation key only as the item's ``id``.
        return str(item.get("call_id") or item.get("id") or "")

    def parse(self, item: dict[str, Any]) -> LocalShellCall:
        return super().parse({**item, "call_id": self.call_id(item)})

    def summary(self, item: dict[str, Any]) -> str:
        action = item.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        return " ".join(map(str, command))[:120] if isinstance(command, list) else self.call_type

    def tool_params(self) -> list[dict[str, Any]]:
        tb = self.toolbox
        return [{"type": "local_shell"}] if tb.session is not None and tb.legacy_local_shell else []

    def unavailable(self, call: LocalShellCall) -> str | None:
        return session_unavailable(self.toolbox, self.call_type)

    async def handle(self, call: LocalShellCall) -> Output:
        tb = self.toolbox
        assert tb.session is not None and tb.gate is not None  # unavailable() said so
        return await handle_local_shell_call(call, tb.session, tb.gate, limits=tb.limits,
                                             id_field=tb.local_shell_id_field)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return _output(self.call_id(item), Step("", text, 1), self.toolbox.local_shell_id_field)

    def answers(self, item: dict[str, Any], output: Any) -> bool:
        return (isinstance(output, dict) and output.get("type") == self.output_type
                and output.get(self.toolbox.local_shell_id_field) == self.call_id(item))

    def with_note(self, output: Output, note: str) -> Output | None:
        body = json.loads(output["output"])
        body["stderr"] = f"{body.get('stderr') or ''}{note}\n"
        return {**output, "output": json.dumps(body)}

    def outcome(self, output: Output) -> tuple[bool, str]:
        code = json.loads(output["output"]).get("exit_code")
        return code == 0, f"exit {code if code is not None else 'timeout'}"
