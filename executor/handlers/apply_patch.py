"""apply_patch tool calls → their outputs.

Two entry points, one transaction (:func:`sandbox.patch.apply.apply_operations`):

* ``apply_patch_call`` (the built-in tool): one headerless V4A operation per call, answered
  with ``apply_patch_call_output`` (``status`` completed/failed plus a one-line summary).
* ``custom_tool_call`` to a custom tool named ``apply_patch`` (:data:`APPLY_PATCH_CUSTOM_TOOL`)
  whose input is the multi-file envelope format, answered with ``custom_tool_call_output``.

Every call gets an answer; every failure reaches the model as :func:`sandloop.errors.describe`
text, and a failed call has written nothing.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from openai.types.responses import ResponseApplyPatchToolCall, ResponseCustomToolCall
from openai.types.responses.response_custom_tool_call_output_param import (
    ResponseCustomToolCallOutputParam,
)
from openai.types.responses.response_input_item_param import (
    ApplyPatchCallOutput,
    ApplyPatchCallOutputCaller,
)

from executor.gate import Gate
from executor.items import Output, ResourceKey
from executor.kinds import ToolKind
from sandbox.base import Session, with_session_notes
from sandbox.patch import envelope, paths, v4a
from sandbox.patch.apply import Allow, PatchResult, Refused, apply_operations
from sandloop.errors import PatchParseError, SandloopError, describe
from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict

__all__ = [
    "APPLY_PATCH_CUSTOM_TOOL",
    "APPLY_PATCH_GRAMMAR",
    "ApplyPatchCallKind",
    "apply_ops",
    "envelope_resources",
    "gate_allow",
    "gate_outcomes",
    "gate_refused",
    "handle_apply_patch_call",
    "handle_apply_patch_custom_call",
]

# The envelope format as a Lark grammar, so the model's custom-tool input is always parseable.
# Hunks after the first need an '@@' line; the first may start with its body lines. Blank lines
# between sections are allowed, as the parser allows them.
APPLY_PATCH_GRAMMAR = r"""
start: "*** Begin Patch" NL+ file_op+ "*** End Patch" NL*
file_op: add_file | delete_file | update_file
add_file: "*** Add File: " REST NL added_line* NL*
added_line: "+" REST? NL
delete_file: "*** Delete File: " REST NL+
update_file: "*** Update File: " REST NL move_to? first_hunk? anchored_hunk*
move_to: "*** Move to: " REST NL
first_hunk: body_line+ end_of_file?
anchored_hunk: anchor+ body_line+ end_of_file?
anchor: "@@" NL | "@@ " REST NL
body_line: PREFIX REST? NL | NL
end_of_file: "*** End of File" NL
PREFIX: /[ +-]/
REST: /[^\r\n]+/
NL: /\r?\n/
"""

APPLY_PATCH_CUSTOM_TOOL: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": (
        "Create, update, delete or move files in the workspace. Input is one patch:\n"
        "*** Begin Patch\n"
        "*** Add File: <path>   (then every line of the new file, each prefixed with '+')\n"
        "*** Delete File: <path>\n"
        "*** Update File: <path>   (optionally followed by '*** Move to: <new path>')\n"
        "@@ <a line just above the change, to locate it>\n"
        " <context line, copied exactly>\n"
        "-<line to remove>\n"
        "+<line to add>\n"
        "*** End Patch\n"
        "Use about 3 lines of context around each change; hunks in file order; add "
        "'*** End of File' after a hunk that must match the end of the file. Paths are "
        "relative to the workspace. All operations apply together or not at all."
    ),
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
}


def _caller(
    item: ResponseApplyPatchToolCall | ResponseCustomToolCall,
) -> ApplyPatchCallOutputCaller | None:
    caller = item.caller
    if caller is None:
        return None
    if caller.type == "program":
        return {"type": "program", "caller_id": caller.caller_id}
    return {"type": "direct"}


def _report(result: PatchResult) -> str:
    return f"{result.text}\n{result.preview}".rstrip("\n") if result.preview else result.text


def _operation(item: ResponseApplyPatchToolCall) -> v4a.FileOp:
    op = item.operation
    if item.status != "completed":
        raise PatchParseError(
            f"the call's status is {item.status!r}: its operation may be cut short, so it "
            "was not applied"
        )
    try:
        return v4a.from_api(op.type, op.path, getattr(op, "diff", None))
    except SandloopError as exc:
        raise type(exc)(f"{op.type} {op.path}: {exc}\nNo file was changed.") from exc


async def apply_ops(
    operations: Callable[[], list[v4a.FileOp]],
    session: Session,
    *,
    allow: Allow,
    read_only_globs: Sequence[str],
    dry_run: bool,
    on_applied: Applied | None = None,
    refused: Refused | None = None,
) -> tuple[bool, str]:
    """Parse (``operations``) and apply a patch in one transaction: (applied?, the text the
    model reads). Never raises: every call is answered, and describe() names unexpected bugs
    too. ``refused`` is told of paths the patch refuses itself (see :func:`gate_refused`)."""
    try:
        result = await apply_operations(
            session, operations(), allow=allow, read_only_globs=read_only_globs, dry_run=dry_run,
            refused=refused)
    except Exception as exc:
        return False, with_session_notes(describe(exc), session)
    if on_applied is not None and not dry_run:
        await on_applied(result)
    return True, with_session_notes(_report(result), session)


async def handle_apply_patch_call(
    item: ResponseApplyPatchToolCall,
    session: Session,
    *,
    allow: Allow,
    read_only_globs: Sequence[str] = paths.DEFAULT_READ_ONLY_GLOBS,
    dry_run: bool = False,
    on_applied: Applied | None = None,
    refused: Refused | None = None,
) -> ApplyPatchCallOutput:
    """Apply one ``apply_patch_call`` and build its ``apply_patch_call_output``."""
    ok, text = await apply_ops(lambda: [_operation(item)], session, allow=allow,
                               read_only_globs=read_only_globs, dry_run=dry_run, on_applied=on_applied,
                               refused=refused)
    out: ApplyPatchCallOutput = {
        "type": "apply_patch_call_output",
        "call_id": item.call_id,
        "status": "completed" if ok else "failed",
        "output": text,
    }
    caller = _caller(item)
    if caller is not None:
        out["caller"] = caller
    return out


def _envelope_operations(item: ResponseCustomToolCall) -> list[v4a.FileOp]:
    if item.name != APPLY_PATCH_CUSTOM_TOOL["name"]:
        raise PatchParseError(f"this handler applies patches, not calls to {item.name!r}")
    return envelope.parse(item.input)


async def handle_apply_patch_custom_call(
    item: ResponseCustomToolCall,
    session: Session,
    *,
    allow: Allow,
    read_only_globs: Sequence[str] = paths.DEFAULT_READ_ONLY_GLOBS,
    dry_run: bool = False,
    on_applied: Applied | None = None,
    refused: Refused | None = None,
) -> ResponseCustomToolCallOutputParam:
    """Apply the envelope patch of a custom ``apply_patch`` call; the output text tells how."""
    _, text = await apply_ops(lambda: _envelope_operations(item), session, allow=allow,
                              read_only_globs=read_only_globs, dry_run=dry_run, on_applied=on_applied,
                              refused=refused)
    out: ResponseCustomToolCallOutputParam = {
        "type": "custom_tool_call_output",
        "call_id": item.call_id,
        "output": text,
    }
    caller = _caller(item)
    if caller is not None:
        out["caller"] = caller
    return out


# -- the tool kind -------------------------------------------------------------------------

_ENVELOPE_PATH = re.compile(r"^\s*\*\*\* (?:Add|Delete|Update) File: (.+)$|^\s*\*\*\* Move to: (.+)$",
                            re.MULTILINE)


def file_key(path: str) -> ResourceKey:
    """Two patches to one file take turns; the key is the path as the patch names it."""
    return ("file", posixpath.normpath(path.strip()))


def envelope_resources(text: str) -> list[ResourceKey]:
    """The files an envelope patch touches, sorted (locks are taken in one order: no deadlock)."""
    return sorted({file_key(a or b) for a, b in _ENVELOPE_PATH.findall(text)})


#: called with what a patch did, once it is committed
Applied = Callable[[PatchResult], Awaitable[None]]


def gate_outcomes(gate: Gate | None, call_id: str) -> Applied:
    """Every file a committed patch changed, recorded by the gate beside its decisions."""

    async def applied(result: PatchResult) -> None:
        if gate is not None:
            for change in result.changes:
                await gate.outcome("patch", change.path, call_id=call_id, ok=True,
                                   detail="deleted" if change.content is None else "written")

    return applied


def gate_allow(gate: Gate | None, call_id: str, size_bytes: int) -> Allow:
    """The patch transaction's per-file question, answered by the gate (which also holds the
    patch's size against the policy's limit)."""

    async def allow(path: str, kind: PatchKind) -> Verdict:
        if gate is None:  # no policy, no writes: refusing is the only safe answer
            return Verdict(Decision.DENY, "file changes need a policy gate, and this run has none",
                           "files.no_gate")
        return await gate.patch(path, kind, call_id=call_id, size_bytes=size_bytes)

    return allow


def gate_refused(gate: Gate | None, call_id: str) -> Refused:
    """Paths the patch transaction refuses itself (unsafe, read-only, a symlink), recorded by
    the gate as its own refusals are: the audit log, the run's progress, the report."""

    async def refused(path: str, kind: PatchKind, verdict: Verdict) -> None:
        if gate is not None:
            await gate.patch_refused(path, kind, verdict, call_id=call_id)

    return refused


def append_note(output: Output, note: str) -> Output:
    text = str(output.get("output") or "")
    return {**output, "output": f"{text}\n{note}" if text else note}


def _size(call: ResponseApplyPatchToolCall) -> int:
    return len((getattr(call.operation, "diff", None) or "").encode("utf-8"))


class ApplyPatchCallKind(ToolKind[ResponseApplyPatchToolCall]):
    call_type = "apply_patch_call"
    output_type = "apply_patch_call_output"
    model = ResponseApplyPatchToolCall

    def summary(self, item: dict[str, Any]) -> str:
        op = item.get("operation") or {}
        return f"{op.get('type')} {op.get('path')}" if isinstance(op, dict) else self.call_type

    def tool_params(self) -> list[dict[str, Any]]:
        tb = self.toolbox
        return [{"type": "apply_patch"}] if tb.session is not None and tb.patch_tool == "native" else []

    def unavailable(self, call: ResponseApplyPatchToolCall) -> str | None:
        missing = self.toolbox.unavailable("apply_patch", "session", "gate")
        if missing is not None:
            return missing
        if self.toolbox.patch_tool == "off":
            return "apply_patch is not enabled in this run (the patch tool is off)"
        return None

    def resources(self, call: ResponseApplyPatchToolCall) -> Sequence[ResourceKey]:
        return [file_key(call.operation.path)]

    async def handle(self, call: ResponseApplyPatchToolCall) -> Output:
        tb = self.toolbox
        assert tb.session is not None  # unavailable() said so
        out = await handle_apply_patch_call(
            call, tb.session, allow=gate_allow(tb.gate, call.call_id, _size(call)),
            on_applied=gate_outcomes(tb.gate, call.call_id), refused=gate_refused(tb.gate, call.call_id),
            read_only_globs=tb.patch_read_only_globs, dry_run=tb.patch_dry_run)
        return dict(out)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        out: Output = {"type": "apply_patch_call_output", "call_id": self.call_id(item),
                       "status": "failed", "output": text}
        if item.get("caller") is not None:
            out["caller"] = item["caller"]
        return out

    def with_note(self, output: Output, note: str) -> Output | None:
        return append_note(output, note)

    def outcome(self, output: Output) -> tuple[bool, str]:
        status = output.get("status")
        return status == "completed", f"{status}: {str(output.get('output') or '')[:100]}"
