"""``sandloop run`` and ``sandloop replay``: a task through the loop, a cassette again.

``sandloop run TASK`` drives a model (``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``, or
``--base-url``) against a Docker sandbox of ``--repo``, an optional browser, and a policy,
printing live progress on stderr and the final answer on stdout. ``sandloop run --demo``
runs the bundled offline scenario (see :mod:`executor.demo`).

The run's modules (the openai client, Docker, the report's renderer) are imported by the
functions that run, not by this module: ``sandloop --help`` registers every command and should
not pay for them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.exits import EPILOG, ExitCode, fail
from sandbox import backends
from sandloop.errors import ConfigError, HostPathRefused, SandloopError, describe

if TYPE_CHECKING:
    from rich.console import Console

    from executor.run import BudgetOverrides, RunOptions, RunOutcome

__all__ = ["cmd_replay", "cmd_run", "execute", "register"]

_MODEL = "gpt-5.4"


def _budgets(args: argparse.Namespace) -> BudgetOverrides:
    from executor.run import BudgetOverrides

    return BudgetOverrides(max_turns=args.max_turns, max_total_tokens=args.max_tokens,
                           max_wall_s=args.max_wall, max_tool_calls=args.max_tool_calls)


def _emit(outcome: RunOutcome, args: argparse.Namespace, console: Console) -> int:
    from executor.report import write_report
    from executor.terminal import shown, visible

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


def _placement(args: argparse.Namespace) -> str | None:
    """Where computer calls go as the command line says; None leaves it to the policy's
    ``[computer] environment`` (see :func:`executor.run.placement`)."""
    return "desktop" if args.desktop else args.browser


#: what ``--demo`` cannot honour (its scenario brings its own task, repo copy and browser page):
#: refused, never quietly dropped
_NOT_WITH_DEMO = (("task", "a TASK (the demo runs its own)"),
                  ("repo", "--repo (the demo works in a copy of its own repo)"),
                  ("desktop", "--desktop (the demo's scenario drives a browser page)"),
                  ("live_view", "--live-view (the demo has no desktop)"), ("resume", "--resume"),
                  ("policy_changed_ok", "--policy-changed-ok"))


def _demo_conflict(args: argparse.Namespace) -> str | None:
    """The first option given with ``--demo`` that the demo would ignore, named; None if none."""
    for name, what in _NOT_WITH_DEMO:
        if getattr(args, name):
            return f"--demo cannot take {what}"
    if not os.environ.get("OPENAI_API_KEY"):  # offline, the model side is the scripted one
        if args.base_url:
            return "--demo runs offline without OPENAI_API_KEY (a scripted model): --base-url needs the key"
        # --model's default is SANDLOOP_MODEL: only a model named on the command line is refused
        if args.model not in (None, os.environ.get("SANDLOOP_MODEL")):
            return "--demo runs offline without OPENAI_API_KEY (a scripted model): --model needs the key"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from executor import demo
    from executor.run import RunOptions
    from executor.terminal import console as terminal_console

    console = terminal_console()
    if args.desktop and args.browser is not None:
        return fail(args, ExitCode.USAGE, "--desktop and --browser contradict each other: give one")
    if args.demo:
        conflict = _demo_conflict(args)
        if conflict is not None:
            return fail(args, ExitCode.USAGE, conflict)
        with demo.scenario(args, console, _budgets(args)) as opts:
            return execute(opts, args, console)
    if args.resume:
        return _resume(args, console)
    if not args.task:
        return fail(args, ExitCode.USAGE, "a TASK is required (or --demo)")
    if not (os.environ.get("OPENAI_API_KEY") or args.base_url
            or os.environ.get("OPENAI_BASE_URL")):
        return fail(args, ExitCode.USAGE, "set OPENAI_API_KEY (or use --demo to run offline)")
    repo = Path(args.repo or ".")
    if not repo.is_dir():
        return fail(args, ExitCode.USAGE, f"--repo {repo} is not a directory")
    opts = RunOptions(
        task=args.task, repo=repo, model=args.model or _MODEL, base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY") or "unset", policy=args.policy,
        browser=_placement(args), budgets=_budgets(args), stateless=args.stateless,
        log=Path(args.log) if args.log else None, record=Path(args.record) if args.record else None,
        backend=args.backend, image=args.image, live_view=args.live_view)
    return execute(opts, args, console)


def _resume(args: argparse.Namespace, console: Console) -> int:
    """``sandloop run --resume RUN [TASK]``: the snapshot's policy, checkout, model and endpoint
    unless given again; its conversation continued (TASK, if any, the next user message)."""
    from executor import snapshot
    from executor.run import RunOptions

    try:
        loaded = snapshot.load(args.resume)
    except SandloopError as exc:
        return fail(args, ExitCode.USAGE, describe(exc))
    manifest = loaded.manifest
    if not args.task and not loaded.state.pending:  # told before a run folder or a sandbox opens
        return fail(args, ExitCode.USAGE, snapshot.ANSWERED)
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or manifest.get("base_url")
    if not (os.environ.get("OPENAI_API_KEY") or base_url):
        return fail(args, ExitCode.USAGE, "set OPENAI_API_KEY to resume the run")
    opts = RunOptions(
        task=args.task or "", repo=Path(args.repo or manifest["repo"]), model=args.model or manifest["model"],
        base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "unset",
        policy=args.policy or manifest["policy"]["spec"], browser=_placement(args), budgets=_budgets(args),
        live_view=args.live_view, stateless=bool(manifest.get("stateless")),
        instructions=manifest.get("instructions") or "",
        log=Path(args.log) if args.log else None, record=Path(args.record) if args.record else None,
        backend=args.backend, image=args.image, resume=args.resume, policy_changed_ok=args.policy_changed_ok)
    if not opts.repo.is_dir():
        return fail(args, ExitCode.USAGE, f"the snapshot's checkout {opts.repo} is not a directory: give --repo")
    return execute(opts, args, console)


def execute(opts: RunOptions, args: argparse.Namespace, console: Console) -> int:
    """Run and report, turning set-up failures into the documented exit codes."""
    from executor.run import run_task
    from executor.terminal import shown

    interrupted: list[RunOutcome] = []
    try:
        outcome = asyncio.run(run_task(opts, console, interrupted=interrupted))
    except KeyboardInterrupt:
        # asyncio cancelled the run on Ctrl-C: the sandbox and the browser were closed on the
        # way out; what the run did so far was summarised in the log.
        console.print("[yellow]interrupted[/]")
        if interrupted:
            return _emit(interrupted[0], args, console)
        return fail(args, ExitCode.INTERRUPTED, "interrupted before the run started")
    except (SandloopError, OSError, ValueError) as exc:
        difference = getattr(exc, "difference", None)
        if difference:  # a policy changed since a snapshot: what changed, then the one line
            console.print(shown(difference), highlight=False)  # shown() escapes the markup
        usage = isinstance(exc, (ConfigError, ValueError, HostPathRefused))
        return fail(args, ExitCode.USAGE if usage else ExitCode.ERROR, describe(exc))
    return _emit(outcome, args, console)


def cmd_replay(args: argparse.Namespace) -> int:
    """Serve the cassette's responses from the fake server, run the real tools again, and
    report every call whose output differs from the recording (exit 0: none differ)."""
    from executor import testing
    from executor.run import DEFAULT_INSTRUCTIONS, BudgetOverrides, RunOptions, run_task
    from executor.terminal import console as terminal_console
    from executor.terminal import shown

    console = terminal_console()
    if not Path(args.file).is_file():
        return fail(args, ExitCode.USAGE, f"no cassette at {args.file}")
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
    p.add_argument("--repo", help="the checkout to work in (default: ., or the resumed snapshot's)")
    p.add_argument("--model", default=os.environ.get("SANDLOOP_MODEL"),
                   help="the model to drive (default: SANDLOOP_MODEL, else gpt-5.4, or the resumed snapshot's)")
    p.add_argument("--base-url", help="Responses API base URL (default: OPENAI_BASE_URL)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("container", "local", "off"), default=None,
                   help="where Chromium runs (default: off, or the desktop under a policy with [computer] "
                   "environment = \"desktop\", which refuses a browser; the demo picks container or local)")
    p.add_argument("--desktop", action="store_true",
                   help="computer calls drive a whole Linux desktop in a container (Xvfb, a window "
                   "manager, a terminal, an editor, Chromium) instead of a browser page (the default "
                   "under a policy with [computer] environment = \"desktop\")")
    p.add_argument("--live-view", action="store_true",
                   help="with the desktop: watch it with a VNC viewer (127.0.0.1, a password printed at start)")
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
    p.add_argument("--resume", metavar="RUN", help="continue RUN's snapshot (a run id or folder): its sandbox's "
                   "files, its conversation (TASK, if given, is the next user message), its budgets and audit chain")
    p.add_argument("--policy-changed-ok", action="store_true",
                   help="with --resume: go on even though the policy file changed since the snapshot")
    p.set_defaults(func=cmd_run)


def register(sub: Any) -> None:
    """Add ``run`` and ``replay`` to the ``sandloop`` subcommands."""
    _add_run(sub)
    p = sub.add_parser("replay", help="re-play a cassette's model side against the sandbox",
                       description="exit 0 when every tool output matches the recording, "
                                   "1 when some differ")
    p.add_argument("file", help="a cassette written by `sandloop run --record`")
    p.add_argument("--repo", default=".", help="the checkout to run the tools in (default: .)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("container", "local", "off"), default=None,
                   help="where Chromium runs for computer calls (default: off, or the desktop under a "
                   "policy with [computer] environment = \"desktop\")")
    p.add_argument("--log", help="the request/response log (default: a new run folder, as for run)")
    p.set_defaults(func=cmd_replay)
