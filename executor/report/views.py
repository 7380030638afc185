"""One call's view: what a person needs to see of a shell, patch, computer or other call, built
from the call item, its output and the decisions logged for it."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from executor.report.fields import as_int, as_num, as_str, dicts, image_ref, obj, opt_str, pretty, text_of
from executor.report.model import Command, Decision, FilePatch, GenericView, PatchView, SafetyCheck, ShellView

__all__ = ["actions", "generic_view", "patch_view", "safety_checks", "shell_view"]


def shell_view(call: dict[str, Any], output: dict[str, Any] | None,
               decisions: list[Decision], outcomes: list[dict[str, Any]]) -> ShellView:
    """Each command with its output entry, its decision and (when logged) its duration."""
    action = obj(call.get("action"))
    if call.get("type") == "local_shell_call":
        argv = action.get("command")
        commands = [" ".join(map(str, argv))] if isinstance(argv, list) else []
        chunks: list[dict[str, Any]] = []
        if output is not None:
            with contextlib.suppress(ValueError, TypeError):
                body = json.loads(as_str(output.get("output")))
                if isinstance(body, dict):
                    chunks = [{"stdout": body.get("stdout"), "stderr": body.get("stderr"),
                               "outcome": {"type": "timeout"} if body.get("timed_out")
                               else {"type": "exit", "exit_code": body.get("exit_code")}}]
    else:
        commands = [as_str(c) for c in action.get("commands") or [] if isinstance(c, str)]
        chunks = dicts(output.get("output")) if output is not None else []
    pending = list(decisions)
    result: list[Command] = []
    for index, line in enumerate(commands):
        command = Command(line)
        # The gate asks once per command, in order, with the command line as the subject (a
        # legacy argv is quoted again first, so match the first decision left when none is equal).
        match = next((d for d in pending if d.subject == line), None)
        if match is None and call.get("type") == "local_shell_call" and pending:
            match = pending[0]
        if match is not None:
            pending.remove(match)
            command.decision = match
            outcome = next((o for o in outcomes if o.get("subject") == match.subject), None)
            if outcome is not None:
                command.duration_s = as_num(outcome.get("duration_s"))
        if index < len(chunks):
            chunk = chunks[index]
            command.answered = True
            command.stdout, command.stderr = as_str(chunk.get("stdout")), as_str(chunk.get("stderr"))
            end = obj(chunk.get("outcome"))
            command.timed_out = end.get("type") == "timeout"
            command.exit_code = as_int(end.get("exit_code"))
        result.append(command)
    return ShellView(result, as_int(action.get("timeout_ms")), as_int(action.get("max_output_length")))


_ENVELOPE_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.*)$")
_ENVELOPE_MOVE = re.compile(r"^\*\*\* Move to: (.*)$")


def _diff_lines(text: str, op: str) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            lines.append(("hunk", line))
        elif line.startswith("*** "):
            lines.append(("meta", line))
        elif line.startswith("+"):
            lines.append(("add", line[1:]))
        elif line.startswith("-"):
            lines.append(("del", line[1:]))
        elif op in ("create_file", "Add") and line:  # a created file's lines are all added
            lines.append(("add", line))
        else:
            lines.append(("ctx", line[1:] if line.startswith(" ") else line))
    return lines


def _envelope(text: str) -> list[FilePatch]:
    """The custom apply_patch tool's multi-file envelope, one FilePatch per file."""
    files: list[FilePatch] = []
    body: list[str] = []

    def close() -> None:
        if files:
            files[-1].lines = _diff_lines("\n".join(body), files[-1].op)
        body.clear()

    for line in text.splitlines():
        header = _ENVELOPE_FILE.match(line)
        if header:
            close()
            files.append(FilePatch(header.group(1), header.group(2).strip()))
            continue
        move = _ENVELOPE_MOVE.match(line)
        if move and files:
            files[-1].move_to = move.group(1).strip()
        elif line.strip() in ("*** Begin Patch", "*** End Patch"):
            continue
        elif files:
            body.append(line)
    close()
    return files


def _attach_file_decisions(files: list[FilePatch], decisions: list[Decision]) -> None:
    for patch in files:
        # The gate's subject is "<kind> <path>"; the path is the last word.
        patch.decision = next((d for d in decisions if d.subject.endswith(" " + patch.path)
                               or d.subject == patch.path), None)


def patch_view(call: dict[str, Any], output: dict[str, Any] | None,
               decisions: list[Decision]) -> PatchView:
    """The files a patch touches, each with its lines and decision, and the outcome."""
    if call.get("type") == "custom_tool_call":
        files = _envelope(as_str(call.get("input")))
    else:
        op = obj(call.get("operation"))
        kind = as_str(op.get("type"))
        files = [FilePatch(kind, as_str(op.get("path")), lines=_diff_lines(as_str(op.get("diff")), kind))]
    _attach_file_decisions(files, decisions)
    status = opt_str(output.get("status")) if output is not None else None
    message = as_str(output.get("output")) if output is not None else ""
    return PatchView(files, status, message)


def generic_view(call: dict[str, Any], output: dict[str, Any] | None, inline: dict[str, bytes]) -> GenericView:
    """Arguments and output, pretty-printed; images in the output by their sha256 (the bytes of
    inline ones go to ``inline``)."""
    kind = call.get("type")
    if kind == "mcp_approval_request":
        name = f"{as_str(call.get('server_label'))}.{as_str(call.get('name'))}"
    elif kind == "tool_search_call":
        name = "tool search"
    else:
        namespace = opt_str(call.get("namespace"))
        name = (f"{namespace}." if namespace else "") + as_str(call.get("name") or kind)
    arguments = call.get("arguments") if "arguments" in call else call.get("input")
    images: list[str] = []
    if output is None:
        shown = ""
    elif kind == "mcp_approval_request":
        verdict = "approved" if output.get("approve") else "refused"
        shown = f"{verdict}: {as_str(output.get('reason'))}"
    elif kind == "tool_search_call":
        shown = pretty(output.get("tools"))
    else:
        value = output.get("output")
        images = [r for r in (image_ref(p.get("image_url"), inline) for p in dicts(value)) if r]
        shown = text_of(value) if isinstance(value, list) else pretty(value)
    return GenericView(name, pretty(arguments) if arguments is not None else "", shown, images)


def actions(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The GA tool's ``actions``, or the preview tool's one ``action``."""
    if isinstance(call.get("actions"), list):
        return dicts(call["actions"])
    return dicts([call.get("action")])


def safety_checks(call: dict[str, Any], output: dict[str, Any] | None, decisions: list[Decision],
                  stop: tuple[str, str]) -> list[SafetyCheck]:
    """Each pending check and its answer: acknowledged (echoed in the output), refused (a logged
    refusal, or the run stopped on it: ``stop`` is the run's reason and detail), or unanswered;
    and who answered, when a ``safety_check`` decision says."""
    acknowledged = {as_str(c.get("id")) for c in dicts((output or {}).get("acknowledged_safety_checks"))}
    pending = dicts(call.get("pending_safety_checks"))
    asked = [d for d in decisions if d.what == "safety_check"]
    checks = []
    for check in pending:
        check_id = as_str(check.get("id"))
        said = next((d for d in asked if check_id and check_id in d.subject), None)
        if said is None and len(asked) == len(pending) == 1:
            said = asked[0]
        refused_here = output is None and stop[0] == "safety_check"
        if check_id in acknowledged:
            answer = "acknowledged"
        elif refused_here or (said is not None and said.denied):
            answer = "refused"
        else:
            answer = "unanswered"
        by = (said.approval or said.justification) if said is not None else stop[1] if refused_here else None
        checks.append(SafetyCheck(check_id, as_str(check.get("code")), as_str(check.get("message")),
                                  answer, by or None))
    return checks
