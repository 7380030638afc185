"""Every call item type the loop answers, in the order their tools are offered.

Adding a call item type is one module in ``executor/handlers/`` and one line here.
"""

from __future__ import annotations

from typing import Any

from executor.handlers.apply_patch import ApplyPatchCallKind
from executor.handlers.computer import ComputerCallKind
from executor.handlers.custom import CustomToolCallKind
from executor.handlers.function import FunctionCallKind
from executor.handlers.local_shell import LocalShellCallKind
from executor.handlers.mcp_approval import McpApprovalRequestKind
from executor.handlers.shell import ShellCallKind
from executor.handlers.tool_search import ToolSearchCallKind
from executor.kinds import ToolKind
from executor.toolbox import Toolbox

__all__ = ["KINDS", "kinds_for", "tool_params"]

KINDS: tuple[type[ToolKind[Any]], ...] = (
    FunctionCallKind,
    ShellCallKind,
    LocalShellCallKind,
    ApplyPatchCallKind,
    CustomToolCallKind,
    ComputerCallKind,
    ToolSearchCallKind,
    McpApprovalRequestKind,
)


def kinds_for(toolbox: Toolbox) -> dict[str, ToolKind[Any]]:
    """Call item type → its kind, bound to this toolbox."""
    return {cls.call_type: cls(toolbox) for cls in KINDS}


def tool_params(toolbox: Toolbox) -> list[dict[str, Any]]:
    """The ``tools`` list, built once so it stays byte-identical across turns (prompt cache)."""
    params = [param for kind in kinds_for(toolbox).values() for param in kind.tool_params()]
    return params + list(toolbox.hosted_tools)
