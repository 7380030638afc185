"""What a command produced: its output streams after the cap, and how it ended."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CommandResult", "StreamCapture"]


@dataclass(frozen=True)
class StreamCapture:
    """One output stream after the cap: what was kept and exactly what was dropped."""

    text: str
    total_bytes: int
    dropped_bytes: int = 0
    dropped_lines: int = 0

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0


@dataclass(frozen=True)
class CommandResult:
    """The result of one command line."""

    stdout: StreamCapture
    stderr: StreamCapture
    exit_code: int | None  # None when the command timed out
    timed_out: bool = False
    duration_s: float = 0.0
    oom_killed: bool = False
    signal: int | None = None  # the signal that ended the command, if any
    #: When the command passed each point on its way, in monotonic seconds, where the back-end
    #: says (a helper's: ``sent``, ``received``, ``started``, ``spawned``, ``exited``,
    #: ``answered``, ``arrived``, ``settled``); for measuring, never for deciding.
    timing: Mapping[str, float] = field(default_factory=dict, compare=False, repr=False)
