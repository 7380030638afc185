"""The back-end seam: which program runs a session, chosen by name.

The loop, the handlers and the command line only know :class:`~sandbox.base.Session`. Which
back-end makes one is a name — a policy's ``[backend] type`` or ``sandloop run --backend`` —
looked up here. A back-end is one module holding a :class:`Backend` subclass and the pydantic
model of its options (the policy's ``[backend.NAME]`` table); adding one is that module plus a
line in :data:`BACKENDS`. Modules are imported only when their back-end is used, so the optional
``kubernetes`` client is never imported by a Docker run.

Every back-end is given the same :class:`~sandbox.docker.DockerConfig` (what the policy decided:
image, resources, runtime, environment, network allow-list, read-only paths, limits) and turns it
into its own objects; its options say only *where* and *how* (a namespace, a context, a
RuntimeClass), never what a command may do.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from sandloop.errors import ConfigError

from ..base import Session
from ..docker import DockerConfig

__all__ = ["BACKENDS", "Backend", "BackendOptions", "Where", "get", "names", "open_session", "options_for",
           "validate_options"]

#: name -> the module holding that back-end's :class:`Backend` subclass (as ``BACKEND``).
BACKENDS: Mapping[str, str] = {
    "docker": "sandbox.backends.docker",
    "kubernetes": "sandbox.kubernetes.backend",
}

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


def names() -> list[str]:
    return list(BACKENDS)


def get(name: str) -> Backend:
    """The back-end called ``name``; ConfigError for an unknown one or a missing optional extra."""
    module_name = BACKENDS.get(name)
    if module_name is None:
        raise ConfigError(f"no back-end {name!r} (known: {', '.join(BACKENDS)})")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"the {name} back-end needs {exc.name or 'a missing package'}: "
                          f"pip install 'sandloop[{name}]'") from None
    backend: Backend = module.BACKEND
    return backend


def _no_where(path: tuple[str | int, ...]) -> str:
    return "options"


def options_for(backend: Backend, table: Mapping[str, Any], where: Where = _no_where) -> Any:
    """``table`` validated by the back-end's own model (see :func:`validate_options`)."""
    return validate_options(backend.name, backend.options_model, table, where)


def validate_options(name: str, model: type[BackendOptions], table: Mapping[str, Any],
                     where: Where = _no_where) -> Any:
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


async def open_session(name: str, workspace: Path, config: DockerConfig, table: Mapping[str, Any],
                       *, where: Where = _no_where) -> Session:
    """The one call that starts a session: back-end ``name`` with its options ``table``."""
    backend = get(name)
    return await backend.open(workspace, config, options_for(backend, table, where))
