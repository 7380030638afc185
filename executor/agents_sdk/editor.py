"""The ApplyPatchTool editor: each SDK operation goes through sandloop's apply_patch handler.

The same transaction as ``sandloop run``: the path is validated (read-only globs such as
``.git/**`` refused), every file the operation touches is decided by the gate, the new text is
computed on the host and committed by the session, all or nothing, and the files it changed are
recorded in the audit log. A failure answers ``failed`` with sandloop's text; nothing was written.
"""

from __future__ import annotations

from agents.editor import ApplyPatchOperation, ApplyPatchResult

from executor.agents_sdk.policy import PolicyBridge, patch_call
from executor.handlers.apply_patch import gate_allow, gate_outcomes, gate_refused, handle_apply_patch_call

__all__ = ["SandboxEditor"]


class SandboxEditor:
    """An ``ApplyPatchEditor``: ``ApplyPatchTool(editor=SandboxEditor(bridge, "apply_patch"))``."""

    def __init__(self, bridge: PolicyBridge, tool_name: str) -> None:
        self.bridge, self.tool_name = bridge, tool_name

    async def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return await self._apply(operation)

    async def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return await self._apply(operation)

    async def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        return await self._apply(operation)

    async def _apply(self, op: ApplyPatchOperation) -> ApplyPatchResult:
        if op.move_to is not None:
            # The Responses API's operations carry no move; refuse rather than drop it.
            return ApplyPatchResult("failed", f"{op.type} {op.path}: moving to {op.move_to} is not "
                                    "supported here; create the new file and delete the old one\n"
                                    "No file was changed.")
        tb = self.bridge.toolbox
        assert tb.session is not None  # PolicyBridge checked it
        call_id = self.bridge.patch_call_id(op)
        gate = self.bridge.executing_gate(op.ctx_wrapper, self.tool_name)
        item: dict[str, str] = {"type": op.type, "path": op.path}
        if op.diff is not None:
            item["diff"] = op.diff
        size = len((op.diff or "").encode("utf-8"))
        out = await handle_apply_patch_call(
            patch_call(item, call_id), tb.session, allow=gate_allow(gate, call_id, size),
            on_applied=gate_outcomes(gate, call_id), refused=gate_refused(gate, call_id),
            read_only_globs=tb.patch_read_only_globs,
            dry_run=tb.patch_dry_run)
        return ApplyPatchResult(out["status"], out.get("output"))
