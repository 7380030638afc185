"""A sandbox session with the policy in front: run commands, read and write files from Python.

:class:`Sandbox` is what a run hands to Python code that drives the sandbox itself, without the
model loop. Every command and every write asks the run's policy gate first — the same gate, the
same approvals and the same hash-chained audit log the model's calls go through — and a refusal
raises :class:`~sandloop.errors.PolicyDenied` naming the rule. Reads are not decided by the
policy (it has no read rules); the session still refuses any path outside the workspace.

The one opt-out is :attr:`Sandbox.raw`: the session itself, with no policy and no audit record,
for set-up code you wrote and trust (never for actions a model chose).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence

from executor.gate import Gate
from sandbox.base import Closing, Session
from sandbox.patch import paths
from sandbox.patch.apply import PATH_RULE, path_refusal
from sandloop.errors import PathRefused, PolicyDenied
from sandloop.files import FileChange, PatchKind
from sandloop.limits import Limits
from sandloop.results import CommandResult
from sandloop.verdict import Decision, Verdict

__all__ = ["Sandbox"]

#: every command and write of the Python API gets its own id in the audit log
_CALL_IDS = itertools.count(1)


def _call_id() -> str:
    return f"python_{os.getpid()}_{next(_CALL_IDS)}"


def _refusal(subject: str, verdict: Verdict) -> PolicyDenied:
    rule = f"rule {verdict.rule_id}" if verdict.rule_id else "the policy's default"
    return PolicyDenied(f"{subject} ({rule}): {verdict.justification}")


class Sandbox(Closing):
    """The run's sandbox session, every command and write decided by its policy.

    ``async with`` closes it; so does :meth:`close` (idempotent). Inside a run, closing it
    closes the session only — the run closes everything else.
    """

    def __init__(self, session: Session, gate: Gate, *, limits: Limits | None = None,
                 read_only_globs: Sequence[str] = paths.DEFAULT_READ_ONLY_GLOBS,
                 closer: Callable[[], Awaitable[None]] | None = None) -> None:
        self._session = session
        self._gate = gate
        self.limits = limits or Limits()
        self.read_only_globs = tuple(read_only_globs)
        self._closer = closer or session.close

    def closed_by(self, closer: Callable[[], Awaitable[None]]) -> Sandbox:
        """The same sandbox, whose :meth:`close` calls ``closer`` (e.g. closes the whole run)."""
        return Sandbox(self._session, self._gate, limits=self.limits,
                       read_only_globs=self.read_only_globs, closer=closer)

    @property
    def raw(self) -> Session:
        """The session without the policy: nothing is decided, nothing is recorded. For your
        own set-up code only."""
        return self._session

    @property
    def workspace(self) -> str:
        """The workspace root as commands see it (``/workspace`` in a container)."""
        return self._session.workspace

    async def run(self, command: str, *, timeout_s: float | None = None,
                  env: Mapping[str, str] | None = None) -> CommandResult:
        """Run one command line (``bash -c``) in the workspace, if the policy allows it.

        A prompt goes to the run's approvals; a refusal raises PolicyDenied naming the rule. A
        failing command is not an error: look at ``exit_code`` (None when it timed out)."""
        call_id = _call_id()
        verdict = await self._gate.shell(command, call_id=call_id)
        if not verdict.allowed:
            raise _refusal(f"command {command!r}", verdict)
        result = await self._session.run(command, timeout_s=self.limits.timeout_s(timeout_s),
                                         max_output_bytes=self.limits.max_output_bytes, env=env)
        await self._gate.outcome("shell", command, call_id=call_id, ok=result.exit_code == 0,
                                 detail="timed out" if result.timed_out else f"exit {result.exit_code}")
        return result

    async def read_file(self, path: str) -> bytes:
        """The bytes of a workspace file (FileMissing when there is none)."""
        return await self._session.read_file(paths.normalize(path))

    async def write_file(self, path: str, data: bytes | str, *, mode: int | None = None) -> None:
        """Create or replace a workspace file (str is written as UTF-8), if the policy allows
        it: the path is checked as a patch's would be (read-only globs such as ``.git/**``),
        then the policy decides ``create_file`` or ``update_file``; the write is atomic."""
        content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        call_id = _call_id()
        clean, kind, refusal = await self._file(path)
        if refusal is None:
            verdict = await self._gate.patch(clean, kind, call_id=call_id, size_bytes=len(content))
            if not verdict.allowed:
                raise _refusal(f"{kind} {clean}", verdict)
            try:
                await self._session.commit([FileChange(clean, content, mode)])
            except PathRefused as exc:  # the session's own check, where the file lives
                refusal = Verdict(Decision.DENY, str(exc), PATH_RULE)
        if refusal is not None:  # refused here, not by the policy: recorded as its refusals are
            await self._gate.patch_refused(clean, kind, refusal, call_id=call_id)
            raise PathRefused(refusal.justification)
        await self._gate.outcome("patch", clean, call_id=call_id, ok=True, detail="written")

    async def _file(self, path: str) -> tuple[str, PatchKind, Verdict | None]:
        """The path as a patch's is checked (read-only globs such as ``.git/**``, no
        directory, no symlink): (clean path, the operation it is, the refusal if refused)."""
        clean, refusal = path_refusal(path, self.read_only_globs)
        if refusal is not None:
            return clean, "create_file", refusal
        try:
            info = await self._session.stat(clean)
        except PathRefused as exc:
            return clean, "create_file", Verdict(Decision.DENY, str(exc), PATH_RULE)
        kind: PatchKind = "update_file" if info is not None else "create_file"
        if info is not None and (info.is_dir or info.is_symlink):
            what = "directory" if info.is_dir else "symlink"
            return clean, kind, Verdict(Decision.DENY, f"{clean} is a {what}", PATH_RULE)
        return clean, kind, None

    async def close(self) -> None:
        await self._closer()
