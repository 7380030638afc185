"""Benchmark (not a test): one shell command through ``sandloop mcp`` over stdio vs the Python API.

Interleaved rounds, in one run, on one checkout (the order reversed every other round):

* ``direct``: ``true`` through :func:`executor.open_sandbox` (the policy gate and its audit
  records, the helper's round trip): the baseline;
* ``mcp shell``: ``true`` as a ``tools/call`` of ``shell`` from the MCP SDK's client to
  sandloop's server, a subprocess on stdio as clients launch it;
* ``mcp shell, SDK stdio``: the same server on the SDK's own ``stdio_server`` (a worker thread
  for every line read, write and flush), which ``sandloop mcp`` replaced;
* ``no-op``: a tool of the same server, on the same connection, that runs nothing and answers
  what ``shell`` answers for ``true`` (the same text and structured content, which the client
  checks against the same output schema): the SDK's floor, client and server, with the JSON-RPC
  framing and the transport;
* ``no-op, idle``: the same, answering after an ``asyncio.sleep`` as long as the direct round
  trip (both processes go to sleep and are woken as they are for a command); ``sleep alone`` is
  that sleep in this process, so the difference is the floor for a call that waits that long;
* ``ping``: a JSON-RPC round trip that reaches no tool;
* ``handler, in the server``: how long sandloop's tools/call handler took for each ``mcp shell``
  call, timed in the server, and ``its commands, in it``: the part of it that is the direct
  path's own work (``run_steps``: the gate and the helper's round trip), so the difference splits
  into what happens outside the handler (the SDK and the transport), sandloop's work around the
  commands, and the same commands run from a second process.

Target: mcp shell / direct ≤ 1.5× (median). Then where the difference goes: the SDK's floor, and
the work sandloop's server adds per call to the direct path, each part timed alone here (the
arguments checked against the schema and the limits, the result shaped, the call recorded in
the run's requests.jsonl), with the SDK's JSON-RPC framing of one request and its answer.

``python bench/mcp.py --serve REPO [--sdk-stdio]`` is the server the bench launches:
``sandloop mcp``'s own (:func:`executor.mcp.server.build_server` on its stdio transport), with
the no-op tool added through the SDK's public handler registry.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

# Run as a script (as `make bench` runs it), this file's folder is first on the path, where its
# name would hide the `mcp` package: the folder leaves, the checkout comes in.
sys.path.remove(str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

import executor
from bench.report import judge, median, p90, rounds
from executor.audit import RequestLog
from executor.demo import DEMO_DIR
from executor.handlers.shell import Step
from executor.mcp import calls, server
from executor.mcp.session import ServeOptions
from executor.mcp.tools import SHELL
from policies.engine import load_policy

NOOP = "noop"
HANDLED = "handled"  # the handler's times, for the breakdown
TARGET = 1.5
ARGS = {"commands": ["true"]}
TIMEOUT_MS = 60_000
STEP = Step("", "", 0, duration_s=0.0042)  # what `true` answers


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _answer() -> calls.CallAnswer:
    """What the server answers for ``true``, made by the same code."""
    results = [calls.shell_result("true", STEP)]
    return calls.CallAnswer(calls.shell_text(results, TIMEOUT_MS), {"results": results, "timeout_ms": TIMEOUT_MS},
                            False, {"type": "shell_call", "call_id": "bench"}, {"type": "shell_call_output"})


# -- the server the bench launches ---------------------------------------------------------


def _with_noop(built: server.Built) -> None:
    """``built``'s server with the no-op tool, and ``handled``: the seconds sandloop's own
    tools/call handler took for each shell call, in order (the bench reads them at the end)."""
    listing = built.server.get_request_handler("tools/list")
    calling = built.server.get_request_handler("tools/call")
    assert listing is not None and calling is not None
    answer = server.tool_result(_answer())
    noop = types.Tool(name=NOOP, description="runs nothing", input_schema=SHELL.input_schema,
                      output_schema=SHELL.output_schema)
    timings = types.Tool(name=HANDLED, description="the handler's times", input_schema={"type": "object"})
    handled: list[float] = []
    ran: list[float] = []
    run_steps = calls.run_steps

    async def timed_steps(*args: Any, **kwargs: Any) -> Any:  # the direct path's work, timed in place
        start = time.perf_counter()
        try:
            return await run_steps(*args, **kwargs)
        finally:
            ran.append(time.perf_counter() - start)

    calls.run_steps = timed_steps  # type: ignore[assignment]  # instrumentation, in the bench's server only

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        listed: types.ListToolsResult = await listing.handler(ctx, params)
        return types.ListToolsResult(tools=[*listed.tools, noop, timings])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        if params.name == HANDLED:
            return types.CallToolResult(content=[], structured_content={"handled": handled, "ran": ran})
        if params.name != NOOP:
            start = time.perf_counter()
            try:
                return await calling.handler(ctx, params)
            finally:
                handled.append(time.perf_counter() - start)
        idle_ms = (params.arguments or {}).get("timeout_ms")
        if idle_ms:
            await asyncio.sleep(idle_ms / 1000)
        return answer

    built.server.add_request_handler("tools/list", listing.params_type, list_tools)
    built.server.add_request_handler("tools/call", calling.params_type, call_tool)


async def serve(repo: Path, *, sdk_stdio: bool) -> None:
    sessions = server.Sessions(ServeOptions(repo=repo, browser="off"))
    built = server.build_server(sessions)
    _with_noop(built)
    if not sdk_stdio:
        await server.serve_built_stdio(sessions, built)
        return
    try:
        async with stdio_server() as (read_stream, write_stream):
            await serve_loop(built.server, read_stream, write_stream, lifespan_state={},
                             init_options=built.server.create_initialization_options())
    finally:
        await sessions.drain()


# -- the round trips -----------------------------------------------------------------------


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def _checkout(root: Path) -> Path:
    repo = Path(shutil.copytree(DEMO_DIR / "repo", root / "repo"))
    for path in [repo, *repo.rglob("*")]:
        os.chown(path, 1000, 1000)  # the sandbox's user owns the checkout
    return repo


async def _call(client: Client, name: str, args: dict[str, Any]) -> None:
    result = await client.call_tool(name, args)
    assert not result.is_error and result.structured_content is not None, result


async def round_trips(repo: Path, env: dict[str, str]) -> tuple[dict[str, list[float]], int]:
    """Every path's samples, and how long the idle no-op idled (ms)."""
    def launch(*extra: str) -> Client:
        return Client(StdioServerParameters(command=sys.executable, args=[__file__, "--serve", str(repo), *extra],
                                            env=env))

    async with AsyncExitStack() as stack:
        sandbox = await stack.enter_async_context(executor.open_sandbox(repo))
        client = await stack.enter_async_context(launch())
        sdk = await stack.enter_async_context(launch("--sdk-stdio"))

        async def direct() -> None:
            result = await sandbox.run("true")
            assert result.exit_code == 0, result

        async def ping() -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # a handshake-era method
                await client.send_ping()

        for each in (client, sdk):
            await each.list_tools()  # the client checks structured results against the listed schemas
            await _call(each, "shell", ARGS)  # the session opens at its first call
        idle_ms = max(1, round(1000 * median([await _timed(direct) for _ in range(9)])))
        paths: dict[str, Callable[[], Awaitable[Any]]] = {
            "direct": direct,
            "mcp shell": lambda: _call(client, "shell", ARGS),
            "mcp shell, SDK stdio": lambda: _call(sdk, "shell", ARGS),
            "no-op": lambda: _call(client, NOOP, ARGS),
            "no-op, idle": lambda: _call(client, NOOP, {**ARGS, "timeout_ms": idle_ms}),
            "sleep alone": lambda: asyncio.sleep(idle_ms / 1000),
            "ping": ping,
        }
        for _ in range(3):  # warm-up
            for fn in paths.values():
                await fn()
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for i in range(rounds(200, quick=8)):
            order = list(paths.items())
            if i % 2:  # neither side always meets a warmer machine
                order.reverse()
            for name, fn in order:
                samples[name].append(await _timed(fn))
        timings = (await client.call_tool(HANDLED, {})).structured_content
        assert timings is not None
        n = len(samples["direct"])
        samples["handler, in the server"] = timings["handled"][-n:]
        samples["its commands, in it"] = timings["ran"][-n:]
    return samples, idle_ms


# -- the parts, each alone -----------------------------------------------------------------


def _per_call(fn: Callable[[], object], n: int) -> float:
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n // 5):
            fn()
        batches.append((time.perf_counter() - start) / (n // 5))
    return statistics.median(batches)


def parts(folder: Path) -> dict[str, float]:
    """Seconds per call of each piece of work the MCP path adds to the direct one."""
    n = rounds(2000, quick=200)
    checked = server.Checked(SHELL, load_policy(None).policy.files.max_patch_bytes)
    answer = _answer()
    log = RequestLog(folder / "requests.jsonl")
    request = types.JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/call",
                                   params={"name": "shell", "arguments": ARGS})
    response = types.JSONRPCResponse(jsonrpc="2.0", id=7, result=server.tool_result(answer).model_dump(
        by_alias=True, mode="json", exclude_unset=True))
    lines = [m.model_dump_json(by_alias=True, exclude_unset=True) for m in (request, response)]

    def shaped() -> None:
        results = [calls.shell_result("true", STEP)]
        server.tool_result(calls.CallAnswer(calls.shell_text(results, TIMEOUT_MS),
                                            {"results": results, "timeout_ms": TIMEOUT_MS}, False, {}, {}))

    def framed() -> None:
        for message, line in zip((request, response), lines, strict=True):
            message.model_dump_json(by_alias=True, exclude_unset=True)
            types.jsonrpc_message_adapter.validate_json(line, by_name=False)

    return {
        "arguments checked (schema, limits)": _per_call(lambda: checked.problem(dict(ARGS)), n),
        "result shaped (structured, text, MCP types)": _per_call(shaped, n),
        "call recorded (requests.jsonl)": _per_call(lambda: log.event(
            "call", 1, tool="shell", item=answer.item, output=answer.output, is_error=False, duration_s=0.01),
            n // 4),
        "JSON-RPC framing (the SDK's types, both ways)": _per_call(framed, n),
    }


def _paired(samples: dict[str, list[float]], a: str, b: str) -> float:
    """The median of ``a - b`` round by round: the load that moves both within a round cancels."""
    return median([x - y for x, y in zip(samples[a], samples[b], strict=True)])


def report(samples: dict[str, list[float]], idle_ms: int, pieces: dict[str, float]) -> None:
    med = {k: median(v) for k, v in samples.items()}
    print(f"`true`, {len(samples['direct'])} interleaved rounds (the idle no-op and the sleep: {idle_ms} ms)")
    for name, values in samples.items():
        print(f"  {name:22s} median {ms(med[name]):>10}   p90 {ms(p90(values)):>10}")
    ratio = med["mcp shell"] / med["direct"]
    judge("mcp shell / direct", f"median {ratio:.2f}× ({ms(med['mcp shell'])} vs {ms(med['direct'])})",
          f"<= {TARGET}×", ratio <= TARGET)
    sdk = med["mcp shell, SDK stdio"] / med["direct"]
    print(f"  for context: the same server on the SDK's stdio_server is {sdk:.2f}× direct; sandloop's "
          f"transport minus the SDK's, round by round: "
          f"{ms(_paired(samples, 'mcp shell', 'mcp shell, SDK stdio'))}")
    extra = _paired(samples, "mcp shell", "direct")
    floor = _paired(samples, "no-op, idle", "sleep alone")
    outside = _paired(samples, "mcp shell", "handler, in the server")
    inside = _paired(samples, "handler, in the server", "direct")
    wrapped = _paired(samples, "handler, in the server", "its commands, in it")
    elsewhere = _paired(samples, "its commands, in it", "direct")
    ours = sum(v for k, v in pieces.items() if not k.startswith("JSON-RPC"))
    print(f"where the {ms(extra)} between mcp shell and direct go (medians of round-by-round differences):")
    print(f"  outside sandloop's handler: the SDK's client and server, JSON-RPC, stdio   {ms(outside):>10}")
    print(f"    the SDK's floor for a call that waits as long (no-op, idle - sleep alone) {ms(floor):>10}")
    print(f"    answered at once, the no-op takes {ms(med['no-op'])}; a ping {ms(med['ping'])}")
    print(f"  inside it, beyond the direct path (handler - direct)                       {ms(inside):>10}")
    print(f"    sandloop's own work around the commands (handler - its commands)         {ms(wrapped):>10}")
    print(f"      its parts, each timed alone in this process                            {ms(ours):>10}")
    for name, seconds in pieces.items():
        print(f"        {name:48s} {ms(seconds):>10}")
    print(f"    the same commands (gate, helper) from the server's process (- direct)    {ms(elsewhere):>10}")


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-mcp-") as tmp:
        root = Path(tmp)
        state = root / "state"
        state.mkdir()
        os.environ["XDG_STATE_HOME"] = str(state)  # every run folder, removed with tmp
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        samples, idle_ms = await round_trips(_checkout(root), env)
        pieces = parts(root)
    report(samples, idle_ms, pieces)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(Path(sys.argv[2]).resolve(), sdk_stdio="--sdk-stdio" in sys.argv[3:]))
    else:
        asyncio.run(main())
