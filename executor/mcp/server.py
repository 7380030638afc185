"""The MCP server: the official SDK's low-level ``Server`` with sandloop's tools behind it.

``tools/list`` offers :func:`executor.mcp.tools.offered`; ``tools/call`` checks the arguments
against the schema it offered, then hands the call to the connection's
:class:`~executor.mcp.session.McpSession`. A connection is an MCP session: the stdio pipe, or
one ``Mcp-Session-Id`` over Streamable HTTP. Its session object lives in the SDK's
per-connection state and is closed by the connection's exit stack, which the SDK unwinds
however the connection ends (the client closed stdin or sent DELETE, the session idled out,
the server shut down). A server killed outright leaves its containers to the Docker back-end:
their helper sees the attach stream close and removes them, and the next session start reaps
whatever a dead owner left.

Sessions are the handshake protocol's (MCP 2025-11-25 and earlier). The stateless 2026-07-28
revision has no session to tie a sandbox to (nor a disconnect to remove it at), so its discovery
probe is answered as a server of the handshake era: clients in the SDK's default ``auto`` mode,
and every client that must talk to existing servers, fall back to the handshake.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from dataclasses import replace
from typing import Any, NamedTuple

import jsonschema
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_loop
from mcp.shared.exceptions import MCPError

from executor.approvals import ApprovalAnswer, ApprovalRequest
from executor.mcp import limits
from executor.mcp.approvals import APPROVED, Ask, question
from executor.mcp.calls import CallAnswer
from executor.mcp.session import McpSession, ServeOptions
from executor.mcp.stdio import stdio
from executor.mcp.tools import APPLY_PATCH, COMPUTER, SHELL, ToolSpec, offered
from executor.run import placement
from policies.engine import load_policy
from sandbox.images import package_version
from sandloop.errors import describe
from sandloop.text import visible

__all__ = ["INSTRUCTIONS", "Built", "Checked", "Sessions", "build_server", "serve_built_stdio", "serve_stdio", "tell",
           "tool_result"]

INSTRUCTIONS = (
    "sandloop: a sandboxed checkout of a repository (/workspace in a hardened container). Use "
    "shell to inspect and test, apply_patch to edit files, and computer with navigate when a "
    "web page is involved. A policy decides every command, file change and page request: a "
    "refused action comes back with the rule that refused it; some need a person's approval."
)

#: the key of a connection's McpSession in the SDK's per-connection state
_STATE_KEY = "sandloop.session"

#: the form a person answers a policy prompt with (one explicit yes/no field: a client that
#: accepts an empty form without asking cannot approve anything by accident)
_APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"allow": {"type": "boolean", "title": "Allow",
                             "description": "Allow this action (it runs inside the sandbox)"}},
    "required": ["allow"],
}


def tell(text: str) -> None:
    """A line for the operator on stderr (stdout is the protocol's on stdio)."""
    print(f"sandloop mcp: {visible(text, one_line=True)}", file=sys.stderr, flush=True)


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The SDK builds a fresh ServerSession proxy per message over the connection's one
    # `Connection` (per-connection `state` and `exit_stack`). Its migration guide says that
    # object "is not currently reachable from ctx" and a public way is planned; until then the
    # proxy's reference is the one way to tie a sandbox to the connection's whole life.
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError("this version of the mcp SDK does not expose the MCP connection: "
                           "install the version sandloop[mcp] names")
    return connection


def _client_name(ctx: ServerRequestContext[Any, Any]) -> str:
    params = ctx.session.client_params
    if params is None:
        return "an MCP client"
    info = params.client_info
    return f"{info.name} {info.version}".strip()


class Sessions:
    """The sessions of one server: each made at its connection's first tool call, and closed
    when the connection ends. The SDK bounds a connection's clean-up (5 s); a close that takes
    longer (a browser container stopping) goes on, and :meth:`drain` waits for it before the
    server exits."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self._closing: set[asyncio.Task[None]] = set()

    def of(self, ctx: ServerRequestContext[Any, Any]) -> McpSession:
        connection = _connection(ctx)
        session = connection.state.get(_STATE_KEY)
        if not isinstance(session, McpSession):  # the connection's first tool call
            session = McpSession(self.options, client=_client_name(ctx), tell=tell)
            connection.state[_STATE_KEY] = session
            connection.exit_stack.push_async_callback(self._close, session)
        return session

    async def _close(self, session: McpSession) -> None:
        task = asyncio.get_running_loop().create_task(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        await asyncio.shield(task)

    async def drain(self) -> None:
        """Wait for every session close still under way."""
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _asker(ctx: ServerRequestContext[Any, Any]) -> Ask:
    """Questions raised by this request, asked through MCP elicitation on it — or refused when
    the client declared it cannot answer one."""
    session, request_id = ctx.session, ctx.request_id

    async def ask(request: ApprovalRequest) -> ApprovalAnswer:
        capabilities = session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return ApprovalAnswer(False, "denied: the MCP client does not support elicitation, so no "
                                         "person can be asked")
        try:
            result = await session.elicit_form(question(request), _APPROVAL_FORM, related_request_id=request_id)
        except Exception as exc:  # the client failed to ask: nobody said yes
            return ApprovalAnswer(False, f"denied: asking through MCP elicitation failed ({describe(exc)})")
        if result.action == "accept" and (result.content or {}).get("allow") is True:
            return ApprovalAnswer(True, APPROVED)
        how = "declined" if result.action == "accept" else result.action
        return ApprovalAnswer(False, f"denied through MCP elicitation ({how})")

    return ask


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(name=spec.name, title=spec.title, description=spec.description,
                      input_schema=spec.input_schema, output_schema=spec.output_schema,
                      annotations=types.ToolAnnotations(title=spec.title, **spec.annotations))


def tool_result(answer: CallAnswer) -> types.CallToolResult:
    """A call's answer as the MCP SDK's result: text (and the screenshot), structured content."""
    content: list[types.ContentBlock] = [types.TextContent(text=answer.text)]
    if answer.png is not None:
        content.append(types.ImageContent(data=base64.b64encode(answer.png).decode("ascii"), mime_type="image/png"))
    return types.CallToolResult(content=content, structured_content=answer.structured, is_error=answer.is_error)


class Checked:
    """One tool's arguments checked as the tool promises: its input schema (compiled once), then
    the bounds of :mod:`executor.mcp.limits` no schema can say."""

    def __init__(self, spec: ToolSpec, max_patch_bytes: int) -> None:
        self.spec = spec
        self._validator = jsonschema.Draft202012Validator(spec.input_schema)
        self._max_patch_bytes = max_patch_bytes

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """Why the tool refuses ``arguments``, in one line the model can act on; None: they pass."""
        name = self.spec.name
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            return f"invalid arguments for {name}: {where}: {_message(error)}"
        if name == SHELL.name:
            problem = limits.shell_problem(arguments["commands"])
        elif name == APPLY_PATCH.name:
            problem = limits.patch_problem(arguments["patch"], self._max_patch_bytes)
        elif name == COMPUTER:
            problem = limits.computer_problem(arguments["actions"])
        else:
            problem = None
        return None if problem is None else f"{name}: {problem}"


_SIZES = {"maxItems": ("items", "at most"), "minItems": ("items", "at least"),
          "maxLength": ("characters", "at most"), "minLength": ("characters", "at least")}


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, but a size says the bound rather than quote the value whole."""
    if error.validator in _SIZES and isinstance(error.instance, str | list):
        unit, side = _SIZES[str(error.validator)]
        return f"{len(error.instance)} {unit}; {side} {error.validator_value}"
    return _short(error.message)


def _short(message: str, limit: int = 300) -> str:
    """jsonschema quotes the offending value whole: a long one comes back cut."""
    return message if len(message) <= limit else f"{message[:limit]}… ({len(message)} characters)"


class Built(NamedTuple):
    server: Server[Any]
    #: the bytes one JSON-RPC message may have (:func:`executor.mcp.limits.message_limit`)
    message_limit: int


def build_server(sessions: Sessions) -> Built:
    """The server for ``sessions``' options. The policy is loaded here, so a policy that does not
    load is a one-line error before any client connects (each session loads it again when it
    opens)."""
    policy = load_policy(sessions.options.policy).policy
    # where the computer tool acts, settled once (a contradiction is refused here, before any
    # client connects): every session opens that placement
    where = placement(sessions.options.browser, policy, default="auto")
    sessions.options = replace(sessions.options, browser=where)
    max_patch_bytes = policy.files.max_patch_bytes
    checked = {spec.name: Checked(spec, max_patch_bytes) for spec in offered(where, policy)}
    tools = [_tool(c.spec) for c in checked.values()]

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        check = checked.get(params.name)
        if check is None:  # a protocol error, as the MCP spec's tools/call says (arguments are not)
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {_short(params.name, 100)!r}; this server "
                                                 f"offers {', '.join(checked)}")
        arguments = dict(params.arguments or {})
        problem = check.problem(arguments)
        if problem is not None:  # the model can correct these: a tool result, flagged as an error
            return types.CallToolResult(content=[types.TextContent(text=problem)], is_error=True)
        session = sessions.of(ctx)
        return tool_result(await session.call(check.spec.name, arguments, _asker(ctx)))

    server = Server("sandloop", version=package_version(), title="sandloop",
                    description="A sandboxed checkout with a policy in front: shell, apply_patch, computer",
                    instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)
    return Built(server, limits.message_limit(max_patch_bytes))


async def serve_stdio(options: ServeOptions) -> None:
    """Serve one MCP session over this process's stdin and stdout until the client closes it."""
    sessions = Sessions(options)
    await serve_built_stdio(sessions, build_server(sessions))


async def serve_built_stdio(sessions: Sessions, built: Built) -> None:
    """:func:`serve_stdio` with the server already built (``bench/mcp.py`` adds a no-op tool)."""
    try:
        async with stdio(built.message_limit, tell) as (read_stream, write_stream):
            # The handshake-only loop (see the module docstring): a 2026-07-28 discovery probe
            # is answered "method not found", and the client falls back to `initialize`.
            await serve_loop(built.server, read_stream, write_stream, lifespan_state={},
                             init_options=built.server.create_initialization_options())
    finally:
        await sessions.drain()
