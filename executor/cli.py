"""``sandloop``: run a task through the loop, replay a cassette, and the other parts' commands.

``sandloop run TASK`` drives a model (``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``, or
``--base-url``) against a Docker sandbox of ``--repo``, an optional browser, and a policy,
printing live progress on stderr and the final answer on stdout. ``sandloop run --demo``
runs the bundled offline scenario (see :mod:`executor.demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from executor import demo, env_cli, k8s_cli, testing
from executor.loop import ExitCode
from executor.report import cli as report_cli
from executor.report import write_report
from executor.run import DEFAULT_INSTRUCTIONS, BudgetOverrides, RunOptions, RunOutcome, run_task
from executor.terminal import console as terminal_console
from executor.terminal import shown, visible
from policies import cli as policies_cli
from sandbox import backends
from sandbox import cli as sandbox_cli
from sandbox.images import package_version
from sandbox.patch import cli as patch_cli
from sandloop.errors import ConfigError, HostPathRefused, SandloopError, describe

__all__ = ["EPILOG", "build_parser", "execute", "main"]

EPILOG = """\
exit codes:
  0  answered: the model gave its final answer
  1  error: an API error, a failed response, a back-end that would not start
  2  usage: bad arguments, no API key, an invalid tool schema or policy file
  3  budget exhausted: turns, tokens, wall time or tool calls
  4  stopped by a refusal: a model refusal, the content filter, a refused safety check
  5  incomplete: the response stayed incomplete (e.g. max_output_tokens after one retry)
130  interrupted: Ctrl-C (the run summary is still printed and the sandbox removed)

environment:
  OPENAI_API_KEY   the API key (without it, only --demo runs, offline)
  OPENAI_BASE_URL  another Responses endpoint (overridden by --base-url)
"""


def _budgets(args: argparse.Namespace) -> BudgetOverrides:
    return BudgetOverrides(max_turns=args.max_turns, max_total_tokens=args.max_tokens,
                           max_wall_s=args.max_wall, max_tool_calls=args.max_tool_calls)


def _emit(outcome: RunOutcome, args: argparse.Namespace, console: Console) -> int:
    result = outcome.result
    report = None
    if getattr(args, "report", False) and outcome.log is not None:
        report = write_report(outcome.log.path, run_id=outcome.log.run_id)
    if args.json:
        print(json.dumps({**outcome.to_json(), **({"report": str(report)} if report else {})},
                         default=str, indent=2))
    elif result.final_text:
        print(visible(result.final_text))
    console.print(f"[dim]run: {shown(outcome.folder)}  audit head: {outcome.audit_head}  tokens: "
                  f"{result.usage.total_tokens}  turns: {len(result.turns)}  wall: {result.wall_s:.1f} s[/]")
    if report is not None:
        console.print(f"report: {shown(report)}")
    return int(result.exit_code)


def _fail(args: argparse.Namespace, console: Console, code: ExitCode, text: str) -> int:
    """A run that ended before it could produce a result: one line, and with --json the same
    as a JSON object (every exit path prints one)."""
    if getattr(args, "json", False):
        print(json.dumps({"reason": code.name.lower(), "exit_code": int(code), "detail": text}, indent=2))
    console.print(f"[red]sandloop {getattr(args, 'command', '')}: {shown(text)}[/]")
    return int(code)


def cmd_run(args: argparse.Namespace) -> int:
    console = terminal_console()
    if args.demo:
        with demo.scenario(args, console, _budgets(args)) as opts:
            return execute(opts, args, console)
    if not args.task:
        return _fail(args, console, ExitCode.USAGE, "a TASK is required (or --demo)")
    if not (os.environ.get("OPENAI_API_KEY") or args.base_url
            or os.environ.get("OPENAI_BASE_URL")):
        return _fail(args, console, ExitCode.USAGE, "set OPENAI_API_KEY (or use --demo to run offline)")
    if not Path(args.repo).is_dir():
        return _fail(args, console, ExitCode.USAGE, f"--repo {args.repo} is not a directory")
    opts = RunOptions(
        task=args.task, repo=Path(args.repo), model=args.model, base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY") or "unset", policy=args.policy,
        browser=args.browser or "off", budgets=_budgets(args), stateless=args.stateless,
        log=Path(args.log) if args.log else None, record=Path(args.record) if args.record else None,
        backend=args.backend, image=args.image)
    return execute(opts, args, console)


def execute(opts: RunOptions, args: argparse.Namespace, console: Console) -> int:
    """Run and report, turning set-up failures into the documented exit codes."""
    interrupted: list[RunOutcome] = []
    try:
        outcome = asyncio.run(run_task(opts, console, interrupted=interrupted))
    except KeyboardInterrupt:
        # asyncio cancelled the run on Ctrl-C: the sandbox and the browser were closed on the
        # way out; what the run did so far was summarised in the log.
        console.print("[yellow]interrupted[/]")
        if interrupted:
            return _emit(interrupted[0], args, console)
        return _fail(args, console, ExitCode.INTERRUPTED, "interrupted before the run started")
    except (SandloopError, OSError, ValueError) as exc:
        usage = isinstance(exc, (ConfigError, ValueError, HostPathRefused))
        return _fail(args, console, ExitCode.USAGE if usage else ExitCode.ERROR, describe(exc))
    return _emit(outcome, args, console)


def cmd_replay(args: argparse.Namespace) -> int:
    """Serve the cassette's responses from the fake server, run the real tools again, and
    report every call whose output differs from the recording (exit 0: none differ)."""
    console = terminal_console()
    if not Path(args.file).is_file():
        return _fail(args, console, ExitCode.USAGE, f"no cassette at {args.file}")
    cassette = testing.Cassette.load(args.file)
    if not cassette.requests:
        console.print(f"sandloop replay: {args.file} holds no exchanges")
        return int(ExitCode.USAGE)
    first = cassette.requests[0]
    with testing.FakeResponsesServer(testing.ScriptedModel.from_cassette(args.file)) as server:
        opts = RunOptions(
            task=first["input"], repo=Path(args.repo), model=str(first.get("model")),
            base_url=server.base_url, api_key="replay", policy=args.policy,
            browser=args.browser, stateless=first.get("store") is False,
            log=Path(args.log) if args.log else None,
            instructions=first.get("instructions") or DEFAULT_INSTRUCTIONS,
            budgets=BudgetOverrides(max_turns=len(cassette.requests)))
        result = asyncio.run(run_task(opts, console)).result
        differences = testing.compare_tool_outputs(cassette.requests, server.requests)
    for diff in differences:
        console.print(shown(diff), highlight=False)
    console.print(f"replay: {len(differences)} tool output(s) differ; run ended "
                  f"{shown(result.reason)} after {len(result.turns)} turn(s)")
    return 0 if not differences else int(ExitCode.ERROR)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a task through the loop", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", help="what the model should do")
    p.add_argument("--repo", default=".", help="the checkout to work in (default: .)")
    p.add_argument("--model", default=os.environ.get("SANDLOOP_MODEL", "gpt-5.4"),
                   help="the model to drive (default: SANDLOOP_MODEL, else gpt-5.4)")
    p.add_argument("--base-url", help="Responses API base URL (default: OPENAI_BASE_URL)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("container", "local", "off"), default=None,
                   help="where Chromium runs (default: off; the demo picks container or local)")
    p.add_argument("--backend", choices=backends.names(), default=None,
                   help="what runs the session (default: the policy's [backend] type, else docker)")
    p.add_argument("--image", help="the image to start from for this run, instead of the policy's "
                   "[environment] image or dockerfile (its setup still applies)")
    p.add_argument("--max-turns", type=int, help="budget on turns (default: the policy's)")
    p.add_argument("--max-tokens", type=int, help="budget on total tokens (from usage)")
    p.add_argument("--max-wall", type=float, help="budget on wall time, seconds")
    p.add_argument("--max-tool-calls", type=int, help="budget on executed tool calls")
    p.add_argument("--stateless", action="store_true",
                   help="store:false and replay the whole history each turn")
    p.add_argument("--log", help="the request/response log; its folder holds the run's other files "
                   "(default: a new folder under $XDG_STATE_HOME/sandloop/runs/; never inside --repo)")
    p.add_argument("--record", help="save requests and responses as a cassette (never inside --repo)")
    p.add_argument("--json", action="store_true", help="print the run result as JSON")
    p.add_argument("--report", action="store_true",
                   help="write the run's HTML report (report.html in the run folder) and print its path")
    p.add_argument("--demo", action="store_true",
                   help="run the bundled scenario (offline without OPENAI_API_KEY)")
    p.set_defaults(func=cmd_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandloop", description="Run OpenAI Responses API tool calls in a sandbox.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sandloop {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    p = sub.add_parser("replay", help="re-play a cassette's model side against the sandbox",
                       description="exit 0 when every tool output matches the recording, "
                                   "1 when some differ")
    p.add_argument("file", help="a cassette written by `sandloop run --record`")
    p.add_argument("--repo", default=".", help="the checkout to run the tools in (default: .)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("container", "local", "off"), default="off",
                   help="where Chromium runs for computer calls (default: off)")
    p.add_argument("--log", help="the request/response log (default: a new run folder, as for run)")
    p.set_defaults(func=cmd_replay)
    # The other parts' commands.
    for module in (sandbox_cli, policies_cli, patch_cli, report_cli, env_cli, k8s_cli):
        module.register(sub)
    from executor.mcp import cli as mcp_cli  # argparse only: the MCP SDK is imported when `mcp` runs

    mcp_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Every command, with no traceback for anything a user can cause: a failure is one line
    and a documented exit code (set SANDLOOP_DEBUG=1 to see the traceback of a bug)."""
    parser = build_parser()
    args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more can be said to it, and Python must not
        # complain when it flushes stdout on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except (SandloopError, OSError, ValueError) as exc:
        usage = isinstance(exc, (ConfigError, ValueError, HostPathRefused))
        return _fail(args, terminal_console(), ExitCode.USAGE if usage else ExitCode.ERROR, describe(exc))
    except Exception as exc:
        if os.environ.get("SANDLOOP_DEBUG"):
            raise
        return _fail(args, terminal_console(), ExitCode.ERROR,
                     f"{describe(exc)} (a bug in sandloop: SANDLOOP_DEBUG=1 shows where)")
    return code


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Options anywhere: what follows ``--`` is given to the command that takes free words
    (``policy explain FILE --json -- 'git push'``) whatever came before it; argparse alone
    would have handed the positional its (empty) words before seeing ``--``."""
    tail: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if tail is not None:
        dest = getattr(args, "words_after_dashes", None)
        if dest is None:
            parser.error(f"{args.command} takes no words after --")
        setattr(args, dest, [*(getattr(args, dest) or []), *tail])
    return args


if __name__ == "__main__":
    raise SystemExit(main())
