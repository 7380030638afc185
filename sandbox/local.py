"""LocalSession: the same helper, run as a plain subprocess on the host, confined to one directory.

This back-end gives NO isolation: commands run as you, with your network and your files. The
file operations still refuse any path that leaves the root (the helper opens each component with
O_NOFOLLOW). It exists for `sandloop apply-patch --root DIR` and for machines without Docker;
the loop uses the Docker back-end unless told otherwise. It runs exactly the helper archive the
containers run (:func:`sandbox.bundle.installed`), not the package's source files.

A helper that dies (killed, out of memory) is replaced by :class:`ReplaceableSession`, as a
container or a pod is, and the model is told the same way; nothing is lost with it, since the
workspace is the host directory itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

from sandloop.errors import SandboxUnavailable
from sandloop.limits import Limits

from .bundle import helper_programs
from .helper.client import HelperClient, ReplaceableSession
from .helper.wire import HelloResult

__all__ = ["LocalSession"]


class LocalSession(ReplaceableSession):
    sandbox_name = "local helper"

    def __init__(self, root: Path, limits: Limits) -> None:
        super().__init__(limits)
        self.root = root.resolve()
        self.workspace = str(self.root)
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    async def create(cls, root: Path, *, limits: Limits | None = None) -> LocalSession:
        if not root.is_dir():
            raise SandboxUnavailable(f"{root} is not a directory")
        session = cls(root, limits or Limits())
        await session._client()
        return session

    def _spawn(self) -> HelperClient:
        helper, subreaper = helper_programs(outside=[self.root])
        # No seccomp filter: this is the user's own machine, where commands run as the user
        # anyway (setting a setuid bit on one's own file needs no sandbox), and the filter would
        # only refuse what the user's own tools may do there (a debugger, a container tool).
        argv = [sys.executable, "-I", "-u", str(helper), "--workspace", str(self.root), "--home",
                os.environ.get("HOME", "/tmp"), "--no-seccomp"]
        if subreaper is not None:
            argv += ["--subreaper", str(subreaper)]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    close_fds=True)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start the local helper: {exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin
        stdout = proc.stdout
        assert isinstance(stdout, io.BufferedReader)

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        self._proc = proc
        return HelperClient(stdout.read1, send, name=f"local helper (pid {proc.pid})")

    async def _start(self) -> tuple[HelperClient, HelloResult]:
        helper = await asyncio.to_thread(self._spawn)
        return helper, await self._greet(helper)

    def dead_reason(self) -> str:
        proc = self._proc
        if proc is None:
            return "never started"
        try:
            code = proc.wait(5)  # its stream ended: it is exiting, if not gone
        except subprocess.TimeoutExpired:
            return "its stream ended while it still runs"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
        return f"exit code {code}"

    def _teardown(self) -> None:
        """Its stdin closed: the helper takes every command with it and exits (killed after 5 s)."""
        if self._helper is not None:
            self._helper.mark_dead("session closed")
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
