"""The public Python API: open a run from a policy, drive tasks, use its sandbox directly.

Everything a run needs comes from one call. :func:`open_run` loads the policy, starts the Docker
session (and the browser when ``browser`` asks for one), opens the policy gate with its
approvals and the hash-chained audit log, and plans the run's folder under the state directory
(refused inside the workspace) — the same path ``sandloop run`` takes::

    async with executor.open_run("path/to/repo", policy="default") as run:
        outcome = await run.task("make the tests pass")      # the loop, with run's client
        print(outcome.result.final_text, run.folder, run.audit_head)
        result = await run.sandbox.run("pytest -q")          # the policy decides this too

:func:`open_sandbox` opens the sandbox alone, for Python code that drives it without a model.
Both return something you can ``await`` (then call ``close()``) or use with ``async with``.
:func:`open_run_sync` and :func:`open_sandbox_sync` are the twins for plain scripts: they run
their own event loop, and refuse to start inside a running one (use the async calls there).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, TypedDict, TypeVar, Unpack

from executor.approvals import Approvals
from executor.dispatch import EventSink
from executor.loop import Client
from executor.run import DEFAULT_INSTRUCTIONS, BudgetOverrides, Run, RunOptions, RunOutcome
from executor.session import Sandbox
from executor.toolbox import Toolbox
from sandloop.results import CommandResult

__all__ = ["Opening", "RunSettings", "SandboxSettings", "SyncRun", "SyncSandbox", "open_run",
           "open_run_sync", "open_sandbox", "open_sandbox_sync"]


class SandboxSettings(TypedDict, total=False):
    """What a sandbox is opened with (every key optional)."""

    #: a policy file or preset name ("default", "strict", "ci"); default: the default preset
    policy: str | Path
    #: who answers the policy's prompts (default: the terminal when there is one, else deny)
    approvals: Approvals
    #: the request log's path; its folder holds the audit log (default: a new run folder
    #: under $XDG_STATE_HOME/sandloop/runs/; never inside the workspace)
    log: str | Path
    #: progress events: ("decision", {...}), ("call_start", {...}) …
    on_event: EventSink


class RunSettings(SandboxSettings, total=False):
    """What a run is opened with: the sandbox's settings, the model's and the budgets."""

    model: str
    #: the client the loop uses (openai.AsyncOpenAI or OpenAI); default: one made from
    #: base_url / api_key, else OPENAI_BASE_URL / OPENAI_API_KEY
    client: Client
    base_url: str
    api_key: str
    #: where Chromium runs for computer use, or "desktop": a whole Linux desktop in a container
    #: (:mod:`sandbox.desktop`); "off" offers no computer tool. Default: the policy's
    #: ``[computer] environment`` ("desktop": the desktop, else off); a browser asked for under a
    #: desktop policy is refused (ConfigError)
    browser: Literal["off", "container", "local", "auto", "desktop"]
    instructions: str
    stateless: bool  # store:false, the whole history replayed each turn
    record: str | Path  # also write a cassette for `sandloop replay`
    max_turns: int
    max_total_tokens: int
    max_wall_s: float
    max_tool_calls: int
    #: a run (id or folder) whose snapshot this run continues; its first task goes on with
    #: the snapshot's conversation (see run.snapshot())
    resume: str | Path
    #: resume even though the policy changed since the snapshot
    policy_changed_ok: bool


def _options(repo: str | Path, settings: Mapping[str, Any]) -> RunOptions:
    def path(key: str) -> Path | None:
        value = settings.get(key)
        return Path(value) if value is not None else None

    return RunOptions(
        repo=Path(repo), model=settings.get("model", "gpt-5.4"), base_url=settings.get("base_url"),
        api_key=settings.get("api_key"), policy=settings.get("policy"),
        browser=settings.get("browser"), stateless=settings.get("stateless", False),
        log=path("log"), record=path("record"),
        instructions=settings.get("instructions", DEFAULT_INSTRUCTIONS),
        approvals=settings.get("approvals"), client=settings.get("client"),
        resume=settings.get("resume"), policy_changed_ok=settings.get("policy_changed_ok", False),
        budgets=BudgetOverrides(max_turns=settings.get("max_turns"),
                                max_total_tokens=settings.get("max_total_tokens"),
                                max_wall_s=settings.get("max_wall_s"),
                                max_tool_calls=settings.get("max_tool_calls")))


class _Closable(Protocol):
    async def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)
R = TypeVar("R")


class Opening(Generic[T]):
    """What the ``open_*`` calls return: ``await`` it for the opened object (close it
    yourself), or ``async with`` it (closed on the way out)."""

    def __init__(self, opener: Callable[[], Awaitable[T]]) -> None:
        self._opener = opener
        self._opened: T | None = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._opener().__await__()

    async def __aenter__(self) -> T:
        self._opened = await self._opener()
        return self._opened

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._opened is not None:
            opened, self._opened = self._opened, None
            await opened.close()


def open_run(repo: str | Path, **settings: Unpack[RunSettings]) -> Opening[Run]:
    """Open everything a run of ``repo`` needs from its policy (see :class:`RunSettings`)."""
    options = _options(repo, settings)
    return Opening(lambda: Run.open(options, settings.get("on_event")))


async def _sandbox(repo: str | Path, settings: Mapping[str, Any]) -> Sandbox:
    run = await Run.open(_options(repo, {**settings, "browser": "off"}), settings.get("on_event"))
    return run.sandbox.closed_by(run.close)


def open_sandbox(repo: str | Path, **settings: Unpack[SandboxSettings]) -> Opening[Sandbox]:
    """The sandbox of ``repo`` alone, its policy in front (see :class:`SandboxSettings`);
    closing it closes everything it opened."""
    return Opening(lambda: _sandbox(repo, settings))


# -- the sync twins --------------------------------------------------------------------------


def _no_running_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"executor.{name}() cannot be used inside a running event loop (it runs its "
                       f"own): in async code, use `async with executor.{name.removesuffix('_sync')}(...)`")


class _Portal:
    """One event loop for a sync object's whole life, run for the duration of each call (the
    session's reader is a thread, so nothing is lost while the loop waits between calls)."""

    def __init__(self, name: str) -> None:
        _no_running_loop(name)
        self.name = name
        self._runner = asyncio.Runner()
        self.closed = False

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        try:
            _no_running_loop(self.name)
            if self.closed:
                raise RuntimeError(f"this {self.name}() object is closed")
        except RuntimeError:
            coro.close()
            raise
        return self._runner.run(coro)

    def close(self) -> None:
        self.closed = True
        self._runner.close()


class SyncSandbox:
    """:class:`~executor.session.Sandbox` for plain scripts: the same methods, not async."""

    def __init__(self, portal: _Portal, sandbox: Sandbox, *, owns_portal: bool) -> None:
        self._portal = portal
        self._sandbox = sandbox
        self._owns_portal = owns_portal

    @property
    def workspace(self) -> str:
        return self._sandbox.workspace

    def run(self, command: str, *, timeout_s: float | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        return self._portal.call(self._sandbox.run(command, timeout_s=timeout_s, env=env))

    def read_file(self, path: str) -> bytes:
        return self._portal.call(self._sandbox.read_file(path))

    def write_file(self, path: str, data: bytes | str, *, mode: int | None = None) -> None:
        self._portal.call(self._sandbox.write_file(path, data, mode=mode))

    def close(self) -> None:
        """Close it (idempotent); from open_sandbox_sync, everything it opened."""
        if self._portal.closed:
            return
        try:
            self._portal.call(self._sandbox.close())
        finally:
            if self._owns_portal:
                self._portal.close()

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SyncRun:
    """:class:`~executor.run.Run` for plain scripts: ``task`` blocks until the run answers."""

    def __init__(self, portal: _Portal, run: Run) -> None:
        self._portal = portal
        self._run = run
        self.sandbox = SyncSandbox(portal, run.sandbox, owns_portal=False)

    @property
    def toolbox(self) -> Toolbox:
        return self._run.toolbox

    @property
    def folder(self) -> Path:
        return self._run.folder

    @property
    def audit_head(self) -> str:
        return self._run.audit_head

    def task(self, task: str | list[dict[str, Any]] | None = None, *, client: Client | None = None) -> RunOutcome:
        return self._portal.call(self._run.task(task, client=client))

    def snapshot(self) -> Path:
        """:meth:`~executor.run.Run.snapshot`: the session and its conversation, for a resume."""
        return self._portal.call(self._run.snapshot())

    def close(self) -> None:
        """Close the run and everything it opened (idempotent)."""
        if self._portal.closed:
            return
        with contextlib.ExitStack() as stack:
            stack.callback(self._portal.close)
            self._portal.call(self._run.close())

    def __enter__(self) -> SyncRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_run_sync(repo: str | Path, **settings: Unpack[RunSettings]) -> SyncRun:
    """:func:`open_run` for plain scripts: ``with executor.open_run_sync(repo) as run:``."""
    portal = _Portal("open_run_sync")
    try:
        return SyncRun(portal, portal.call(Run.open(_options(repo, settings), settings.get("on_event"))))
    except BaseException:
        portal.close()
        raise


def open_sandbox_sync(repo: str | Path, **settings: Unpack[SandboxSettings]) -> SyncSandbox:
    """:func:`open_sandbox` for plain scripts: ``with executor.open_sandbox_sync(repo) as sb:``."""
    portal = _Portal("open_sandbox_sync")
    try:
        return SyncSandbox(portal, portal.call(_sandbox(repo, settings)), owns_portal=True)
    except BaseException:
        portal.close()
        raise
