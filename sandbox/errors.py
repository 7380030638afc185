"""sandloop's one exception tree.

    SandloopError
    ├── ConfigError             a configuration or policy file is invalid (names file and line)
    ├── NotEnabled              the run has no back-end for this kind of call
    ├── PolicyDenied            a policy rule refused the action
    ├── SandboxError            something went wrong where things run
    │   ├── SandboxTimeout      a call ran past its deadline
    │   ├── SandboxUnavailable  engine, container or browser is gone or cannot start
    │   ├── PathRefused         a path failed validation or points outside the workspace
    │   ├── FileMissing         a file the operation needs does not exist
    │   └── BrowserError        a browser action could not be carried out
    └── PatchError              a patch could not be parsed or applied (nothing was written)
        ├── PatchParseError     the diff text is malformed
        ├── ContextNotFound     a hunk's expected lines are not in the file
        └── BinaryFile          the target is not UTF-8 text

Every error reaches the model through exactly one function, :func:`describe`.
"""

from __future__ import annotations

__all__ = [
    "BinaryFile",
    "BrowserError",
    "ConfigError",
    "ContextNotFound",
    "FileMissing",
    "NotEnabled",
    "PatchError",
    "PatchParseError",
    "PathRefused",
    "PolicyDenied",
    "SandboxError",
    "SandboxTimeout",
    "SandboxUnavailable",
    "SandloopError",
    "describe",
]


class SandloopError(Exception):
    """Base of every error sandloop raises on purpose."""


class ConfigError(SandloopError):
    """A configuration or policy file is invalid; the message names the file and the line."""


class NotEnabled(SandloopError):
    """This run has no back-end for the call (no session, no browser, no catalog …)."""


class PolicyDenied(SandloopError):
    """A policy decided `deny`; the message carries the rule and its justification."""


class SandboxError(SandloopError):
    """A failure in a sandbox back-end."""


class SandboxTimeout(SandboxError):
    """An operation ran past its deadline."""


class SandboxUnavailable(SandboxError):
    """The engine, the container or the browser is not there (dead, not started, unreachable)."""


class PathRefused(SandboxError):
    """A path was refused before anything was read or written."""


class FileMissing(SandboxError):
    """The file an operation needs does not exist."""


class BrowserError(SandboxError):
    """A browser action could not be carried out."""


class PatchError(SandloopError):
    """A patch could not be applied; nothing was written."""


class PatchParseError(PatchError):
    """The patch text does not follow the grammar."""


class ContextNotFound(PatchError):
    """The lines a hunk expects were not found in the file."""


class BinaryFile(PatchError):
    """The file is binary (NUL bytes or not UTF-8) and cannot be patched as text."""


_PREFIX: dict[type[BaseException], str] = {
    ConfigError: "invalid configuration",
    NotEnabled: "not enabled",
    PolicyDenied: "denied by policy",
    SandboxTimeout: "timed out",
    SandboxUnavailable: "sandbox unavailable",
    PathRefused: "path refused",
    FileMissing: "file not found",
    BrowserError: "browser error",
    PatchParseError: "invalid patch",
    ContextNotFound: "patch does not apply",
    BinaryFile: "binary file",
    PatchError: "patch failed",
    SandboxError: "sandbox error",
    SandloopError: "error",
}


def describe(exc: BaseException) -> str:
    """The one model-facing text for any exception: short, plain, actionable."""
    for cls in type(exc).__mro__:
        prefix = _PREFIX.get(cls)
        if prefix is not None:
            msg = str(exc).strip()
            return f"{prefix}: {msg}" if msg else prefix
    # An unexpected bug: name the type so the model (and the log) can tell it apart.
    msg = str(exc).strip()
    return f"internal error ({type(exc).__name__}): {msg}" if msg else f"internal error ({type(exc).__name__})"
