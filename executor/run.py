"""One agent run from a policy: start the back-ends it needs, drive the loop, close everything.

:func:`open_toolbox` starts what a policy asks for — the policy gate with its approvals and
hash-chained audit log, the Docker session, the browser — as an async context manager.
:meth:`Run.open` plans the run's files (refused where the sandbox could write), opens the
toolbox and the request log; :meth:`Run.task` drives the loop. This is the one set-up path:
``sandloop run``, ``sandloop replay``, the demo (:func:`run_task`) and the public Python API
(:mod:`executor.api`) all go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import openai
from rich.console import Console

from executor import safety
from executor.approvals import Approvals, DenyAll, TerminalPrompt, safety_callback
from executor.audit import LOG_NAME, RequestLog, new_run_id, run_folder
from executor.browser_gate import BrowserGate
from executor.dispatch import EventSink
from executor.environment import environment_config
from executor.loop import Budgets, Client, Loop, LoopConfig, RunResult
from executor.navigation import navigation_tools
from executor.policy_gate import PolicyGate
from executor.progress import Progress
from executor.safety import SafetyCallback
from executor.sandbox_config import docker_config, shell_limits
from executor.session import Sandbox
from executor.testing.cassette import Cassette
from executor.toolbox import Toolbox
from policies.audit import SUMMARY_KEY, AuditLog
from policies.engine import PolicyEngine, load_policy
from policies.model import Policy
from sandbox.backends import open_session
from sandbox.browser import open_browser
from sandbox.computer import Computer
from sandbox.desktop import DesktopConfig, open_desktop
from sandbox.desktop.live import start_live_view
from sandbox.docker import DockerSession
from sandloop.errors import ConfigError
from sandloop.hostfiles import refuse_inside

__all__ = ["AUDIT_NAME", "DEFAULT_INSTRUCTIONS", "BudgetOverrides", "Run", "RunFiles", "RunOptions",
           "RunOutcome", "Runtime", "budgets_from", "open_computer", "open_toolbox", "run_task"]

#: sees every request body and response of the loop (a cassette recorder)
Observer = Callable[[dict[str, Any], Any], None]

AUDIT_NAME = "audit.jsonl"
#: what a run with the desktop adds to its instructions
DESKTOP_INSTRUCTIONS = (
    " The computer tool shows a Linux desktop (X11, the openbox window manager): a terminal (xterm) "
    "open in the checkout at /workspace, and mousepad and chromium to start from it."
)

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
    """What one run needs: ``sandloop run``'s options, the demo's, the Python API's."""

    repo: Path
    #: the task :meth:`Run.task` runs when it is given none
    task: str | list[dict[str, Any]] = ""
    model: str = "gpt-5.4"
    base_url: str | None = None
    api_key: str | None = None
    #: a policy file or a preset name; None: the default preset
    policy: str | Path | None = None
    browser: str = "off"  # "off", "container", "local", "auto", or "desktop" (a Linux desktop instead)
    #: with the desktop: a VNC view of it on this machine's loopback (``--live-view``)
    live_view: bool = False
    budgets: BudgetOverrides = field(default_factory=lambda: BudgetOverrides())
    stateless: bool = False
    #: the request log; its folder holds the run's other files (default: a new run folder
    #: under the state directory, outside anything the sandbox can write)
    log: Path | None = None
    record: Path | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    approvals: Approvals | None = None
    #: the back-end that runs the session (None: the policy's ``[backend] type``)
    backend: str | None = None
    #: the client the loop uses (default: one made from base_url / api_key / the environment)
    client: Client | None = field(default=None, repr=False)
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
    """What :func:`open_toolbox` started."""

    toolbox: Toolbox
    budgets: Budgets
    audit: AuditLog
    engine: PolicyEngine
    gate: PolicyGate


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
async def open_toolbox(opts: RunOptions, on_event: EventSink | None,
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
        backend = opts.backend or policy.backend.type
        config = await environment_config(engine.loaded, opts.repo.resolve(), backend=backend, image=opts.image,
                                          log_dir=log_dir, on_event=on_event)
        toolbox.session = await open_session(backend, opts.repo.resolve(), replace(config, on_egress=gate.egress),
                                             policy.backend.options(backend), where=engine.loaded.where)
        stack.push_async_callback(toolbox.session.close)
        if opts.browser == "desktop":
            await open_desktop_computer(toolbox, gate, policy, stack, repo=opts.repo.resolve(), model=opts.model,
                                        live_view=opts.live_view)
        elif opts.browser != "off":
            if policy.computer.environment == "desktop":
                raise ConfigError(f"the policy's [computer] environment is \"desktop\": use --desktop, not "
                                  f"--browser {opts.browser}")
            await open_computer(toolbox, gate, policy, stack, placement=opts.browser, model=opts.model)
        yield Runtime(toolbox, budgets_from(policy, opts.budgets), audit, engine, gate)


async def open_computer(toolbox: Toolbox, gate: PolicyGate, policy: Policy, stack: contextlib.AsyncExitStack, *,
                        placement: str, model: str = "") -> None:
    """Start the browser beside a toolbox's session (closed by ``stack``): every request it
    makes decided by ``gate``, pending safety checks answered as the policy's
    ``browser.safety_checks`` says (recorded), the navigation tools added."""
    browser = open_browser(BrowserGate(gate, toolbox).config(policy), placement=placement)  # type: ignore[arg-type]
    stack.push_async_callback(browser.close)
    await browser.start()
    _use_computer(toolbox, gate, policy, browser, model)
    toolbox.functions.extend(navigation_tools(browser))


def _use_computer(toolbox: Toolbox, gate: PolicyGate, policy: Policy, computer: Computer, model: str) -> None:
    toolbox.computer = computer
    mode = policy.browser.safety_checks
    toolbox.computer_safety = gate.recorded(_safety_callback(mode, gate.approvals), mode)
    if model.startswith("computer-use-preview"):
        toolbox.computer_display = computer.screen  # the preview tool wants a display


async def open_desktop_computer(toolbox: Toolbox, gate: PolicyGate, policy: Policy, stack: contextlib.AsyncExitStack,
                                *, repo: Path, model: str = "", live_view: bool = False) -> None:
    """Start a Linux desktop beside a toolbox's session (closed by ``stack``): its own container
    with the shell's hardening and network allow-list (egress decided by ``gate``), the screen and
    settle bound of the policy's [computer] section; safety checks as for the browser."""
    section = policy.computer
    config = DesktopConfig(screen=(section.screen_width, section.screen_height), settle_s=section.settle_ms / 1000,
                           docker=replace(docker_config(policy), on_egress=gate.egress))
    desktop = await open_desktop(repo, config)
    stack.push_async_callback(desktop.close)
    _use_computer(toolbox, gate, policy, desktop, model)
    if live_view and isinstance(desktop.session, DockerSession):
        view = await start_live_view(desktop.session)
        stack.push_async_callback(view.close)
        print(f"sandloop: live view of the desktop: {view.url} (password {view.password}; this machine only)",
              file=sys.stderr, flush=True)


class Run:
    """One run opened from a policy: its back-ends, its files, and the loop to drive them.

    Open it with :meth:`open` (the command line, the demo and :func:`executor.open_run` all do);
    :meth:`task` runs one task through the loop (one at a time; a run may take several, its
    request log and audit chain go on); :meth:`close` (or ``async with``) closes everything.
    """

    def __init__(self, opts: RunOptions, files: RunFiles, runtime: Runtime, log: RequestLog,
                 stack: contextlib.AsyncExitStack, on_event: EventSink | None,
                 observers: list[Observer]) -> None:
        self.options = opts
        self.files = files
        self.runtime = runtime
        self.log = log
        self.on_event = on_event
        self._stack = stack
        self._observers = observers
        self._client: openai.AsyncOpenAI | openai.OpenAI | None = None
        self._busy = False
        #: what a task had done when it was cancelled (Ctrl-C), if one was
        self.interrupted: RunOutcome | None = None
        session = runtime.toolbox.session
        assert session is not None  # open_toolbox always starts one
        self.sandbox = Sandbox(session, runtime.gate, limits=runtime.toolbox.limits,
                               read_only_globs=runtime.toolbox.patch_read_only_globs)

    @classmethod
    async def open(cls, opts: RunOptions, on_event: EventSink | None = None) -> Run:
        """Plan the run's files (refused inside the workspace), then start its back-ends."""
        run_id = new_run_id()
        files = RunFiles.plan(opts, run_id)
        async with contextlib.AsyncExitStack() as stack:
            observers: list[Observer] = []
            if files.record is not None:
                recorder = stack.enter_context(Cassette.recorder(files.record))
                observers.append(lambda body, resp: recorder.record(
                    body, resp.model_dump(mode="json", exclude_unset=True)))
            runtime = await stack.enter_async_context(open_toolbox(opts, on_event, files.folder))
            head = runtime.audit.head
            log = RequestLog(files.log, run_id=run_id,
                             summary_fields=lambda: {SUMMARY_KEY: head().to_json()})
            run = cls(opts, files, runtime, log, stack.pop_all(), on_event, observers)
        return run

    @property
    def toolbox(self) -> Toolbox:
        return self.runtime.toolbox

    @property
    def gate(self) -> PolicyGate:
        """The policy gate every action of this run asks (approvals and audit log included)."""
        return self.runtime.gate

    @property
    def engine(self) -> PolicyEngine:
        """The loaded policy (``engine.policy``), for questions that record nothing."""
        return self.runtime.engine

    @property
    def folder(self) -> Path:
        """The run's folder: requests.jsonl, audit.jsonl, screenshots/, summary.json."""
        return self.files.folder

    @property
    def audit_head(self) -> str:
        """The audit chain's head now, ``HASH:COUNT``: keep it somewhere the log is not."""
        return str(self.runtime.audit.head())

    def _client_for(self, client: Client | None) -> Client:
        if client is not None:
            return client
        if self.options.client is not None:
            return self.options.client
        if self._client is None:
            key = self.options.api_key or os.environ.get("OPENAI_API_KEY")
            if not key:
                raise ConfigError("no OpenAI client for the loop: pass client=openai.AsyncOpenAI(...) "
                                  "or api_key=..., or set OPENAI_API_KEY")
            self._client = openai.AsyncOpenAI(
                api_key=key, base_url=self.options.base_url or os.environ.get("OPENAI_BASE_URL"))
        return self._client

    async def task(self, task: str | list[dict[str, Any]] | None = None, *,
                   client: Client | None = None) -> RunOutcome:
        """Drive the loop through one task (default: the options' task) until the model answers
        or a budget, a refusal or an error stops it; the outcome says which (``exit_code``)."""
        if self._busy:
            raise RuntimeError("this run is already running a task: run its tasks one at a time")
        opts = self.options
        task = opts.task if task is None else task
        if not task:
            raise ValueError("no task to run: pass one, e.g. run.task('make the tests pass')")
        # The GA computer tool's declaration has no environment field: the model is told in words.
        instructions = opts.instructions + (DESKTOP_INSTRUCTIONS if opts.browser == "desktop" else "")
        config = LoopConfig(model=opts.model, instructions=instructions,
                            stateless=opts.stateless, budgets=self.runtime.budgets,
                            # the preview computer tool requires it
                            extra={"truncation": "auto"} if opts.model.startswith("computer-use-preview")
                            else {})
        used = self._client_for(client)
        loop = Loop(used, config, self.toolbox, on_event=self.on_event,
                    observers=self._observers, log=self.log)
        await self._log_start(task, used)
        self._busy = True
        try:
            result = await loop.run(task)
        finally:
            self._busy = False
            if loop.interrupted is not None:
                self.interrupted = RunOutcome(loop.interrupted, self.folder, self.audit_head, self.log)
        return RunOutcome(result, self.folder, self.audit_head, self.log)

    async def _log_start(self, task: str | list[dict[str, Any]], client: Client) -> None:
        await self.log_start(task if isinstance(task, str) else None, model=self.options.model,
                             endpoint=str(getattr(client, "base_url", "") or ""))

    async def log_start(self, task: str | None, *, model: str | None, endpoint: str, **fields: Any) -> None:
        """What the run is, for whoever reads its log later (the session report's header):
        the task, the model and endpoint, the policy file and its hash, where things run;
        ``fields`` add to them (or replace them: another front-end's placement)."""
        opts, session = self.options, self.toolbox.session
        runtime = getattr(session, "runtime_in_force", None)
        layers = self.engine.loaded.layers
        record: dict[str, Any] = {
            "task": task, "model": model, "endpoint": endpoint,
            "policy": {"path": layers[-1].name if layers else str(opts.policy or "default"),
                       "sha256": self.engine.sha256},
            "placement": opts.browser, "backend": type(session).__name__,
            "runtime": await asyncio.to_thread(runtime) if callable(runtime) else None}
        self.log.event("start", 0, **{**record, **fields})

    async def close(self) -> None:
        """Close the browser, the session and the run's files. Idempotent."""
        try:
            await self._stack.aclose()
        finally:
            if isinstance(self._client, openai.AsyncOpenAI):
                await self._client.close()
            self._client = None

    async def __aenter__(self) -> Run:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def run_task(opts: RunOptions, console: Console, *,
                   interrupted: list[RunOutcome] | None = None) -> RunOutcome:
    """One run with live progress on ``console``. When Ctrl-C cancels it, what was done so far
    is appended to ``interrupted`` (the cancellation goes on)."""
    async with await Run.open(opts, Progress(console)) as run:
        try:
            return await run.task()
        finally:
            if run.interrupted is not None and interrupted is not None:
                interrupted.append(run.interrupted)
