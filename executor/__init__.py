"""sandloop's loop front-end: drive the Responses API and answer every call the model makes.

The public API is what ``__all__`` lists; modules are free to change behind it.

    from executor import Loop, LoopConfig, Toolbox, FunctionTool
"""

from executor.loop import Budgets, ExitCode, Loop, LoopConfig, RunResult, run_sync
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools

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
