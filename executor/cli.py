"""``sandloop``: run a task through the loop, replay a cassette, and the other parts' commands.

``sandloop run TASK`` drives a model (``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``, or
``--base-url``) against a Docker sandbox of ``--repo``, an optional browser, and a policy,
printing live progress on stderr and the final answer on stdout. ``sandloop run --demo``
runs the bundled offline scenario (see :mod:`executor.demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from rich.console import Console
from rich.markup import escape

from executor import testing
from executor.approvals import Approvals, DenyAll, TerminalPrompt, safety_callback
from executor.audit import DEFAULT_LOG, RequestLog
from executor.dispatch import Toolbox
from executor.handlers import computer
from executor.loop import Budgets, ExitCode, Loop, LoopConfig, RunResult
from executor.policy_gate import PolicyGate
from executor.sandbox_config import docker_config, shell_limits
from executor.testing.cassette import Cassette
from policies import cli as policies_cli
from sandbox import cli as sandbox_cli
from sandbox.browser import BrowserConfig, open_browser
from sandbox.docker import DockerSession
from sandbox.patch import cli as patch_cli
from sandloop.errors import ToolSchemaError

__all__ = ["EPILOG", "RunOptions", "build_parser", "main", "open_toolbox", "run_task"]

EPILOG = """\
exit codes:
  0  answered: the model gave its final answer
  1  error: an API error, a failed response, a back-end that would not start
  2  usage: bad arguments, no API key, an invalid tool schema or policy file
  3  budget exhausted: turns, tokens, wall time or tool calls
  4  stopped by a refusal: a model refusal, the content filter, a refused safety check
  5  incomplete: the response stayed incomplete (e.g. max_output_tokens after one retry)

environment:
  OPENAI_API_KEY   the API key (without it, only --demo runs, offline)
  OPENAI_BASE_URL  another Responses endpoint (overridden by --base-url)
"""

DEFAULT_INSTRUCTIONS = (
    "You are a careful coding agent working in a sandboxed checkout of a repository. Use the "
    "shell tool to inspect and test, apply_patch to edit files, and the browser tools when a "
    "web page is involved. Finish with a short answer that says what you changed and why."
)


@dataclass
class BudgetOverrides:
    """Budgets given on the command line; None leaves the policy's value."""

    max_turns: int | None = None
    max_total_tokens: int | None = None
    max_wall_s: float | None = None
    max_tool_calls: int | None = None


@dataclass
class RunOptions:
    """What ``sandloop run`` needs, also used by the demo driver."""

    task: str | list[dict[str, Any]]
    repo: Path
    model: str = "gpt-5.4"
    base_url: str | None = None
    api_key: str | None = None
    policy: str | None = None
    browser: str = "off"
    budgets: BudgetOverrides = field(default_factory=lambda: BudgetOverrides())
    stateless: bool = False
    log: Path = DEFAULT_LOG
    record: Path | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    approvals: Approvals | None = None


class Progress:
    """Live progress on stderr: turns, calls, decisions, outcomes, timings."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        c = self.console
        if kind == "turn_start":
            c.print(f"[bold]turn {data['turn']}[/]")
        elif kind == "response":
            u = data["usage"]
            c.print(f"  [dim]response {data['status']} in {data['request_s'] * 1000:.0f} ms, "
                    f"{u.total_tokens} tokens[/]")
        elif kind == "call_start":
            c.print(f"  → {data['type']} [cyan]{escape(data['summary'])}[/]", highlight=False)
        elif kind == "decision":
            colour = "green" if data["decision"] == "allow" else "red"
            c.print(f"    policy [{colour}]{data['decision']}[/] {data['what']} "
                    f"[dim]{escape(data['subject'][:80])} ({escape(data.get('rule_id') or 'default')})[/]",
                    highlight=False)
        elif kind == "call_end":
            mark = "[green]✓[/]" if data["ok"] else "[red]✗[/]"
            c.print(f"  {mark} {data['type']} {escape(data['outcome'][:100])} "
                    f"[dim]({data['duration_s']:.2f} s)[/]", highlight=False)
        elif kind == "retry":
            c.print(f"  [yellow]incomplete: retrying with max_output_tokens="
                    f"{data['max_output_tokens']}[/]")
        elif kind == "waiting":
            c.print(f"  [dim]waiting for background calls {data['pending']}[/]")
        elif kind == "stop":
            c.print(f"[bold]stop[/]: {data['reason']} (exit {data['exit_code']})"
                    + (f" — {escape(str(data['detail']))}" if data.get("detail") else ""))


def _safety_callback(mode: str, approvals: Approvals) -> Any:
    """policy browser.safety_checks → the computer handler's pending-safety-check callback."""
    if mode == "acknowledge":
        return computer.acknowledge_all
    if mode == "ask":
        return safety_callback(approvals)
    return computer.refuse_all


def budgets_from(policy: Any, overrides: BudgetOverrides) -> Budgets:
    """The policy's [budget] section, with every budget given on the command line winning."""
    section = getattr(policy, "budget", None)

    def pick(name: str, policy_name: str, default: Any) -> Any:
        given = getattr(overrides, name)
        if given is not None:
            return given
        value = getattr(section, policy_name, None) if section is not None else None
        return default if value is None else value

    return Budgets(max_turns=pick("max_turns", "max_turns", 50),
                   max_total_tokens=pick("max_total_tokens", "max_tokens", None),
                   max_wall_s=pick("max_wall_s", "max_wall_s", None),
                   max_tool_calls=pick("max_tool_calls", "max_tool_calls", None))


@dataclass
class Runtime:
    toolbox: Toolbox
    budgets: Budgets


@contextlib.asynccontextmanager
async def open_toolbox(opts: RunOptions, on_event: Callable[[str, dict[str, Any]], None],
                       log_dir: Path) -> AsyncIterator[Runtime]:
    """Start the back-ends a run uses (policy gate, Docker session, browser) and close them."""
    from policies.audit import AuditLog
    from policies.engine import load_policy

    engine = load_policy(opts.policy)
    policy = engine.policy
    approvals = opts.approvals or (DenyAll() if policy.unattended or not sys.stdin.isatty()
                                   else TerminalPrompt())
    toolbox = Toolbox(gate=PolicyGate(engine, approvals, AuditLog(log_dir / "audit.jsonl"),
                                      on_event=on_event),
                      patch_read_only_globs=tuple(policy.files.read_only))
    toolbox.shell_limits = shell_limits(policy)
    async with contextlib.AsyncExitStack() as stack:
        toolbox.session = await DockerSession.create(opts.repo.resolve(), docker_config(policy))
        stack.push_async_callback(toolbox.session.close)
        if opts.browser != "off":
            browser = open_browser(
                BrowserConfig(allow_url=engine.url,
                              redact_selectors=tuple(policy.browser.redact_selectors)),
                placement=opts.browser)  # type: ignore[arg-type]
            stack.push_async_callback(browser.close)
            await browser.start()
            toolbox.browser = browser
            toolbox.computer_safety = _safety_callback(policy.browser.safety_checks, approvals)
            if opts.model.startswith("computer-use-preview"):
                toolbox.computer_display = browser.config.viewport  # the preview tool wants a display
            toolbox.functions.extend(computer.navigation_tools(browser))
        yield Runtime(toolbox, budgets_from(policy, opts.budgets))


def _client(opts: RunOptions) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=opts.api_key or os.environ.get("OPENAI_API_KEY"),
                              base_url=opts.base_url or os.environ.get("OPENAI_BASE_URL"))


async def run_task(opts: RunOptions, console: Console) -> RunResult:
    log = RequestLog(opts.log)
    progress = Progress(console)
    observers = []
    recorder = None
    if opts.record is not None:
        recorder = Cassette.recorder(opts.record)
        observers.append(lambda body, resp: recorder.record(
            body, resp.model_dump(mode="json", exclude_unset=True)))
    config = LoopConfig(model=opts.model, instructions=opts.instructions,
                        stateless=opts.stateless,
                        # the preview computer tool requires it (protocol.md A.6)
                        extra={"truncation": "auto"} if opts.model.startswith("computer-use-preview") else {})
    try:
        async with open_toolbox(opts, progress, opts.log.parent) as runtime:
            config.budgets = runtime.budgets
            loop = Loop(_client(opts), config, runtime.toolbox, on_event=progress,
                        observers=observers, log=log)
            return await loop.run(opts.task)
    finally:
        if recorder is not None:
            recorder.close()


def _budgets(args: argparse.Namespace) -> BudgetOverrides:
    return BudgetOverrides(max_turns=args.max_turns, max_total_tokens=args.max_tokens,
                           max_wall_s=args.max_wall, max_tool_calls=args.max_tool_calls)


def _emit(result: RunResult, args: argparse.Namespace, console: Console) -> int:
    if args.json:
        print(json.dumps(result.to_json(), default=str, indent=2))
    elif result.final_text:
        print(result.final_text)
    console.print(f"[dim]log: {args.log}  tokens: {result.usage.total_tokens}  "
                  f"turns: {len(result.turns)}  wall: {result.wall_s:.1f} s[/]")
    return int(result.exit_code)


def cmd_run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    if args.demo:
        from executor.demo import run_demo

        return run_demo(args, console)
    if not args.task:
        console.print("sandloop run: a TASK is required (or --demo)")
        return int(ExitCode.USAGE)
    if not (os.environ.get("OPENAI_API_KEY") or args.base_url
            or os.environ.get("OPENAI_BASE_URL")):
        console.print("sandloop run: set OPENAI_API_KEY (or use --demo to run offline)")
        return int(ExitCode.USAGE)
    opts = RunOptions(
        task=args.task, repo=Path(args.repo), model=args.model, base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY") or "unset", policy=args.policy,
        browser=args.browser or "off", budgets=_budgets(args), stateless=args.stateless,
        log=Path(args.log), record=Path(args.record) if args.record else None)
    return execute(opts, args, console)


def execute(opts: RunOptions, args: argparse.Namespace, console: Console) -> int:
    """Run and report, turning set-up failures into the documented exit codes."""
    try:
        result = asyncio.run(run_task(opts, console))
    except ToolSchemaError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return int(ExitCode.USAGE)
    except Exception as exc:
        from policies.model import PolicyLoadError
        from sandloop.errors import SandloopError, describe

        if not isinstance(exc, (SandloopError, OSError, ValueError)):
            raise
        console.print(f"[red]sandloop run: {escape(describe(exc))}[/]")
        usage = isinstance(exc, (ValueError, PolicyLoadError))
        return int(ExitCode.USAGE if usage else ExitCode.ERROR)
    return _emit(result, args, console)


def cmd_replay(args: argparse.Namespace) -> int:
    """Serve the cassette's responses from the fake server, run the real tools again, and
    report every call whose output differs from the recording (exit 0: none differ)."""
    console = Console(stderr=True)
    cassette = testing.Cassette.load(args.file)
    if not cassette.requests:
        console.print(f"sandloop replay: {args.file} holds no exchanges")
        return int(ExitCode.USAGE)
    first = cassette.requests[0]
    with testing.FakeResponsesServer(testing.ScriptedModel.from_cassette(args.file)) as server:
        opts = RunOptions(
            task=first["input"], repo=Path(args.repo), model=str(first.get("model")),
            base_url=server.base_url, api_key="replay", policy=args.policy,
            browser=args.browser, stateless=first.get("store") is False, log=Path(args.log),
            instructions=first.get("instructions") or DEFAULT_INSTRUCTIONS,
            budgets=BudgetOverrides(max_turns=len(cassette.requests)))
        result = asyncio.run(run_task(opts, console))
        differences = testing.compare_tool_outputs(cassette.requests, server.requests)
    for diff in differences:
        console.print(str(diff), markup=False, highlight=False)
    console.print(f"replay: {len(differences)} tool output(s) differ; run ended "
                  f"{result.reason} after {len(result.turns)} turn(s)")
    return 0 if not differences else int(ExitCode.ERROR)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a task through the loop", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", help="what the model should do")
    p.add_argument("--repo", default=".", help="the checkout to work in (default: .)")
    p.add_argument("--model", default=os.environ.get("SANDLOOP_MODEL", "gpt-5.4"))
    p.add_argument("--base-url", help="Responses API base URL (default: OPENAI_BASE_URL)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("container", "local", "off"), default=None,
                   help="where Chromium runs (default: off; the demo picks container or local)")
    p.add_argument("--max-turns", type=int, help="budget on turns (default: the policy's)")
    p.add_argument("--max-tokens", type=int, help="budget on total tokens (from usage)")
    p.add_argument("--max-wall", type=float, help="budget on wall time, seconds")
    p.add_argument("--max-tool-calls", type=int, help="budget on executed tool calls")
    p.add_argument("--stateless", action="store_true",
                   help="store:false and replay the whole history each turn")
    p.add_argument("--log", default=str(DEFAULT_LOG), help="request/response JSONL log")
    p.add_argument("--record", help="save requests and responses as a cassette")
    p.add_argument("--json", action="store_true", help="print the run result as JSON")
    p.add_argument("--demo", action="store_true",
                   help="run the bundled scenario (offline without OPENAI_API_KEY)")
    p.set_defaults(func=cmd_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandloop", description="Run OpenAI Responses API tool calls in a sandbox.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    p = sub.add_parser("replay", help="re-play a cassette's model side against the sandbox",
                       description="exit 0 when every tool output matches the recording, "
                                   "1 when some differ")
    p.add_argument("file")
    p.add_argument("--repo", default=".")
    p.add_argument("--policy")
    p.add_argument("--browser", choices=("container", "local", "off"), default="off")
    p.add_argument("--log", default=str(DEFAULT_LOG))
    p.set_defaults(func=cmd_replay)
    # The other parts' commands.
    for module in (sandbox_cli, policies_cli, patch_cli):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
