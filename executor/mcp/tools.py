"""The tools ``sandloop mcp`` offers: names, descriptions and JSON Schemas, input and output.

Plain data, no MCP SDK: :mod:`executor.mcp.server` turns each :class:`ToolSpec` into the SDK's
``Tool`` and validates every call's arguments against the same input schema it offered. The
computer tool's action schema is the ``openai`` SDK's own (the authority on the wire shapes the
browser back-end takes), so an action the browser can run is exactly one the schema admits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import TypeAdapter

from executor.mcp.limits import MAX_ACTIONS, MAX_COMMAND_CHARS, MAX_COMMANDS
from executor.navigation import navigation_tool_params
from policies.model import Policy
from sandloop.verdict import Decision

__all__ = ["APPLY_PATCH", "COMPUTER", "SHELL", "ToolSpec", "computer_offered", "offered"]

_NULLABLE_INT: dict[str, Any] = {"type": ["integer", "null"]}
_NULLABLE_STR: dict[str, Any] = {"type": ["string", "null"]}

#: a policy refusal: the rule that decided, why, and where the rule is written
_REFUSAL: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "rule_id": {**_NULLABLE_STR, "description": "the rule that decided (null: the section's default)"},
        "justification": {"type": "string"},
        "source": {**_NULLABLE_STR, "description": "file:line of the rule in the policy"},
    },
    "required": ["rule_id", "justification", "source"],
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    #: MCP tool annotations (hints for the client: read-only, destructive, open world)
    annotations: dict[str, Any] = field(default_factory=dict)


SHELL = ToolSpec(
    name="shell",
    title="Shell (sandboxed)",
    description=(
        "Run shell command lines (bash -c) in the sandboxed checkout, /workspace, one after the "
        "other. Each command is decided by the sandloop policy first: refused ones do not run "
        "(exit code 126, the rule in 'refused'), some need a person's approval. A timeout kills "
        "the command's processes and skips the rest of the call. Output is capped (head and "
        "tail kept); 'truncated' says how much was dropped."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "commands": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS},
                         "minItems": 1, "maxItems": MAX_COMMANDS,
                         "description": f"command lines, run in order ({MAX_COMMAND_CHARS} characters in "
                                        "all; write long text to a file with apply_patch)"},
            "timeout_ms": {"type": "integer", "minimum": 1,
                           "description": "per command (default and maximum: the policy's)"},
            "max_output_length": {"type": "integer", "minimum": 0,
                                  "description": "characters of stdout+stderr kept per command"},
        },
        "required": ["commands"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "results": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "exit_code": {**_NULLABLE_INT, "description": "null when the command timed out"},
                    "timed_out": {"type": "boolean"},
                    "skipped": {"type": "boolean", "description": "not run: an earlier command timed out"},
                    "stdout": {"type": "string"},
                    "stderr": {"type": "string"},
                    "duration_s": {"type": "number"},
                    "truncated": {
                        "type": "object",
                        "properties": {
                            "stdout_bytes": {"type": "integer", "description": "dropped by the sandbox's cap"},
                            "stderr_bytes": {"type": "integer", "description": "dropped by the sandbox's cap"},
                            "chars": {"type": "integer", "description": "cut to meet max_output_length"},
                        },
                        "required": ["stdout_bytes", "stderr_bytes", "chars"],
                    },
                    "refused": _REFUSAL,
                },
                "required": ["command", "exit_code", "timed_out", "skipped", "stdout", "stderr",
                             "duration_s", "truncated", "refused"],
            }},
            "timeout_ms": {"type": "integer", "description": "the timeout each command got"},
        },
        "required": ["results", "timeout_ms"],
    },
    annotations={"destructiveHint": True, "openWorldHint": False},
)

APPLY_PATCH = ToolSpec(
    name="apply_patch",
    title="Apply a patch (sandboxed)",
    description=(
        "Create, update or delete files in the sandboxed checkout, all or nothing. 'patch' is an "
        "envelope (*** Begin Patch / *** Add File: p / *** Update File: p with @@ hunks / "
        "*** Delete File: p / *** End Patch), a unified diff (--- a/p, +++ b/p, @@ hunks), or — "
        "with 'operation' and 'path' — one V4A diff (update: @@ hunks; create: every line "
        "prefixed with '+'; delete: empty). Paths are relative to the workspace; every file is "
        "decided by the sandloop policy (.git is read-only)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "patch": {"type": "string",
                      "description": "the patch text (at most the policy's files.max_patch_bytes: 1 MiB by default)"},
            "format": {"enum": ["auto", "envelope", "unified", "v4a"], "default": "auto",
                       "description": "auto: v4a when 'operation' is given, else envelope or unified"},
            "operation": {"enum": ["create_file", "update_file", "delete_file"],
                          "description": "V4A only: what the diff does to 'path'"},
            "path": {"type": "string", "minLength": 1, "description": "V4A only: the file"},
        },
        "required": ["patch"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "applied": {"type": "boolean"},
            "files": {"type": "array", "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "change": {"enum": ["written", "deleted"]}},
                "required": ["path", "change"],
            }},
            "message": {"type": "string"},
            "refused": {**_REFUSAL, "properties": {
                **_REFUSAL["properties"], "path": {"type": "string"}, "operation": {"type": "string"}}},
        },
        "required": ["applied", "files", "message", "refused"],
    },
    annotations={"destructiveHint": True, "openWorldHint": False},
)


@cache
def _action_schema() -> dict[str, Any]:
    from openai.types.responses.computer_action import ComputerAction

    return TypeAdapter(ComputerAction).json_schema()


#: the computer tool's title and description, by where it acts
_COMPUTER_TEXT = {
    "browser": ("Browser (sandboxed Chromium)",
                "Act on a Chromium page — click, double_click, scroll, type, keypress, move, drag, "
                "wait, screenshot — and get ONE screenshot back after the actions (coordinates are "
                "pixels of that screenshot). Every request the page makes is decided by the sandloop "
                "policy's [browser] rules. Use navigate to open a URL."),
    "desktop": ("Desktop (sandboxed Linux, X11)",
                "Act on a Linux desktop (the openbox window manager; an xterm open in the checkout at "
                "/workspace; mousepad and chromium to start from it) — click, double_click, scroll, type, "
                "keypress, move, drag, wait, screenshot — and get ONE screenshot back after the actions "
                "(coordinates are pixels of that screenshot). Its network is the sandloop policy's "
                "[shell] network allow-list."),
}


def _computer(environment: str = "browser") -> ToolSpec:
    action = _action_schema()
    title, description = _COMPUTER_TEXT[environment]
    return ToolSpec(
        name="computer",
        title=title,
        description=description,
        input_schema={
            "type": "object",
            "$defs": action.get("$defs", {}),
            "properties": {"actions": {
                "type": "array", "items": {k: v for k, v in action.items() if k != "$defs"}, "maxItems": MAX_ACTIONS,
                "description": "run in order; an empty list just takes a screenshot"}},
            "required": ["actions"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "the page after the actions"},
                "width": {"type": "integer"},
                "height": {"type": "integer"},
                "notes": {"type": "array", "items": {"type": "string"},
                          "description": "what the browser could not do, a restart"},
            },
            "required": ["url", "width", "height", "notes"],
        },
        annotations={"destructiveHint": False, "openWorldHint": True},
    )


_NAVIGATION_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {"type": "string"}, "url": {"type": "string"}},
    "required": ["result", "url"],
}


def _navigation() -> list[ToolSpec]:
    return [ToolSpec(name=p["name"], title=f"Browser: {p['name']}", description=p["description"],
                     input_schema=p["parameters"], output_schema=_NAVIGATION_OUTPUT,
                     annotations={"destructiveHint": False, "openWorldHint": True})
            for p in navigation_tool_params()]


COMPUTER = "computer"


def computer_offered(placement: str, policy: Policy) -> bool:
    """A computer is offered unless ``--browser off``, or the policy's ``[browser]`` rules let
    the browser open no page at all (nothing allowed, and the default is deny). The desktop is
    always offered: its network is the ``[shell]`` one, not the browser's rules."""
    if placement in ("off", "desktop"):
        return placement == "desktop"
    section = policy.browser
    return bool(section.allow_domains) or section.default is not Decision.DENY


def offered(placement: str, policy: Policy) -> list[ToolSpec]:
    """The tools a session gets: the shell and apply_patch; the computer where
    :func:`computer_offered`, with the navigation tools when it is a browser."""
    tools = [SHELL, APPLY_PATCH]
    if placement == "desktop":
        tools.append(_computer("desktop"))
    elif computer_offered(placement, policy):
        tools += [_computer("browser"), *_navigation()]
    return tools
