"""local_shell_call (legacy, codex-mini) → local_shell_call_output (protocol.md A.4).

The action is an argv, not a shell string: it is quoted back into one command line (so the
policy sees exactly what runs) and executed like a shell_call command. The answer's ``output``
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

from executor.gate import Gate
from sandbox.base import Session
from sandloop.limits import Limits

from .shell import effective_timeout_ms, run_steps

__all__ = ["handle_local_shell_call", "local_shell_command"]

IdField = Literal["id", "call_id"]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    line = " ".join([*assignments, shlex.join(str(a) for a in action.get("command") or [])])
    cwd = action.get("working_directory")
    if cwd:
        target = posixpath.normpath(posixpath.join(workspace, str(cwd)))
        if (target == workspace or target.startswith(workspace.rstrip("/") + "/")) and target != workspace:
            line = f"cd {shlex.quote(target)} && {line}"
        # A directory outside the workspace is not there to go to; the command runs at the root.
    return line


async def handle_local_shell_call(
    item: dict[str, Any],
    session: Session,
    gate: Gate,
    *,
    limits: Limits | None = None,
    id_field: IdField = "id",
) -> dict[str, Any]:
    limits = limits or Limits()
    action = item.get("action") or {}
    call_id = str(item.get("call_id") or item.get("id"))
    timeout_ms = effective_timeout_ms(action.get("timeout_ms"), limits)
    command = local_shell_command(action, session.workspace)
    (step,) = await run_steps([command], session, gate, call_id=call_id, timeout_ms=timeout_ms, limits=limits)
    body = {
        "stdout": step.stdout,
        "stderr": step.stderr,
        "exit_code": step.exit_code,
        "timed_out": step.exit_code is None,
    }
    return {"type": "local_shell_call_output", id_field: call_id, "output": json.dumps(body)}
