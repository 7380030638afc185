"""How much one MCP message and one tool call may carry, and why each bound is what it is.

Every bound here is checked before anything runs, and before a session's sandbox is started;
what exceeds one is answered with a message that names the bound, and the connection goes on.

``message_limit``  one JSON-RPC message, on either transport: 4 MiB (the MCP SDK's default for
                   an HTTP request body), or 4 × the policy's ``files.max_patch_bytes`` when
                   that is larger (a patch is sent inside a JSON string, whose escapes can grow
                   it). A larger message is read on to its end in constant memory and answered
                   with a JSON-RPC error; it is never parsed.
``MAX_COMMANDS``   command lines in one shell call: each may run for the policy's
                   ``max_timeout_ms``, so one call costs at most this many timeouts.
``MAX_COMMAND_CHARS``  the characters of a shell call's command lines, all together. The
                   policy parses every line on the host (tree-sitter-bash) before it runs, and
                   the parse grows faster than the line: 16 KiB of ``a|a|…`` takes seconds, 64
                   KiB minutes. File contents belong in apply_patch.
``files.max_patch_bytes``  the policy's own bound on a patch (1 MiB by default), held before the
                   patch is parsed. ``MAX_PATCH_FILES`` bounds the files one patch may touch:
                   each is decided by the policy, recorded, read and written.
``MAX_ACTIONS``, ``MAX_TYPED_CHARS``  a computer call's actions, and the characters its
                   ``type`` actions type (one key event each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_ACTIONS", "MAX_COMMANDS", "MAX_COMMAND_CHARS", "MAX_PATCH_FILES", "MAX_TYPED_CHARS",
           "MIN_MESSAGE_BYTES", "computer_problem", "message_limit", "patch_problem", "shell_problem",
           "too_many_files"]

#: the MCP SDK's own default for a Streamable HTTP request body (mcp.server.transport_security)
MIN_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_COMMANDS = 100
MAX_COMMAND_CHARS = 16 * 1024
MAX_PATCH_FILES = 1000
MAX_ACTIONS = 100
MAX_TYPED_CHARS = 10_000


def message_limit(max_patch_bytes: int) -> int:
    """The bytes one JSON-RPC message may have, for a policy allowing patches of this size."""
    return max(MIN_MESSAGE_BYTES, 4 * max_patch_bytes)


def shell_problem(commands: Sequence[str]) -> str | None:
    """Why a shell call's command lines are too much (the schema bounds each one alone)."""
    total = sum(len(c) for c in commands)
    if total > MAX_COMMAND_CHARS:
        return (f"the command lines total {total} characters; a call may carry {MAX_COMMAND_CHARS} (the "
                "policy parses each line before it runs): write long text to a file with apply_patch")
    return None


def patch_problem(patch: str, max_patch_bytes: int) -> str | None:
    """Why a patch is refused before it is parsed: larger than the policy allows."""
    size = len(patch.encode("utf-8", "surrogatepass"))
    if size > max_patch_bytes:
        return (f"the patch is {size} bytes; the policy allows {max_patch_bytes} (files.max_patch_bytes)"
                "\nNo file was changed.")
    return None


def too_many_files(count: int) -> str | None:
    """Why a parsed patch is refused before any file is decided: it touches too many."""
    if count > MAX_PATCH_FILES:
        return f"the patch touches {count} files; one patch may touch {MAX_PATCH_FILES}\nNo file was changed."
    return None


def computer_problem(actions: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a computer call's actions are too much (the schema bounds their number)."""
    typed = sum(len(a["text"]) for a in actions if a.get("type") == "type" and isinstance(a.get("text"), str))
    if typed > MAX_TYPED_CHARS:
        return (f"the type actions total {typed} characters; a call may type {MAX_TYPED_CHARS} (each is a "
                "key event)")
    return None
