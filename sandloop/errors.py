"""sandloop's one exception tree.

    SandloopError
    ├── ConfigError             a configuration, a policy file or a tool definition is invalid
    │   ├── PolicyLoadError     a policy file does not load (policies.model; names file and line)
    │   └── ToolSchemaError     a function tool's schema breaks a strict-mode rule
    ├── HostPathRefused         a host-side file sandloop writes would land where the sandbox
    │                           can write, or behind a link: refused, nothing written
    ├── NotAnAddress            a host that ends in a number yet is no IP address (a ValueError)
    ├── NotEnabled              the run has no back-end for this kind of call
    ├── PolicyDenied            a policy rule refused the action
    ├── SafetyCheckRefused      a computer-use safety check was refused: the run stops
    ├── SandboxError            something went wrong where things run
    │   ├── SandboxTimeout      a call ran past its deadline
    │   ├── SandboxUnavailable  engine, container or browser is gone or cannot start
    │   ├── PathRefused         a path failed validation or points outside the workspace
    │   ├── FileMissing         a file the operation needs does not exist
    │   ├── FileTooLarge        a file is larger than the sandbox reads in one piece
    │   ├── ResourcesExhausted  the sandbox ran out of processes (a fork bomb left behind)
    │   ├── CommandNotStarted   the shell itself could not be started
    │   ├── SandboxIOError      the file system refused a read or a write
    │   ├── HelperFailed        the in-sandbox helper could not serve a request (a bug)
    │   └── BrowserError        a browser action could not be carried out
    │       └── UnknownKey      a key name the key table does not know
    └── PatchError              a patch could not be parsed or applied (nothing was written)
        ├── PatchParseError     the diff text is malformed
        ├── ContextNotFound     a hunk's expected lines are not in the file
        └── BinaryFile          the target is not UTF-8 text

Every error reaches the model through exactly one function, :func:`describe`. Standard library
only: the in-sandbox programs carry this module with them.
"""

from __future__ import annotations

__all__ = [
    "BinaryFile",
    "BrowserError",
    "CommandNotStarted",
    "ConfigError",
    "ContextNotFound",
    "FileMissing",
    "FileTooLarge",
    "HelperFailed",
    "HostPathRefused",
    "NotAnAddress",
    "NotEnabled",
    "PatchError",
    "PatchParseError",
    "PathRefused",
    "PolicyDenied",
    "ResourcesExhausted",
    "SafetyCheckRefused",
    "SandboxError",
    "SandboxIOError",
    "SandboxTimeout",
    "SandboxUnavailable",
    "SandloopError",
    "ToolSchemaError",
    "UnknownKey",
    "describe",
]


class SandloopError(Exception):
    """Base of every error sandloop raises on purpose."""


class ConfigError(SandloopError):
    """A configuration or policy file is invalid; the message names the file and the line."""


class ToolSchemaError(ConfigError):
    """A function tool's schema breaks a strict-mode rule (caught before the first request)."""


class HostPathRefused(SandloopError):
    """A file the host writes (a log, the audit chain, a report) would land inside a tree the
    sandbox can write, or through a symlink: nothing was written."""


class NotAnAddress(SandloopError, ValueError):
    """A host that looks like an IP literal (ends in a number) but is not a valid one.

    Also a ValueError, so schema validators report it as an invalid value."""


class NotEnabled(SandloopError):
    """This run has no back-end for the call (no session, no browser, no catalog …)."""


class PolicyDenied(SandloopError):
    """A policy decided `deny`; the message carries the rule and its justification."""


class SafetyCheckRefused(SandloopError):
    """A pending computer-use safety check was refused: the run must stop, and the call gets
    no output that would claim the check was acknowledged."""

    def __init__(self, check_id: str, code: str | None, message: str | None, reason: str) -> None:
        self.check_id, self.code, self.check_message, self.reason = check_id, code, message, reason
        detail = (f" ({code})" if code else "") + (f": {message}" if message else "")
        super().__init__(f"safety check {check_id}{detail} was refused: {reason}")


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


class FileTooLarge(SandboxError):
    """A file is larger than the sandbox reads in one piece."""


class ResourcesExhausted(SandboxError):
    """The sandbox has no process left to start the command with."""


class CommandNotStarted(SandboxError):
    """The shell that runs the command could not be started."""


class SandboxIOError(SandboxError):
    """The sandbox's file system refused an operation (permissions, a full disk …)."""


class HelperFailed(SandboxError):
    """The in-sandbox helper could not serve a request: a malformed request or a helper bug."""


class BrowserError(SandboxError):
    """A browser action could not be carried out."""


class UnknownKey(BrowserError):
    """A key name the browser's key table does not know."""


class PatchError(SandloopError):
    """A patch could not be applied; nothing was written."""


class PatchParseError(PatchError):
    """The patch text does not follow the grammar."""


class ContextNotFound(PatchError):
    """The lines a hunk expects were not found in the file."""


class BinaryFile(PatchError):
    """The file is binary (NUL bytes or not UTF-8) and cannot be patched as text."""


_PREFIX: dict[type[BaseException], str] = {
    ToolSchemaError: "invalid tool schema",
    ConfigError: "invalid configuration",
    HostPathRefused: "host path refused",
    NotAnAddress: "not an address",
    NotEnabled: "not enabled",
    PolicyDenied: "denied by policy",
    SafetyCheckRefused: "safety check refused",
    SandboxTimeout: "timed out",
    SandboxUnavailable: "sandbox unavailable",
    PathRefused: "path refused",
    FileMissing: "file not found",
    FileTooLarge: "file too large",
    ResourcesExhausted: "out of resources",
    CommandNotStarted: "command not started",
    SandboxIOError: "I/O error",
    HelperFailed: "sandbox helper failed",
    UnknownKey: "unknown key",
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
