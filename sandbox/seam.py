"""The back-end seam's types: what a back-end is (:class:`Backend`) and how its options are
validated (:class:`BackendOptions`, :func:`validate_options`). Back-ends import this module; the
registry that picks one by name (:mod:`sandbox.backends`) sits above them all.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from sandloop.errors import ConfigError

from .base import Session
from .docker import DockerConfig

__all__ = ["Backend", "BackendOptions", "Where", "no_where", "validate_options"]

#: "file:line" of a key path in the policy (``LoadedPolicy.where``), for one-line errors.
Where = Callable[[tuple[str | int, ...]], str]


class BackendOptions(BaseModel):
    """The base of every back-end's options model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Backend(abc.ABC):
    """One way of running sessions."""

    name: ClassVar[str]
    options_model: ClassVar[type[BackendOptions]]

    @abc.abstractmethod
    async def open(self, workspace: Path, config: DockerConfig, options: Any) -> Session:
        """A started session on ``workspace`` (the host checkout)."""

    @abc.abstractmethod
    def reap(self, options: Any, *, everything: bool = False) -> list[tuple[str, str]]:
        """Remove what dead owners left behind (or everything): (name, reason) per object."""

    @abc.abstractmethod
    def doctor(self, workspace: Path, options: Any, config: DockerConfig | None = None) -> dict[str, Any]:
        """What is really in force (a real session on ``workspace``), as a report with ``ok``."""


def no_where(path: tuple[str | int, ...]) -> str:
    return "options"


def validate_options(name: str, model: type[BackendOptions], table: Mapping[str, Any],
                     where: Where = no_where) -> Any:
    """``table`` (the policy's ``[backend.NAME]``) validated by ``model``; one ConfigError line
    naming the policy file and line of the first problem."""
    try:
        return model.model_validate(dict(table))
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(str(p) if not isinstance(p, int) else p for p in error["loc"])
        key = ".".join(str(p) for p in ("backend", name, *loc))
        path: tuple[str | int, ...] = ("backend", name, *loc)
        if error["type"] == "extra_forbidden":
            text = f"unknown key {key!r}"
        else:
            text = f"{key}: {str(error['msg']).removeprefix('Value error, ')}"
        raise ConfigError(f"{where(path)}: {text}") from None
