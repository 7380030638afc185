"""What is wrong with a policy file: each problem names the file and the line.

Standard library only (with the shared error tree): the commands that decide from a snapshot
(:mod:`policies.snapshot`) report a bad policy without loading the schema's models.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandloop.errors import ConfigError

__all__ = ["PolicyLoadError", "Problem"]


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


class PolicyLoadError(ConfigError):
    """A policy file could not be loaded; every problem names its file and line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
