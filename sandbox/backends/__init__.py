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

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandloop.errors import ConfigError

from ..base import Session
from ..docker import DockerConfig
from ..seam import Backend, BackendOptions, Where, no_where, validate_options

__all__ = ["BACKENDS", "Backend", "BackendOptions", "Where", "get", "names", "open_session", "options_for",
           "validate_options"]

#: name -> the module holding that back-end's :class:`Backend` subclass (as ``BACKEND``).
BACKENDS: Mapping[str, str] = {
    "docker": "sandbox.backends.docker",
    "kubernetes": "sandbox.kubernetes.backend",
}


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


def options_for(backend: Backend, table: Mapping[str, Any], where: Where = no_where) -> Any:
    """``table`` validated by the back-end's own model (see :func:`validate_options`)."""
    return validate_options(backend.name, backend.options_model, table, where)


async def open_session(name: str, workspace: Path, config: DockerConfig, table: Mapping[str, Any],
                       *, where: Where = no_where) -> Session:
    """The one call that starts a session: back-end ``name`` with its options ``table``."""
    backend = get(name)
    return await backend.open(workspace, config, options_for(backend, table, where))
