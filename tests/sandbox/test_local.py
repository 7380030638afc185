"""LocalSession, the helper as a host subprocess (``sandloop apply-patch``): a helper that dies is
replaced through the one restart path every back-end shares (ReplaceableSession), and the model
is told the same way."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from sandbox.base import with_session_notes
from sandbox.local import LocalSession
from sandloop.errors import SandboxUnavailable


async def test_a_killed_local_helper_is_replaced_and_said(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("kept\n")
    async with await LocalSession.create(tmp_path) as session:
        proc = session._proc
        assert proc is not None and session.hello is not None and session.hello["pid"] == proc.pid
        helper = session._helper
        assert helper is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for _ in range(500):  # its reader sees the pipe end (a call sent before that gets the error)
            if not helper.alive:
                break
            await asyncio.sleep(0.01)
        r = await session.run("cat a.txt")
        assert r.stdout.text == "kept\n"  # the workspace is the host's: nothing was lost
        assert session._proc is not None and session._proc.pid != proc.pid and session.restarts == 1
        note = "local helper died (killed by SIGKILL); started a new one"
        assert session.notes == [note]
        assert with_session_notes("", session) == f"[sandloop] {note}\n"  # in the next output, as on Docker
        assert with_session_notes("", session) == ""  # told once
        second = session._proc
    assert second is not None and second.poll() is not None  # closed: the helper is gone
    with pytest.raises(SandboxUnavailable, match="the session is closed"):
        await session.run("echo again")
