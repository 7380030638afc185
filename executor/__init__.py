"""sandloop's loop front-end: drive the Responses API and answer every call the model makes.

The public API is what ``__all__`` lists; modules are free to change behind it (docs/python.md
walks through it).

    import executor

    async with executor.open_run("path/to/repo", policy="default") as run:
        outcome = await run.task("make the tests pass")
        await run.sandbox.run("pytest -q")      # decided by the same policy, in the audit log

    with executor.open_run_sync("path/to/repo") as run:   # plain scripts
        run.task("make the tests pass")

The lower level — a :class:`Loop` over a :class:`Toolbox` you assemble — is here too. The
OpenAI Agents SDK adapters live in :mod:`executor.agents_sdk` (the ``sandloop[agents]`` extra).
"""

from executor.api import (
    Opening,
    RunSettings,
    SandboxSettings,
    SyncRun,
    SyncSandbox,
    open_run,
    open_run_sync,
    open_sandbox,
    open_sandbox_sync,
)
from executor.approvals import ApprovalAnswer, ApprovalRequest, Approvals, Callback, DenyAll, TerminalPrompt
from executor.loop import Budgets, ExitCode, Loop, LoopConfig, RunResult, run_sync
from executor.run import Run, RunOutcome
from executor.session import Sandbox
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from sandloop.errors import PolicyDenied, SandloopError
from sandloop.results import CommandResult

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approvals",
    "Budgets",
    "Callback",
    "CommandResult",
    "DenyAll",
    "ExitCode",
    "FunctionTool",
    "FunctionTools",
    "Loop",
    "LoopConfig",
    "Opening",
    "PolicyDenied",
    "Run",
    "RunOutcome",
    "RunResult",
    "RunSettings",
    "Sandbox",
    "SandboxSettings",
    "SandloopError",
    "SyncRun",
    "SyncSandbox",
    "TerminalPrompt",
    "Toolbox",
    "open_run",
    "open_run_sync",
    "open_sandbox",
    "open_sandbox_sync",
    "run_sync",
]
