"""One agent run from a policy: start the back-ends it needs, drive the loop, close everything.

:func:`open_toolbox` starts what a policy asks for — the policy gate with its approvals and
hash-chained audit log, the Docker session, the browser — as an async context manager;
:func:`run_task` runs one task through the loop with them. ``sandloop run``, ``sandloop replay``
and the demo all go through here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from rich.console import Console

from executor import safety
from executor.approvals import Approvals, DenyAll, TerminalPrompt, safety_callback
from executor.audit import LOG_NAME, RequestLog, new_run_id, run_folder
from executor.browser_gate import BrowserGate
from executor.environment import prepare_environment
from executor.handlers import computer
from executor.loop import Budgets, Loop, LoopConfig, RunResult
from executor.policy_gate import PolicyGate
from executor.progress import Progress
from executor.safety import SafetyCallback
from executor.sandbox_config import shell_limits
from executor.testing.cassette import Cassette
from executor.toolbox import Toolbox
from policies.audit import SUMMARY_KEY, AuditLog
from policies.engine import load_policy
from policies.model import Policy
from sandbox.browser import open_browser
from sandbox.docker import DockerSession
from sandloop.hostfiles import refuse_inside

__all__ = ["AUDIT_NAME", "DEFAULT_INSTRUCTIONS", "BudgetOverrides", "RunFiles", "RunOptions", "RunOutcome",
           "Runtime", "budgets_from", "open_toolbox", "run_task"]

AUDIT_NAME = "audit.jsonl"

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
    #: the request log; its folder holds the run's other files (default: a new run folder
    #: under the state directory, outside anything the sandbox can write)
    log: Path | None = None
    record: Path | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    approvals: Approvals | None = None
    #: the image to start from for this run (``--image``), instead of the policy's [environment] one
    image: str | None = None


def _safety_callback(mode: str, approvals: Approvals) -> SafetyCallback:
    """policy browser.safety_checks → the computer handler's pending-safety-check callback."""
    if mode == "acknowledge":
        return safety.acknowledge_all
    if mode == "ask":
        return safety_callback(approvals)
    return safety.refuse_all


def budgets_from(policy: Policy, overrides: BudgetOverrides) -> Budgets:
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
    audit: AuditLog


@dataclass
class RunFiles:
    """Where a run's files go: one folder, checked before anything is written."""

    log: Path  # requests.jsonl; the folder holds audit.jsonl, screenshots/, summary.json
    record: Path | None

    @property
    def folder(self) -> Path:
        return self.log.parent

    @classmethod
    def plan(cls, opts: RunOptions, run_id: str) -> RunFiles:
        """The run's files, refused (HostPathRefused) where the sandbox could write them."""
        log = opts.log if opts.log is not None else run_folder(run_id) / LOG_NAME
        files = cls(log, opts.record)
        refuse_inside(files.folder, [opts.repo], "the run's folder (--log)")
        if files.record is not None:
            refuse_inside(files.record, [opts.repo], "the cassette (--record)")
        return files


@dataclass
class RunOutcome:
    """A finished run: its result, and where its files are."""

    result: RunResult
    folder: Path
    audit_head: str
    log: RequestLog | None = None

    def to_json(self) -> dict[str, Any]:
        """The result with every call's output, as the log holds them (screenshots by reference)."""
        data = self.result.to_json()
        if self.log is not None:
            data = self.log.clean(data)
        return {**data, "run_dir": str(self.folder), "audit_head": self.audit_head}


@contextlib.asynccontextmanager
async def open_toolbox(opts: RunOptions, on_event: Callable[[str, dict[str, Any]], None],
                       log_dir: Path) -> AsyncIterator[Runtime]:
    """Start the back-ends a run uses (policy gate, Docker session, browser) and close them."""
    engine = load_policy(opts.policy)
    policy = engine.policy
    approvals = opts.approvals or (DenyAll() if policy.unattended or not sys.stdin.isatty()
                                   else TerminalPrompt())
    audit = AuditLog(log_dir / AUDIT_NAME)
    gate = PolicyGate(engine, approvals, audit, on_event=on_event)
    toolbox = Toolbox(gate=gate, patch_read_only_globs=tuple(policy.files.read_only))
    toolbox.limits = shell_limits(policy)
    toolbox.memory = policy.shell.resources.memory
    async with contextlib.AsyncExitStack() as stack:
        config, _ = await prepare_environment(engine.loaded, opts.repo.resolve(), image=opts.image,
                                              log_dir=log_dir, on_event=on_event)
        toolbox.session = await DockerSession.create(opts.repo.resolve(), config)
        stack.push_async_callback(toolbox.session.close)
        if opts.browser != "off":
            browser = open_browser(BrowserGate(gate, toolbox).config(policy),
                                   placement=opts.browser)  # type: ignore[arg-type]
            stack.push_async_callback(browser.close)
            await browser.start()
            toolbox.browser = browser
            toolbox.computer_safety = _safety_callback(policy.browser.safety_checks, approvals)
            if opts.model.startswith("computer-use-preview"):
                toolbox.computer_display = browser.config.viewport  # the preview tool wants a display
            toolbox.functions.extend(computer.navigation_tools(browser))
        yield Runtime(toolbox, budgets_from(policy, opts.budgets), audit)


def _client(opts: RunOptions) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=opts.api_key or os.environ.get("OPENAI_API_KEY"),
                              base_url=opts.base_url or os.environ.get("OPENAI_BASE_URL"))


async def run_task(opts: RunOptions, console: Console, *,
                   interrupted: list[RunOutcome] | None = None) -> RunOutcome:
    """One run with live progress on ``console``. When Ctrl-C cancels it, what was done so far
    is appended to ``interrupted`` (the cancellation goes on)."""
    run_id = new_run_id()
    files = RunFiles.plan(opts, run_id)
    progress = Progress(console)
    observers = []
    recorder = None
    if files.record is not None:
        recorder = Cassette.recorder(files.record)
        observers.append(lambda body, resp: recorder.record(
            body, resp.model_dump(mode="json", exclude_unset=True)))
    config = LoopConfig(model=opts.model, instructions=opts.instructions,
                        stateless=opts.stateless,
                        # the preview computer tool requires it
                        extra={"truncation": "auto"} if opts.model.startswith("computer-use-preview") else {})
    try:
        async with open_toolbox(opts, progress, files.folder) as runtime:
            head = runtime.audit.head
            log = RequestLog(files.log, run_id=run_id,
                             summary_fields=lambda: {SUMMARY_KEY: head().to_json()})
            config.budgets = runtime.budgets
            loop = Loop(_client(opts), config, runtime.toolbox, on_event=progress,
                        observers=observers, log=log)
            try:
                result = await loop.run(opts.task)
            finally:
                if loop.interrupted is not None and interrupted is not None:
                    interrupted.append(RunOutcome(loop.interrupted, files.folder, str(head()), log))
            return RunOutcome(result, files.folder, str(head()), log)
    finally:
        if recorder is not None:
            recorder.close()
