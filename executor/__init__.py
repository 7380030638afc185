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

from typing import TYPE_CHECKING

from sandloop.lazy import exports

if TYPE_CHECKING:  # what type checkers read; at run time each module is imported on first use
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
    from executor.exits import ExitCode
    from executor.loop import Budgets, Loop, LoopConfig, RunResult, run_sync
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

# Lazily (PEP 562): ``import executor.cli`` runs this file, and the command line must not pay for
# the openai client (``sandloop --version``, ``sandloop policy …``) before it knows the command.
# Hidden from type checkers, which read the imports above: to them a name not exported stays an
# error, not an ``Any`` from a module ``__getattr__``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = exports(__name__, {
        "executor.api": ["Opening", "RunSettings", "SandboxSettings", "SyncRun", "SyncSandbox", "open_run",
                         "open_run_sync", "open_sandbox", "open_sandbox_sync"],
        "executor.approvals": ["ApprovalAnswer", "ApprovalRequest", "Approvals", "Callback", "DenyAll",
                               "TerminalPrompt"],
        "executor.exits": ["ExitCode"],
        "executor.loop": ["Budgets", "Loop", "LoopConfig", "RunResult", "run_sync"],
        "executor.run": ["Run", "RunOutcome"],
        "executor.session": ["Sandbox"],
        "executor.toolbox": ["Toolbox"],
        "executor.tools": ["FunctionTool", "FunctionTools"],
        "sandloop.errors": ["PolicyDenied", "SandloopError"],
        "sandloop.results": ["CommandResult"],
    })
