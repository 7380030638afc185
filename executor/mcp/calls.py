"""One MCP tool call through sandloop's own handlers, as structured content and readable text.

Nothing here runs a command, applies a patch or drives the browser itself: the shell goes
through :func:`executor.handlers.shell.run_steps`, patches through
:func:`executor.handlers.apply_patch.apply_ops`, the computer through
:func:`executor.handlers.computer.handle_computer_call` — the same gate, limits, audit records
and refusal texts as ``sandloop run``. What this module adds is the MCP shape of the answer
(:class:`CallAnswer`) and, for the run's log, the call and its output as the Responses API
would have carried them, so ``sandloop report`` shows an MCP session like any other run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses import ResponseComputerToolCall
from pydantic import ValidationError

from executor.handlers.apply_patch import apply_ops, gate_allow, gate_outcomes, gate_refused
from executor.handlers.computer import handle_computer_call
from executor.handlers.shell import Step, apply_length, effective_timeout_ms, run_steps, shell_call_output
from executor.items import COMPUTER
from executor.mcp.limits import too_many_files
from executor.navigation import handle_navigation
from executor.toolbox import Toolbox
from sandbox.browser import Browser
from sandbox.computer import Computer
from sandbox.patch import formats, v4a
from sandbox.patch.apply import PatchResult
from sandloop.errors import SandloopError, describe
from sandloop.files import PatchKind
from sandloop.verdict import Verdict

__all__ = ["CallAnswer", "apply_patch", "computer", "failure", "navigation", "shell", "shell_result", "shell_text"]


@dataclass(frozen=True)
class CallAnswer:
    """What a tool call answers: text for the model, the structured content (matching the
    tool's output schema), whether it failed, an optional PNG; and for the run's log, the call
    and its output in the Responses API's shapes."""

    text: str
    structured: dict[str, Any] | None  # None: the call failed before it had a result
    is_error: bool
    item: dict[str, Any]
    output: dict[str, Any]
    png: bytes | None = None


def _refusal(verdict: Verdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {"rule_id": verdict.rule_id, "justification": verdict.justification, "source": verdict.source}


def _ready(toolbox: Toolbox) -> tuple[Any, Any]:
    missing = toolbox.unavailable("this tool", "session", "gate")
    if missing is not None:
        raise SandloopError(missing)
    return toolbox.session, toolbox.gate


# -- shell ---------------------------------------------------------------------------------


def shell_result(command: str, step: Step) -> dict[str, Any]:
    """One command's entry in the shell tool's structured content."""
    return {
        "command": command, "exit_code": step.exit_code,
        "timed_out": step.exit_code is None, "skipped": step.skipped,
        "stdout": step.stdout, "stderr": step.stderr, "duration_s": round(step.duration_s, 4),
        "truncated": {"stdout_bytes": step.dropped_bytes[0], "stderr_bytes": step.dropped_bytes[1],
                      "chars": step.dropped_chars},
        "refused": _refusal(step.refusal),
    }


def shell_text(results: Sequence[dict[str, Any]], timeout_ms: int) -> str:
    """The same entries as text for the model: each command, its output, how it ended."""
    parts: list[str] = []
    for r in results:
        lines = [f"$ {r['command']}"]
        if r["stdout"]:
            lines.append(r["stdout"].rstrip("\n"))
        if r["stderr"]:
            lines.append("[stderr]\n" + r["stderr"].rstrip("\n"))
        if r["refused"] is not None:
            ended = f"refused by policy (rule {r['refused']['rule_id'] or 'default'})"
        elif r["skipped"]:
            ended = "skipped"
        elif r["timed_out"]:
            ended = f"timed out after {timeout_ms} ms (its processes killed; the output above is what it wrote)"
        else:
            ended = f"exit {r['exit_code']}"
        cut = r["truncated"]
        if cut["stdout_bytes"] or cut["stderr_bytes"] or cut["chars"]:
            ended += (f"; output truncated ({cut['stdout_bytes']} stdout and {cut['stderr_bytes']} "
                      f"stderr bytes dropped by the sandbox, {cut['chars']} chars cut)")
        lines.append(f"→ {ended}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


async def shell(toolbox: Toolbox, call_id: str, args: dict[str, Any]) -> CallAnswer:
    """Run ``args['commands']`` as a shell_call would run: each decided by the gate, in order."""
    session, gate = _ready(toolbox)
    commands: list[str] = list(args["commands"])
    limit: int | None = args.get("max_output_length")
    timeout_ms = effective_timeout_ms(args.get("timeout_ms"), toolbox.limits)
    steps = await run_steps(commands, session, gate, call_id=call_id, timeout_ms=timeout_ms,
                            limits=toolbox.limits, memory=toolbox.memory)
    results = [shell_result(c, apply_length(s, limit)) for c, s in zip(commands, steps, strict=True)]
    item = {"type": "shell_call", "id": f"sh_{call_id}", "call_id": call_id, "status": "completed",
            "action": {"commands": commands, "timeout_ms": timeout_ms, "max_output_length": limit}}
    failed = any(r["refused"] is not None for r in results)
    return CallAnswer(shell_text(results, timeout_ms), {"results": results, "timeout_ms": timeout_ms}, failed, item,
                      dict(shell_call_output(call_id, steps, max_output_length=limit)))


# -- apply_patch ---------------------------------------------------------------------------


def _patch_operations(args: dict[str, Any]) -> list[v4a.FileOp]:
    fmt = args.get("format", "auto")
    operation, path = args.get("operation"), args.get("path")
    if fmt == "v4a" or (fmt == "auto" and operation is not None):
        if operation is None or path is None:
            raise SandloopError("a V4A diff needs 'operation' (create_file, update_file or delete_file) "
                                "and 'path'\nNo file was changed.")
        try:
            return [v4a.from_api(operation, path, args["patch"] if operation != "delete_file" else None)]
        except SandloopError as exc:
            raise type(exc)(f"{operation} {path}: {exc}\nNo file was changed.") from exc
    if operation is not None or path is not None:
        raise SandloopError(f"'operation' and 'path' go with a V4A diff, not an {fmt} patch: a "
                            "multi-file patch names its own files\nNo file was changed.")
    operations = formats.parse(args["patch"], fmt)
    problem = too_many_files(len(operations))
    if problem is not None:
        raise SandloopError(problem)
    return operations


def _patch_item(call_id: str, args: dict[str, Any]) -> dict[str, Any]:
    if args.get("operation") is not None:
        op = {"type": args["operation"], "path": args.get("path")}
        if args["operation"] != "delete_file":
            op["diff"] = args["patch"]
        return {"type": "apply_patch_call", "id": f"apc_{call_id}", "call_id": call_id, "status": "completed",
                "operation": op}
    return {"type": "custom_tool_call", "id": f"ctc_{call_id}", "call_id": call_id, "name": "apply_patch",
            "input": args["patch"]}


async def apply_patch(toolbox: Toolbox, call_id: str, args: dict[str, Any]) -> CallAnswer:
    """Apply one patch in one transaction: every file decided by the gate, all or nothing."""
    session, gate = _ready(toolbox)
    ask = gate_allow(gate, call_id, len(args["patch"].encode("utf-8")))
    record = gate_outcomes(gate, call_id)
    record_refusal = gate_refused(gate, call_id)
    refused: dict[str, Any] | None = None
    files: list[dict[str, str]] = []

    def note(path: str, kind: PatchKind, verdict: Verdict) -> None:
        nonlocal refused
        if not verdict.allowed and refused is None:
            refused = {**(_refusal(verdict) or {}), "path": path, "operation": kind}

    async def allow(path: str, kind: PatchKind) -> Verdict:
        verdict = await ask(path, kind)
        note(path, kind, verdict)
        return verdict

    async def refuse(path: str, kind: PatchKind, verdict: Verdict) -> None:
        # a path the patch refuses itself (read-only, outside the workspace, a symlink)
        await record_refusal(path, kind, verdict)
        note(path, kind, verdict)

    async def applied(result: PatchResult) -> None:
        await record(result)
        files.extend({"path": c.path, "change": "deleted" if c.content is None else "written"}
                     for c in result.changes)

    ok, text = await apply_ops(lambda: _patch_operations(args), session, allow=allow,
                               read_only_globs=toolbox.patch_read_only_globs, dry_run=False, on_applied=applied,
                               refused=refuse)
    item = _patch_item(call_id, args)
    output: dict[str, Any] = (
        {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed" if ok else "failed",
         "output": text} if item["type"] == "apply_patch_call"
        else {"type": "custom_tool_call_output", "call_id": call_id, "output": text})
    return CallAnswer(text, {"applied": ok, "files": files, "message": text, "refused": refused},
                      not ok, item, output)


# -- the computer --------------------------------------------------------------------------


def _computer(toolbox: Toolbox) -> Computer:
    missing = toolbox.unavailable("computer use", "computer")
    if missing is not None:
        raise SandloopError(missing)
    assert toolbox.computer is not None
    return toolbox.computer


def _browser(toolbox: Toolbox) -> Browser:
    computer = _computer(toolbox)
    if not isinstance(computer, Browser):
        raise SandloopError(f"navigation needs a browser; this run's computer is a {computer.environment} one")
    return computer


async def computer(toolbox: Toolbox, call_id: str, args: dict[str, Any]) -> CallAnswer:
    """The actions on the computer, then one screenshot (as a computer_call is answered). The
    caller holds the computer for the call: the page's requests are recorded against it."""
    screen = _computer(toolbox)
    item = {"type": "computer_call", "id": f"cu_{call_id}", "call_id": call_id, "status": "completed",
            "actions": list(args["actions"]), "pending_safety_checks": []}
    try:
        call = ResponseComputerToolCall.model_validate(item)
    except ValidationError as exc:
        raise SandloopError(f"invalid actions: {exc.errors(include_url=False)[0]['msg']}") from None
    toolbox.holding[COMPUTER] = call_id
    try:
        answer = await handle_computer_call(call, screen, safety=toolbox.computer_safety, display=None,
                                            gate=toolbox.gate)
        url = await screen.current_url()
    finally:
        toolbox.holding.pop(COMPUTER, None)
    image_url = str(answer.output["output"]["image_url"])
    png = base64.b64decode(image_url.split(",", 1)[1])
    width, height = screen.screen
    notes = list(answer.notes)
    text = f"screenshot of {url} ({width}×{height})" + "".join(f"\nnote: {n}" for n in notes)
    return CallAnswer(text, {"url": url, "width": width, "height": height, "notes": notes}, False,
                      item, dict(answer.output), png)


async def navigation(toolbox: Toolbox, name: str, call_id: str, args: dict[str, Any]) -> CallAnswer:
    """``navigate(url)``, ``back()``, ``forward()``: the navigation tools of ``sandloop run``."""
    browser = _browser(toolbox)
    toolbox.holding[COMPUTER] = call_id
    try:
        text = await handle_navigation(name, args, browser)
        url = await browser.current_url()
    finally:
        toolbox.holding.pop(COMPUTER, None)
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(args), "status": "completed"}
    output = {"type": "function_call_output", "call_id": call_id, "output": text}
    return CallAnswer(text, {"result": text, "url": url}, text.startswith("error"), item, output)


def failure(call_id: str, name: str, args: dict[str, Any], exc: BaseException) -> CallAnswer:
    """A call that could not run at all (a sandbox that would not start, invalid actions)."""
    text = describe(exc)
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(args), "status": "completed"}
    return CallAnswer(text, None, True, item, {"type": "function_call_output", "call_id": call_id, "output": text})
