"""mcp_approval_request → mcp_approval_response (protocol.md A.8).

Nothing runs here: the server runs the MCP call if we approve. The gate decides (a policy
rule, or the approvals callback for PROMPT); with no gate the answer is no. The ``reason``
always says why, so the model can tell the user.
"""

from __future__ import annotations

from typing import Any

from executor.gate import Gate
from executor.handlers import Output

__all__ = ["handle_mcp_approval_request"]


async def handle_mcp_approval_request(item: dict[str, Any], gate: Gate | None) -> Output:
    if gate is None:
        approve, reason = False, "denied: no approver is configured for MCP calls"
    else:
        verdict = await gate.mcp(item["server_label"], item["name"], call_id=item["id"])
        approve = verdict.allowed
        reason = ("approved: " if approve else "denied: ") + verdict.justification
    return {
        "type": "mcp_approval_response",
        "approval_request_id": item["id"],
        "approve": approve,
        "reason": reason,
    }
