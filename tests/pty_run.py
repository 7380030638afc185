"""Run a command on a real pseudo-terminal, the way a user's terminal runs it."""

from __future__ import annotations

import os
import pty
import select
import subprocess


def run_in_pty(cmd: list[str], env: dict[str, str], *, timeout: float = 180) -> str:
    """Everything the command wrote to its terminal, newlines as the program wrote them."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    # the terminal's own line discipline turns every newline into CR LF
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
