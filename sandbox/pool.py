"""Many sessions from one process: a pool that keeps sessions started and ready.

Evaluation and rollout harnesses run hundreds of sessions; starting one costs a container start
and a helper handshake (a few hundred milliseconds). A :class:`SessionPool` keeps ``size``
sessions started in the background, so :meth:`SessionPool.acquire` hands one out at once, and
replaces every session given back with a fresh one: a returned session is closed, never reused,
because whatever the last user did to its container and workspace stays there.

The pool is back-end neutral: ``factory`` opens one session (a Docker session on a fresh copy of
a repository, a Kubernetes session …) and is called again for every replacement::

    async def fresh() -> Session:
        workspace = Path(tempfile.mkdtemp(dir=scratch))
        shutil.copytree(template, workspace, dirs_exist_ok=True)
        return await DockerSession.create(workspace)

    async with SessionPool(fresh, size=8) as pool:
        async with pool.session() as session:
            await session.run("pytest -q")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Self

from sandloop.errors import SandboxUnavailable

from .base import Session

__all__ = ["SessionPool"]

log = logging.getLogger("sandloop.pool")


class SessionPool:
    """``size`` sessions kept ready; acquire one, give it back, a fresh one takes its place."""

    def __init__(self, factory: Callable[[], Awaitable[Session]], size: int, *, max_failures: int = 3) -> None:
        if size < 1:
            raise ValueError("a pool holds at least one session")
        self.factory = factory
        self.size = size
        #: consecutive failed starts after which acquire() raises instead of waiting for ever
        self.max_failures = max_failures
        self._ready: asyncio.Queue[Session] = asyncio.Queue()
        self._starting: set[asyncio.Task[None]] = set()  # to cancel on close
        self._pending = 0  # starts not finished yet (a task counts out before it ends)
        self._out: set[Session] = set()
        self._failures = 0
        self._last_error: BaseException | None = None
        self._changed = asyncio.Event()
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, *, wait: bool = True) -> None:
        """Start filling the pool; with ``wait``, return once every session is ready (or
        raise SandboxUnavailable if they cannot start)."""
        self._top_up()
        if wait:
            while self._ready.qsize() < self.size:
                await self._wait_for_change()

    async def close(self) -> None:
        """Close every session, handed out or not. Idempotent."""
        self._closed = True
        starting = list(self._starting)
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        sessions = [*self._drain(), *self._out]
        self._out.clear()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- handing out --------------------------------------------------------------------------

    @property
    def ready(self) -> int:
        """Sessions started and waiting to be acquired."""
        return self._ready.qsize()

    async def acquire(self) -> Session:
        """A ready session (waiting for one if none is); a replacement starts at once."""
        if self._closed:
            raise SandboxUnavailable("the session pool is closed")
        while self._ready.empty():
            await self._wait_for_change()
        session = self._ready.get_nowait()
        self._out.add(session)
        self._top_up()
        return session

    async def release(self, session: Session) -> None:
        """Give a session back: it is closed and a fresh one is started in its place."""
        self._out.discard(session)
        await session.close()
        self._top_up()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        """``async with pool.session() as s``: acquire, and release however the block ends."""
        session = await self.acquire()
        try:
            yield session
        finally:
            await self.release(session)

    # -- filling ------------------------------------------------------------------------------

    def _top_up(self) -> None:
        """Start sessions until ``size`` are ready or starting."""
        if self._closed:
            return
        for _ in range(self.size - self._ready.qsize() - self._pending):
            self._spawn()

    def _spawn(self) -> None:
        self._pending += 1
        task = asyncio.get_running_loop().create_task(self._start_one())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _start_one(self) -> None:
        session: Session | None = None
        error: Exception | None = None
        try:
            session = await self.factory()
        except Exception as exc:  # reported by the next wait, retried up to max_failures
            error = exc
        finally:
            # Counted out before anyone wakes: a waiter must see this start as finished.
            self._pending -= 1
        if error is not None:
            self._failures += 1
            self._last_error = error
            log.warning("a pooled session failed to start (%d in a row): %s", self._failures, error)
            if self._failures < self.max_failures:
                self._top_up()
        elif self._closed:
            assert session is not None
            await session.close()
        else:
            assert session is not None
            self._failures = 0
            self._ready.put_nowait(session)
        self._changed.set()

    async def _wait_for_change(self) -> None:
        if self._failures >= self.max_failures and not self._pending:
            raise SandboxUnavailable(
                f"the pool could not start a session ({self._failures} failures in a row): {self._last_error}")
        if not self._pending and self._ready.empty():
            self._spawn()  # more wanted than the pool holds: start one on demand
        self._changed.clear()
        await self._changed.wait()

    def _drain(self) -> list[Session]:
        sessions = []
        while not self._ready.empty():
            sessions.append(self._ready.get_nowait())
        return sessions
