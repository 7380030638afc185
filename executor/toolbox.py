"""Everything the handlers act on: the back-ends of one run and the options that shape them.

A :class:`Toolbox` holds the policy gate, the sandbox session, the computer, the function tools,
the tool-search catalog and the background tasks. Which tools the model is offered follows from
what is there (each tool kind says what it adds: :mod:`executor.registry`). What cannot run
because a part is missing is said by :meth:`Toolbox.unavailable`, in one wording that names
every missing part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from executor.catalog import ToolCatalog
from executor.gate import Gate
from executor.items import ResourceKey
from executor.safety import SafetyCallback
from executor.tasks import AsyncTasks
from executor.tools import FunctionTools
from sandbox.base import Session
from sandbox.computer import Computer
from sandbox.patch.paths import DEFAULT_READ_ONLY_GLOBS
from sandloop.limits import Limits

__all__ = ["Part", "Toolbox"]

#: the parts of a toolbox a kind of call may need
Part = Literal["session", "gate", "computer", "catalog"]

_MISSING: dict[Part, str] = {
    "session": "no sandbox session (Toolbox.session)",
    "gate": "no policy gate (Toolbox.gate): commands and file changes run only when a policy "
            "decides them",
    "computer": "no computer (Toolbox.computer)",
    "catalog": "no tool-search catalog (Toolbox.catalog)",
}


@dataclass
class Toolbox:
    #: the policy every action asks first; without one, nothing that changes files may run
    gate: Gate | None = None
    session: Session | None = None
    #: what computer calls act on (a browser: sandbox.browser; any sandbox.computer.Computer)
    computer: Computer | None = None
    functions: FunctionTools = field(default_factory=FunctionTools)
    catalog: ToolCatalog | None = None
    #: tool definitions sent as given (hosted mcp, web_search, programmatic_tool_calling …)
    hosted_tools: list[dict[str, Any]] = field(default_factory=list)
    #: what one shell command may take (the policy's [shell] limits; the session enforces
    #: them again inside the sandbox)
    limits: Limits = field(default_factory=Limits)
    #: the sandbox's memory limit, named when a command is killed for running out of it
    memory: str | None = None
    legacy_local_shell: bool = False  # send {"type":"local_shell"} instead of the shell tool
    #: which field of local_shell_call_output carries the call id: the SDK's param type says
    #: ``id``, some clients send ``call_id``; one switch
    local_shell_id_field: Literal["id", "call_id"] = "id"
    patch_tool: Literal["native", "custom", "off"] = "native"
    patch_read_only_globs: Sequence[str] = DEFAULT_READ_ONLY_GLOBS
    patch_dry_run: bool = False
    #: who answers a computer_call's pending safety checks (None: refuse them all)
    computer_safety: SafetyCallback | None = None
    #: (width, height) to offer the preview computer tool instead of the GA one
    computer_display: tuple[int, int] | None = None
    call_timeout_s: float = 600.0
    tasks: AsyncTasks = field(default_factory=AsyncTasks)
    #: which call holds each locked resource right now (the browser's requests are recorded
    #: against the call whose actions made them: items.COMPUTER)
    holding: dict[ResourceKey, str] = field(default_factory=dict)

    def unavailable(self, what: str, *needs: Part) -> str | None:
        """Why ``what`` cannot run with this toolbox — every missing part of ``needs`` named —
        or None when all of them are there."""
        missing = [_MISSING[part] for part in needs if getattr(self, part) is None]
        if not missing:
            return None
        return f"{what} is not enabled in this run: " + "; ".join(missing)
