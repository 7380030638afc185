"""mcp_approval_request → mcp_approval_response.

Nothing runs here: the server runs the MCP call if we approve. The gate decides (a policy
rule, or the approvals callback for PROMPT); with no gate the answer is no. The ``reason``
always says why, so the model can tell the user.
"""

from __future__ import annotations

from typing import Any

from openai.types.responses.response_output_item import McpApprovalRequest

from executor.gate import Gate
from executor.items import Output
from executor.kinds import ToolKind

__all__ = ["McpApprovalRequestKind", "handle_mcp_approval_request"]


def _response(request_id: str, approve: bool, reason: str) -> Output:
    return {"type": "mcp_approval_response", "approval_request_id": request_id,
            "approve": approve, "reason": reason}


async def handle_mcp_approval_request(request: McpApprovalRequest, gate: Gate | None) -> Output:
    if gate is None:
        return _response(request.id, False, "denied: no approver is configured for MCP calls")
    verdict = await gate.mcp(request.server_label, request.name, call_id=request.id)
    rule = f" (rule {verdict.rule_id})" if verdict.rule_id else ""
    word = "approved" if verdict.allowed else "denied"
    return _response(request.id, verdict.allowed, f"{word}{rule}: {verdict.justification}")


class McpApprovalRequestKind(ToolKind[McpApprovalRequest]):
    call_type = "mcp_approval_request"
    output_type = "mcp_approval_response"
    model = McpApprovalRequest
    answers_by = "approval_request_id"

    def call_id(self, item: dict[str, Any]) -> str:
        return str(item.get("id") or "")  # the request is answered by its item id

    def summary(self, item: dict[str, Any]) -> str:
        return f"{item.get('server_label')}.{item.get('name')}"

    async def handle(self, call: McpApprovalRequest) -> Output:
        return await handle_mcp_approval_request(call, self.toolbox.gate)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return _response(self.call_id(item), False, text)

    def with_note(self, output: Output, note: str) -> Output | None:
        return {**output, "reason": f"{output.get('reason') or ''}\n{note}".strip()}

    def outcome(self, output: Output) -> tuple[bool, str]:
        return True, str(output.get("reason"))
