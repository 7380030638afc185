"""sandloop's policy as the Agents SDK's approval flow, for shell and apply_patch calls.

The SDK asks two questions before it runs a call. ``needs_approval(ctx, action, call_id)``:
:meth:`PolicyBridge.shell_needs_approval` and :meth:`PolicyBridge.patch_needs_approval` ask the
policy engine exactly the questions the call will ask the gate (every command; every file a
patch touches, found by running the real patch transaction against a session that refuses to
be read), recording nothing and prompting no one — "yes" unless every answer is allow. Then
``on_approval(ctx, item)``, :meth:`PolicyBridge.on_approval`:

* a **deny** rejects the call, the reason being the very text ``sandloop run`` gives the model
  (rule id included), and the gate records the decision in the audit log;
* a **prompt** leaves the call pending: the run stops with an interruption, recorded in the audit
  log as a pending approval, and a person approves or rejects it through ``RunState``
  (:meth:`approve`, :meth:`reject` and :meth:`describe` help).

An approved call then runs through a gate whose approvals answer "approved through the Agents
SDK" (:meth:`executing_gate`): the policy is not asked twice, nobody is prompted again, and the
audit log records the allow with that approval. A rejection made with :meth:`reject` is recorded
as a deny, and the model reads sandloop's refusal text with the rule. (``state.reject`` alone
works too; then the audit log holds only the pending approval.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents import RunContextWrapper, RunState
from agents.editor import ApplyPatchOperation
from agents.items import ToolApprovalItem
from agents.tool import ShellActionRequest
from openai.types.responses import ResponseApplyPatchToolCall
from pydantic import BaseModel

from executor.approvals import ApprovalAnswer, ApprovalRequest
from executor.handlers.apply_patch import gate_allow, gate_refused, handle_apply_patch_call
from executor.handlers.shell import describe_refusal
from executor.policy_gate import PolicyGate
from executor.toolbox import Toolbox
from policies.engine import PolicyEngine
from sandbox.base import Session
from sandbox.patch import v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import NotEnabled, SandloopError
from sandloop.files import FileChange, FileInfo, PatchKind
from sandloop.results import CommandResult
from sandloop.verdict import Decision, Verdict

__all__ = ["APPROVED", "REJECTED", "PolicyBridge", "as_dict"]

APPROVED = "approved through the Agents SDK approval flow"
REJECTED = "rejected through the Agents SDK approval flow"

ToolKind = Literal["shell", "patch"]


def as_dict(raw: Any) -> dict[str, Any]:
    """A call item as a dict: the SDK hands over a pydantic model on a fresh run and a plain
    dict after a ``RunState`` round trip."""
    if isinstance(raw, BaseModel):
        return raw.model_dump(mode="json", exclude_none=True)
    if isinstance(raw, Mapping):
        return dict(raw)
    raise TypeError(f"not a call item: {type(raw).__name__}")


@dataclass(frozen=True)
class Question:
    """One question a call asks the policy, and the engine's answer."""

    action: Literal["shell", "patch"]
    subject: str  # the command line, or "kind path"
    verdict: Verdict


class _Unread(Exception):
    """The patch transaction tried to read: every policy question has been asked by then."""


class _NoReads(Session):
    """A session that refuses every operation. The patch transaction asks all its policy
    questions before its first read, so running it against this one lists the questions."""

    async def run(self, command: str, **_: Any) -> CommandResult:
        raise _Unread

    async def read_file(self, path: str) -> bytes:
        raise _Unread

    async def stat(self, path: str) -> FileInfo | None:
        raise _Unread

    async def commit(self, changes: Sequence[FileChange]) -> None:
        raise _Unread

    async def close(self) -> None:
        return None


class _Answer:
    """Approvals with one fixed answer (a person's decision, made through the SDK)."""

    def __init__(self, approved: bool, reason: str) -> None:
        self.answer = ApprovalAnswer(approved, reason)

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        return self.answer


class _ApprovedBySdk:
    """The approvals of a gate that runs a call the SDK is executing.

    The SDK executes a call only when it was approved, or when ``needs_approval`` said no —
    and ``needs_approval`` asked these very questions, so a prompt met here was approved
    (for the shell, the run context confirms it by call id)."""

    def __init__(self, ctx: RunContextWrapper[Any] | None, tool_name: str) -> None:
        self.ctx, self.tool_name = ctx, tool_name

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        status = self.ctx.is_tool_approved(self.tool_name, request.call_id) if self.ctx else None
        if status is False:
            return ApprovalAnswer(False, REJECTED)
        return ApprovalAnswer(True, APPROVED)


def _operations(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    ops = item.get("operations")
    if isinstance(ops, list):
        return [dict(op) for op in ops if isinstance(op, Mapping)]
    op = item.get("operation")
    return [dict(op)] if isinstance(op, Mapping) else []


def _op_dict(op: ApplyPatchOperation) -> dict[str, Any]:
    out: dict[str, Any] = {"type": op.type, "path": op.path}
    if op.diff is not None:
        out["diff"] = op.diff
    return out


def _op_key(op: Mapping[str, Any]) -> str:
    return json.dumps([op.get("type"), op.get("path"), op.get("diff")])


def _size(op: Mapping[str, Any]) -> int:
    return len(str(op.get("diff") or "").encode("utf-8"))


def patch_call(op: Mapping[str, Any], call_id: str) -> ResponseApplyPatchToolCall:
    """The ``apply_patch_call`` one SDK operation stands for, for sandloop's handler. (The SDK
    hands its editor no call status; it applies what it is given, and so does this.)"""
    return ResponseApplyPatchToolCall.model_validate(
        {"type": "apply_patch_call", "id": f"apc_{call_id}", "call_id": call_id,
         "status": "completed", "operation": op})


class PolicyBridge:
    """One toolbox's policy gate, seen from the Agents SDK (see the module docstring)."""

    def __init__(self, toolbox: Toolbox) -> None:
        missing = toolbox.unavailable("the Agents SDK tools", "session", "gate")
        if missing is not None:
            raise NotEnabled(missing)
        if not isinstance(toolbox.gate, PolicyGate):
            raise NotEnabled("the Agents SDK tools need a PolicyGate (Toolbox.gate): its policy "
                             "decides what needs approval before a call runs")
        self.toolbox = toolbox
        self.gate: PolicyGate = toolbox.gate
        self.engine: PolicyEngine = toolbox.gate.engine
        # The editor is told no call id; the approval questions are. Operations are matched
        # to their call by content.
        self._patch_calls: dict[str, str] = {}

    # -- the questions, asked of the engine (nothing recorded, nobody prompted) --------------

    def shell_questions(self, commands: Sequence[str]) -> list[Question]:
        return [Question("shell", c, self.engine.shell(c)) for c in commands]

    async def patch_questions(self, op: Mapping[str, Any]) -> list[Question]:
        questions: list[Question] = []

        async def ask(path: str, kind: PatchKind) -> Verdict:
            verdict = self.engine.patch(path, kind, size_bytes=_size(op))
            questions.append(Question("patch", f"{kind} {path}", verdict))
            return Verdict(Decision.ALLOW, "listing the questions")  # go on to the next one

        async def refused(path: str, kind: PatchKind, verdict: Verdict) -> None:
            # a path the patch refuses itself (read-only, outside): a refusal to record as well
            questions.append(Question("patch", f"{kind} {path}", verdict))

        try:
            fileop = v4a.from_api(str(op.get("type")), str(op.get("path")), op.get("diff"))
            await apply_operations(_NoReads(), [fileop], allow=ask, refused=refused,
                                   read_only_globs=self.toolbox.patch_read_only_globs)
        except (_Unread, SandloopError):
            pass  # a malformed patch or path asks nothing: the editor answers with the error
        return questions

    async def questions(self, item: Any) -> tuple[ToolKind | None, str, list[Question]]:
        """What the call behind an approval item asks: (its kind, its call id, the questions).
        The kind is None for a call that is not a shell or apply_patch call: nothing to ask."""
        raw = as_dict(item.raw_item if isinstance(item, ToolApprovalItem) else item)
        call_id = str(raw.get("call_id"))
        if raw.get("type") == "shell_call":
            action = raw.get("action") or {}
            return "shell", call_id, self.shell_questions(list(action.get("commands") or []))
        if raw.get("type") != "apply_patch_call":
            return None, call_id, []
        questions: list[Question] = []
        for op in _operations(raw):
            self._patch_calls[_op_key(op)] = call_id
            questions.extend(await self.patch_questions(op))
        return "patch", call_id, questions

    # -- needs_approval / on_approval ---------------------------------------------------------

    async def shell_needs_approval(self, ctx: RunContextWrapper[Any], action: ShellActionRequest,
                                   call_id: str) -> bool:
        return any(not q.verdict.allowed for q in self.shell_questions(action.commands))

    async def patch_needs_approval(self, ctx: RunContextWrapper[Any], operation: ApplyPatchOperation,
                                   call_id: str) -> bool:
        op = _op_dict(operation)
        self._patch_calls[_op_key(op)] = call_id
        return any(not q.verdict.allowed for q in await self.patch_questions(op))

    async def on_approval(self, ctx: RunContextWrapper[Any], item: ToolApprovalItem) -> dict[str, Any] | None:
        """Deny → rejected with sandloop's refusal text; prompt → None: the call stays pending
        and the run stops with an interruption."""
        kind, call_id, questions = await self.questions(item)
        denied = next((q for q in questions if q.verdict.decision is Decision.DENY), None)
        if denied is not None and kind is not None:
            return {"approve": False, "reason": await self._refuse(kind, call_id, item, denied, self.gate)}
        for q in questions:
            if q.verdict.decision is Decision.PROMPT and self.gate.audit is not None:
                v = q.verdict
                self.gate.audit.record(
                    "approval", action=q.action, subject=q.subject, call_id=call_id, status="pending",
                    policy_decision=v.decision.value, rule_id=v.rule_id, source=v.source,
                    justification=v.justification, via="agents-sdk")
        return None

    async def _refuse(self, kind: ToolKind, call_id: str, item: Any, question: Question,
                      gate: PolicyGate) -> str:
        """The model-facing refusal of ``question`` — the text ``sandloop run`` gives — with the
        decision recorded by ``gate``."""
        if kind == "shell":
            verdict = await gate.shell(question.subject, call_id=call_id)
            return describe_refusal(verdict.justification, verdict.rule_id)
        op = await self._operation_asking(item, question)
        # sandloop's own patch handler, over a session it never gets to read: the gate
        # answers the same questions, records them, and the refusal reads as in `sandloop run`
        out = await handle_apply_patch_call(patch_call(op, call_id), _NoReads(),
                                            allow=gate_allow(gate, call_id, _size(op)),
                                            refused=gate_refused(gate, call_id),
                                            read_only_globs=self.toolbox.patch_read_only_globs)
        return str(out.get("output") or "")

    async def _operation_asking(self, item: Any, question: Question) -> dict[str, Any]:
        raw = as_dict(item.raw_item if isinstance(item, ToolApprovalItem) else item)
        for op in _operations(raw):
            if question in await self.patch_questions(op):
                return op
        raise LookupError(f"no operation of the call asks {question.subject!r}")

    # -- executing an approved call -------------------------------------------------------------

    def executing_gate(self, ctx: RunContextWrapper[Any] | None, tool_name: str) -> PolicyGate:
        """The gate a call the SDK executes runs through: same policy, same audit log, and
        prompts answered by the SDK's approval (see :class:`_ApprovedBySdk`)."""
        return PolicyGate(self.engine, _ApprovedBySdk(ctx, tool_name), self.gate.audit,
                          on_event=self.gate.on_event)

    def patch_call_id(self, operation: ApplyPatchOperation) -> str:
        """The call an editor operation belongs to (seen by the approval questions), or an id
        made from its content when this process never saw them."""
        key = _op_key(_op_dict(operation))
        return self._patch_calls.pop(key, None) or "apply_patch_" + hashlib.sha256(key.encode()).hexdigest()[:16]

    # -- a person's decision on an interruption -------------------------------------------------

    async def describe(self, item: ToolApprovalItem) -> str:
        """What the interrupted call asks, and why: one line a question."""
        kind, _, questions = await self.questions(item)
        lines = [f"{q.action}: {q.subject} — {q.verdict.decision.value} "
                 f"(rule {q.verdict.rule_id or 'default'}: {q.verdict.justification})"
                 for q in questions if not q.verdict.allowed]
        if kind is None:
            return f"{item.tool_name}: {as_dict(item.raw_item).get('type')} (not a sandloop call)"
        return "\n".join(lines) or f"{kind}: nothing in this call needs approval"

    async def approve(self, state: RunState[Any], item: ToolApprovalItem, *, always: bool = False) -> None:
        """Approve the call; it runs on resume (its decisions are recorded as it runs)."""
        await self.questions(item)  # remembers which call a patch operation belongs to
        state.approve(item, always_approve=always)

    async def reject(self, state: RunState[Any], item: ToolApprovalItem, message: str | None = None) -> str:
        """Reject the call: recorded in the audit log as a deny, and the model is told with
        sandloop's refusal text (rule id included). Returns that text."""
        kind, call_id, questions = await self.questions(item)
        reason = message or REJECTED
        gate = PolicyGate(self.engine, _Answer(False, reason), self.gate.audit, on_event=self.gate.on_event)
        texts = [await self._refuse(kind, call_id, item, q, gate) for q in questions
                 if kind is not None and q.verdict.decision is Decision.PROMPT]
        text = "\n".join(texts) or reason
        state.reject(item, rejection_message=text)
        return text
