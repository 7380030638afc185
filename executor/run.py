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
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import openai
from rich.console import Console

from executor import safety, snapshot
from executor.approvals import Approvals, DenyAll, TerminalPrompt, safety_callback
from executor.audit import LOG_NAME, RequestLog, new_run_id, run_folder
from executor.browser_gate import BrowserGate
from executor.dispatch import EventSink
from executor.environment import environment_config
from executor.loop import Budgets, Client, Loop, LoopConfig, LoopState, RunResult, TurnRecord
from executor.navigation import navigation_tools
from executor.policy_gate import PolicyGate
from executor.progress import Progress
from executor.safety import SafetyCallback
from executor.sandbox_config import docker_config, shell_limits
from executor.session import Sandbox
from executor.snapshot import LoadedSnapshot, RunFacts, Snapshotter
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
from sandloop.errors import ConfigError, SandloopError, describe
from sandloop.hostfiles import HostDir, refuse_inside

__all__ = ["AUDIT_NAME", "DEFAULT_INSTRUCTIONS", "BudgetOverrides", "Run", "RunFiles", "RunOptions",
           "RunOutcome", "Runtime", "budgets_from", "open_computer", "open_desktop_computer", "open_toolbox",
           "placement", "run_task"]

log = logging.getLogger("sandloop.run")

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
    #: where computer calls go: "off", "container", "local", "auto" (Chromium), or "desktop" (a
    #: Linux desktop instead); None: the policy's ``[computer] environment`` chooses (the desktop,
    #: else off). See :func:`placement`.
    browser: str | None = None
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
    #: a run (id or folder) whose snapshot this run continues: its sandbox's files, its
    #: conversation, its budgets used, its audit chain
    resume: str | Path | None = None
    #: resume even though the policy changed since the snapshot (the difference is shown)
    policy_changed_ok: bool = False


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
    #: where the run's computer calls go (:func:`placement`)
    placement: str = "off"


@dataclass(frozen=True)
class Restore:
    """What a resumed session starts from: the snapshot's /tmp tar, its root image if any."""

    tar: Path
    image: str | None


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
                       log_dir: Path, restore: Restore | None = None) -> AsyncIterator[Runtime]:
    """Start the back-ends a run uses (policy gate, Docker session, browser) and close them;
    ``restore``: the snapshot a resumed session starts from."""
    engine = load_policy(opts.policy)
    policy = engine.policy
    # refused before anything starts: a placement the policy contradicts is a usage error
    where = placement(opts.browser, policy, live_view=opts.live_view)
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
        if restore is not None:
            config = replace(config, restore=str(restore.tar), image=restore.image or config.image)
        toolbox.session = await open_session(backend, opts.repo.resolve(), replace(config, on_egress=gate.egress),
                                             policy.backend.options(backend), where=engine.loaded.where)
        stack.push_async_callback(toolbox.session.close)
        if where == "desktop":
            await open_desktop_computer(toolbox, gate, policy, stack, repo=opts.repo.resolve(), model=opts.model,
                                        live_view=opts.live_view)
        elif where != "off":
            await open_computer(toolbox, gate, policy, stack, placement=where, model=opts.model)
        yield Runtime(toolbox, budgets_from(policy, opts.budgets), audit, engine, gate, where)


def placement(requested: str | None, policy: Policy, *, default: str = "off", live_view: bool = False) -> str:
    """Where computer calls go: ``requested`` (``--browser``/``--desktop``, the API's ``browser=``),
    else the policy's ``[computer] environment`` (its desktop, else ``default``). A browser asked
    for under a desktop policy is refused (ConfigError), as is a live view of no desktop: the
    policy, the command line and the run must never disagree about what the model is driving.
    "off" is never refused: it offers no computer at all."""
    desktop = policy.computer.environment == "desktop"
    if requested is None:
        chosen = "desktop" if desktop else default
    elif desktop and requested not in ("desktop", "off"):
        raise ConfigError(f'the policy\'s [computer] environment is "desktop": computer calls drive its desktop, '
                          f"not a browser (--browser {requested}); drop --browser, or use a policy without it")
    else:
        chosen = requested
    if live_view and chosen != "desktop":
        raise ConfigError('--live-view watches the desktop: give --desktop (or a policy with [computer] '
                          'environment = "desktop")')
    return chosen


def resume_from(opts: RunOptions, loaded: LoadedSnapshot, folder: Path) -> tuple[Restore, list[str]]:
    """Check a snapshot against the run that resumes it (its policy, its image, the checkout),
    start the new run's audit log from its chain, and say what the run must be told."""
    engine = load_policy(opts.policy)
    notes = []
    if loaded.check_policy(engine, changed_ok=opts.policy_changed_ok) is not None:
        notes.append("the policy changed since the snapshot: this run goes on under the new one (--policy-changed-ok)")
    if loaded.image is not None:
        import docker

        client = docker.from_env()
        try:
            snapshot.require_image(loaded, client)
        finally:
            client.close()
    changed = snapshot.drift(loaded.checkout, opts.repo.resolve())
    if changed:
        notes.append(f"the checkout changed since the snapshot: {changed} path(s) differ; it is kept as it is "
                     "(a snapshot never overwrites the checkout)")
    if loaded.manifest.get("reason") == "interrupted":
        notes.append("the run was stopped in the middle of a turn: that turn's calls (and any approval prompt open "
                     "then) were not answered, and the model is asked again")
    snapshot.link_audit(loaded, folder, AUDIT_NAME)
    return Restore(snapshot.copy_tar(loaded, folder), loaded.image), notes


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


def _policy_spec(policy: str | Path | None) -> str | None:
    """How a snapshot names the run's policy: a file by its absolute path (a resume may start
    elsewhere), a preset by its name."""
    if policy is None:
        return None
    path = Path(policy)
    return str(path.resolve()) if path.is_file() else str(policy)


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
        #: what a resumed run was told at its start (checkout drift, a changed policy), one line each
        self.resume_notes: list[str] = []
        self._loop: Loop | None = None  # the task's loop while one runs
        #: where the conversation stands between tasks (None: none yet); a resumed run's first
        #: task continues the snapshot's
        self._state: LoopState | None = None
        self._continue = False
        self.snapshotter = Snapshotter(files.folder, session, RunFacts(
            run_id=log.run_id, repo=opts.repo.resolve(), policy=_policy_spec(opts.policy),
            engine=runtime.engine, model=opts.model, base_url=opts.base_url, instructions=opts.instructions,
            backend=type(session).__name__, base_image=getattr(session, "image", None)), runtime.audit.head)

    @classmethod
    async def open(cls, opts: RunOptions, on_event: EventSink | None = None) -> Run:
        """Plan the run's files (refused inside the workspace), then start its back-ends; with
        ``opts.resume``, from that run's snapshot (checked first: see :mod:`executor.snapshot`)."""
        run_id = new_run_id()
        files = RunFiles.plan(opts, run_id)
        loaded = restore = None
        notes: list[str] = []
        if opts.resume is not None:
            loaded = await asyncio.to_thread(snapshot.load, opts.resume)
            # the snapshot's policy unless another is given (it is checked against the snapshot's
            # either way), and its way of keeping the conversation
            opts = replace(opts, policy=opts.policy or loaded.manifest["policy"]["spec"],
                           stateless=loaded.state.stateless)
            restore, notes = await asyncio.to_thread(resume_from, opts, loaded, files.folder)
        async with contextlib.AsyncExitStack() as stack:
            observers: list[Observer] = []
            if files.record is not None:
                recorder = stack.enter_context(Cassette.recorder(files.record))
                observers.append(lambda body, resp: recorder.record(
                    body, resp.model_dump(mode="json", exclude_unset=True)))
            runtime = await stack.enter_async_context(open_toolbox(opts, on_event, files.folder, restore))
            head = runtime.audit.head
            log = RequestLog(files.log, run_id=run_id,
                             summary_fields=lambda: {SUMMARY_KEY: head().to_json()})
            run = cls(opts, files, runtime, log, stack.pop_all(), on_event, observers)
        if loaded is not None:
            run._state, run._continue, run.resume_notes = loaded.state, True, notes
            run.snapshotter.facts.base_image = loaded.manifest.get("base_image") or run.snapshotter.facts.base_image
            runtime.audit.record("resume", previous_run=loaded.run_id, previous_head=loaded.manifest["audit_head"],
                                 turns=loaded.state.turns, notes=" | ".join(notes))
        return run

    @property
    def toolbox(self) -> Toolbox:
        return self.runtime.toolbox

    @property
    def placement(self) -> str:
        """Where this run's computer calls go: "off", "container", "local", "auto" or "desktop"."""
        return self.runtime.placement

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

    async def snapshot(self, *, reason: str = "request") -> Path:
        """Snapshot the session now — its sandbox's files (``$HOME``; the root too with
        ``[session] writable_root``) and the conversation — into ``<run folder>/snapshot``, for
        ``sandloop run --resume``. While a task runs, it waits for the turn's calls to finish
        (the conversation's next safe point). Returns the snapshot's folder."""
        taken = await self._snapshot_if(lambda: True, reason=reason)
        assert taken is not None
        return taken

    async def _snapshot_if(self, wanted: Callable[[], bool], *, reason: str) -> Path | None:
        """:meth:`snapshot`, if ``wanted()`` still says so at the safe point (None: it did not)."""
        loop = self._loop
        if loop is not None:
            async with loop.quiet:
                state = loop.checkpoint_now()
                assert state is not None  # set before the first request
                return await self.snapshotter.take(state, reason=reason) if wanted() else None
        if not wanted():
            return None
        return await self.snapshotter.take(self._state or LoopState(None, [], []), reason=reason)

    async def _every_turn(self, turn: TurnRecord, state: LoopState) -> None:
        try:
            await self.snapshotter.take(state, reason="turn", turn=turn)
        except (SandloopError, OSError) as exc:  # the run goes on; the last good snapshot stays
            log.warning("the snapshot at turn %d failed: %s", turn.index, describe(exc))

    async def _on_stop(self, loop: Loop, reason: str) -> None:
        """The snapshot a clean stop takes when the policy asks (a failure is told, never raised
        over the run's own outcome)."""
        state = loop.checkpoint
        if self.engine.policy.session.snapshot == "off" or state is None:
            return
        try:
            await self.snapshotter.take(state, reason=reason)
        except (SandloopError, OSError) as exc:
            log.warning("the snapshot at the run's stop failed: %s", describe(exc))

    async def task(self, task: str | list[dict[str, Any]] | None = None, *,
                   client: Client | None = None) -> RunOutcome:
        """Drive the loop through one task (default: the options' task) until the model answers
        or a budget, a refusal or an error stops it; the outcome says which (``exit_code``).
        A resumed run's first task continues the snapshot's conversation (``task``, if any, is
        the next user message)."""
        if self._busy:
            raise RuntimeError("this run is already running a task: run its tasks one at a time")
        opts = self.options
        task = opts.task if task is None else task
        resume = self._state if self._continue else None
        if resume is not None and not task and not resume.pending:
            raise ValueError(snapshot.ANSWERED)
        if not task and resume is None:
            raise ValueError("no task to run: pass one, e.g. run.task('make the tests pass')")
        # The GA computer tool's declaration has no environment field: the model is told in words.
        instructions = opts.instructions + (DESKTOP_INSTRUCTIONS if self.placement == "desktop" else "")
        config = LoopConfig(model=opts.model, instructions=instructions,
                            stateless=opts.stateless, budgets=self.runtime.budgets,
                            # the preview computer tool requires it
                            extra={"truncation": "auto"} if opts.model.startswith("computer-use-preview")
                            else {})
        used = self._client_for(client)
        every_turn = self.engine.policy.session.snapshot == "every_turn"
        loop = Loop(used, config, self.toolbox, on_event=self.on_event,
                    observers=self._observers, log=self.log, on_turn_end=self._every_turn if every_turn else None)
        await self._log_start(task or None, used)
        self._busy, self._loop, self._continue = True, loop, False
        stop = "interrupted"
        try:
            result = await loop.run(task or None, resume=resume)
            stop = result.reason
        finally:
            self._busy, self._loop = False, None
            self._state = loop.checkpoint
            await self._on_stop(loop, stop)
            if loop.interrupted is not None:
                self.interrupted = RunOutcome(loop.interrupted, self.folder, self.audit_head, self.log)
        return RunOutcome(result, self.folder, self.audit_head, self.log)

    async def _log_start(self, task: str | list[dict[str, Any]] | None, client: Client) -> None:
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
            "placement": self.placement, "backend": type(session).__name__,
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
        for note in run.resume_notes:
            console.print(f"[yellow]resume:[/] {note}", highlight=False)
        try:
            with snapshot_on_signal(run):
                return await run.task()
        finally:
            if run.interrupted is not None and interrupted is not None:
                interrupted.append(run.interrupted)


#: the run folder's file naming the front-end process, for ``sandloop snapshot RUN``
FRONTEND = "frontend.json"
#: why the last snapshot asked for by a signal failed, for ``sandloop snapshot RUN``
SNAPSHOT_FAILED = "snapshot-failed.json"
#: the prefix of a pending request's file from ``sandloop snapshot RUN`` (removed by whichever
#: side gets there first: the run taking it, or the command withdrawing it)
SNAPSHOT_REQUEST = "snapshot-request-"


@contextlib.contextmanager
def snapshot_on_signal(run: Run) -> Iterator[None]:
    """While the run goes on, SIGUSR1 (``sandloop snapshot RUN``) takes a snapshot at its next
    safe point; the front-end's pid (and its start time: pids are reused) is in the run's folder."""
    from sandbox.lifecycle import proc_start_time

    loop = asyncio.get_running_loop()
    taking: set[asyncio.Task[Any]] = set()

    def take() -> None:
        # `sandloop snapshot RUN` leaves a request file before it signals, and removes it to
        # withdraw the request when it stops waiting: at the safe point, a request is taken only
        # if this side removes one first (a bare SIGUSR1, with no request file, always is)
        with HostDir(run.folder) as folder:
            asked = any(name.startswith(SNAPSHOT_REQUEST) for name in folder.names())

        def claimed() -> bool:
            if not asked:
                return True
            with HostDir(run.folder) as folder:
                # every request waiting is answered by this one snapshot
                return sum(folder.remove(name) for name in folder.names() if name.startswith(SNAPSHOT_REQUEST)) > 0

        async def snap() -> None:
            try:
                await run._snapshot_if(claimed, reason="signal")
            except (SandloopError, OSError) as exc:
                log.warning("the snapshot asked for failed: %s", describe(exc))
                with HostDir(run.folder) as folder:  # for `sandloop snapshot RUN`, which waits
                    folder.replace(SNAPSHOT_FAILED, json.dumps({"time": time.time(),
                                                                "error": describe(exc)}).encode())

        task = asyncio.ensure_future(snap())
        taking.add(task)
        task.add_done_callback(taking.discard)

    pid = os.getpid()
    with HostDir(run.folder) as folder:
        folder.replace(FRONTEND, json.dumps({"pid": pid, "start": proc_start_time(pid)}).encode())
    loop.add_signal_handler(signal.SIGUSR1, take)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
