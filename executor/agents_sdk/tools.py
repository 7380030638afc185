"""One call wires sandloop into an Agents SDK agent: ``tools = SandloopTools(run)``.

The SDK's ``ShellTool``, ``ApplyPatchTool`` and ``ComputerTool`` (plus the browser's
``navigate``/``back``/``forward`` function tools, as sandloop offers them) come back backed by
ONE sandloop session, its browser and its policy gate — sandloop's own handlers do the work.
"""

from __future__ import annotations

from typing import Any, cast

from agents import ApplyPatchTool, ComputerTool, FunctionTool, RunState, ShellTool, Tool
from agents.items import ToolApprovalItem
from agents.tool import ApplyPatchOnApprovalFunction, ShellOnApprovalFunction
from agents.tool_context import ToolContext

from executor.agents_sdk.computer import SandboxComputer
from executor.agents_sdk.editor import SandboxEditor
from executor.agents_sdk.policy import PolicyBridge
from executor.agents_sdk.shell import SandboxShell
from executor.navigation import handle_navigation, navigation_tool_params
from executor.run import Run
from executor.toolbox import Toolbox
from sandbox.browser import Browser

__all__ = ["SandloopTools", "sandloop_tools"]


def _navigation_tools(browser: Browser) -> list[FunctionTool]:
    def make(name: str, description: str, parameters: dict[str, Any]) -> FunctionTool:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            return await handle_navigation(name, arguments, browser)

        return FunctionTool(name=name, description=description, params_json_schema=parameters,
                            on_invoke_tool=invoke, strict_json_schema=True)

    return [make(p["name"], p["description"], p["parameters"]) for p in navigation_tool_params()]


class SandloopTools:
    """The Agents SDK tools over one sandloop run (or a :class:`~executor.toolbox.Toolbox` with
    a session and a :class:`~executor.policy_gate.PolicyGate`).

    ``all`` is the list to give ``Agent(tools=...)``. A policy prompt stops the SDK run with an
    interruption: :meth:`describe` says what it asks, :meth:`approve` / :meth:`reject` decide it
    on the ``RunState`` (recorded in the run's audit log), then resume with ``Runner.run``.
    """

    def __init__(self, source: Run | Toolbox, *, shell_name: str = "shell",
                 apply_patch_name: str = "apply_patch") -> None:
        toolbox = source.toolbox if isinstance(source, Run) else source
        self.bridge = bridge = PolicyBridge(toolbox)
        self.shell = ShellTool(
            executor=SandboxShell(bridge, shell_name), name=shell_name,
            needs_approval=bridge.shell_needs_approval,
            # None (a prompt) leaves the call pending: the SDK accepts it, its type does not say so
            on_approval=cast(ShellOnApprovalFunction, bridge.on_approval))
        self.apply_patch = ApplyPatchTool(
            editor=SandboxEditor(bridge, apply_patch_name), name=apply_patch_name,
            needs_approval=bridge.patch_needs_approval,
            on_approval=cast(ApplyPatchOnApprovalFunction, bridge.on_approval))
        self.computer: ComputerTool[SandboxComputer] | None = None
        self.navigation: list[FunctionTool] = []
        if toolbox.computer is not None:
            screen = SandboxComputer(toolbox.computer, toolbox.computer_safety)
            self.computer = ComputerTool(computer=screen, on_safety_check=screen.on_safety_check)
        if isinstance(toolbox.computer, Browser):
            self.navigation = _navigation_tools(toolbox.computer)

    @property
    def all(self) -> list[Tool]:
        tools: list[Tool] = [self.shell, self.apply_patch]
        if self.computer is not None:
            tools.append(self.computer)
        return [*tools, *self.navigation]

    async def describe(self, item: ToolApprovalItem) -> str:
        """What an interrupted call asks the person approving it, rule by rule."""
        return await self.bridge.describe(item)

    async def approve(self, state: RunState[Any], item: ToolApprovalItem, *, always: bool = False) -> None:
        """Approve an interrupted call (``state.approve`` works too)."""
        await self.bridge.approve(state, item, always=always)

    async def reject(self, state: RunState[Any], item: ToolApprovalItem, message: str | None = None) -> str:
        """Reject an interrupted call: a deny in the audit log, and the model told why with the
        rule id. Returns the text the model will read."""
        return await self.bridge.reject(state, item, message)


def sandloop_tools(source: Run | Toolbox) -> list[Tool]:
    """The SDK tools over ``source``, ready for ``Agent(tools=...)``."""
    return SandloopTools(source).all
