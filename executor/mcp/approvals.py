"""The policy's prompts, answered by the person behind the MCP client.

A ``prompt`` verdict reaches :class:`ElicitApprovals` (the run's approvals) with the id of the
call that raised it. The MCP request that call came from is registered for its duration
(:meth:`ElicitApprovals.asking`); its :data:`Ask` sends an elicitation to the client when the
client declared it can answer one, and refuses otherwise. A question no request is waiting for
(a page's request between two computer calls) is refused. Every answer, and the way it was
given, is recorded by the gate in the audit log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

from executor.approvals import ApprovalAnswer, ApprovalRequest
from sandloop.text import visible

__all__ = ["APPROVED", "Ask", "ElicitApprovals", "question"]

#: asks one MCP client about one request (the server makes one per tools/call)
Ask = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]

APPROVED = "approved through MCP elicitation"


def question(request: ApprovalRequest) -> str:
    """The message an elicitation shows: what would run, and the rule that asks. Text from the
    model is shown with its control characters visible, so it cannot disguise itself."""
    verdict = request.verdict
    rule = ""
    if verdict is not None:
        rule = f"\nRule {verdict.rule_id or '(default)'}: {visible(verdict.justification)}"
    return f"sandloop policy: allow this {request.kind}?\n\n{visible(request.subject)}{rule}"


class ElicitApprovals:
    """Approvals that ask through the MCP request a call came from."""

    def __init__(self) -> None:
        self._asks: dict[str, Ask] = {}

    @contextlib.contextmanager
    def asking(self, call_id: str, ask: Ask) -> Iterator[None]:
        """While a call runs, its questions go to ``ask``."""
        self._asks[call_id] = ask
        try:
            yield
        finally:
            self._asks.pop(call_id, None)

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        ask = self._asks.get(request.call_id)
        if ask is None:
            return ApprovalAnswer(False, "denied: no MCP request is waiting to ask a person about it")
        return await ask(request)
