"""The seam between handlers and policy: every action a handler is about to take asks the gate.

A gate answers with a final :class:`~sandloop.verdict.Verdict` — ALLOW or DENY, never PROMPT:
the gate itself resolves PROMPT through the approvals callback and records the decision in the
audit log. Handlers therefore never talk to the policy engine, the approvals UI or the audit
log directly; they ask the gate and act on the answer.
"""

from __future__ import annotations

from typing import Any, Protocol

from sandloop.files import PatchKind
from sandloop.verdict import Verdict

__all__ = ["Gate"]


class Gate(Protocol):
    async def shell(self, command: str, *, call_id: str) -> Verdict:
        """May this shell command line run?"""
        ...

    def shell_asks(self, command: str) -> bool:
        """Would :meth:`shell` ask a person about this command line? Decides and records
        nothing: a handler that runs several commands at once runs the ones before it first."""
        ...

    async def patch(self, path: str, kind: PatchKind, *, call_id: str, size_bytes: int | None = None) -> Verdict:
        """May this file operation happen? (path is workspace-relative and already validated;
        ``size_bytes``: the size of the patch it comes with, for the policy's size limit)"""
        ...

    async def patch_refused(self, path: str, kind: PatchKind, verdict: Verdict, *, call_id: str) -> None:
        """Record a file operation refused before or beside the policy (an unsafe or read-only
        path, a symlink): one DENY decision with its rule, like the policy's own refusals."""
        ...

    async def refused(self, what: str, subject: str, verdict: Verdict, *, call_id: str, **fields: Any) -> None:
        """Record a call refused outside the policy (a tool this run does not offer): one
        decision with ``verdict``'s rule, reported as the policy's refusals are."""
        ...

    async def outcome(self, action: str, subject: str, *, call_id: str, ok: bool, detail: str = "",
                      **fields: Any) -> None:
        """Record what came of an allowed action (a file a patch changed, a command's exit and
        duration, the page a computer call ended on) beside the decisions; ``fields`` are
        further JSON values for the record."""
        ...

    async def url(self, url: str, *, call_id: str) -> Verdict:
        """May the browser go to this URL?"""
        ...

    async def function(self, name: str, *, call_id: str) -> Verdict:
        """May this function/custom tool run?"""
        ...

    async def mcp(self, server_label: str, tool: str, *, call_id: str) -> Verdict:
        """May this hosted MCP call be approved?"""
        ...
