"""sandloop's loop front-end: drive the Responses API and answer every call the model makes.

The public API is what ``__all__`` lists; modules are free to change behind it.

    from executor import Loop, LoopConfig, Toolbox, FunctionTool
"""

from executor.dispatch import Toolbox
from executor.handlers.function import FunctionTool, FunctionTools
from executor.loop import Budgets, ExitCode, Loop, LoopConfig, RunResult, run_sync

__all__ = [
    "Budgets",
    "ExitCode",
    "FunctionTool",
    "FunctionTools",
    "Loop",
    "LoopConfig",
    "RunResult",
    "Toolbox",
    "run_sync",
]
