"""The shells the helper runs commands in: starting them, knowing which still run, reaping them.
Standard library only (shipped with the helper).

Every command runs as ``bash -c COMMAND`` (stdin ``/dev/null``, a new session, the workspace as
its directory, exactly the environment asked for) in a shell that is a *child subreaper*: an
orphan anywhere below it — a ``setsid cmd &`` or a double fork — is reparented to the shell, not
to init, so while the command runs everything it started is in its process tree, and a timeout can
end exactly that tree.

A process only becomes a subreaper by asking itself (prctl), so the shell must ask between fork
and exec. The helper starts ``subreaper bash -c COMMAND`` (:mod:`sandbox.helper.subreaper`, a
200-byte program that asks, then execs bash: the pid, argv[0] and environment bash sees are the
same), which keeps Python's vfork spawn. Where there is no such program (another architecture, or
it does not run) the shell asks in ``preexec_fn``, which costs a real fork of the helper and
Python in the child: about twice the time to start a command.

A command longer than one argument may be (the kernel refuses more than 128 KiB) travels in a
memfd that ``bash -c 'eval -- "$(</dev/fd/N)" N<&-'`` reads: the same ``$0``, ``$LINENO``, exit
codes, ``set -e``, heredocs and errors as ``bash -c``, except that a syntax error is reported as
``eval: line N`` where ``bash -c`` says ``-c: line N``.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence

from sandbox.helper import procs
from sandbox.helper.wire import OpError, SubreaperHow

__all__ = ["INLINE_COMMAND_MAX", "Shell", "Shells", "find_shell"]

#: Longest command passed as ``bash -c``'s argument (the kernel refuses one over 128 KiB).
INLINE_COMMAND_MAX = 100_000


def find_shell() -> str:
    for candidate in ("/bin/bash", "/usr/bin/bash"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


def _exit_code(status: int) -> int:
    """What Popen.returncode is for a raw wait status (os.waitstatus_to_exitcode is 3.9+)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _memfd(data: bytes) -> int:
    """A readable, unlinked in-memory file holding ``data``."""
    try:
        fd = os.memfd_create("sandloop-command")
    except (AttributeError, OSError):  # no memfd here: an unlinked temporary file instead
        import tempfile  # rarely needed: not imported up front

        with tempfile.TemporaryFile() as tmp:
            fd = os.dup(tmp.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return fd


class _ExitPipe:
    """A self-pipe a command's loop selects on; written once its shell has been reaped."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self._lock = threading.Lock()
        self._closed = False

    def fire(self) -> None:
        with self._lock:
            if not self._closed:
                os.write(self.w, b"x")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self.r)
                os.close(self.w)


class Shell:
    """One command's shell: the process, and the pipe that tells when it has been reaped."""

    def __init__(self, proc: subprocess.Popen[bytes], exit_pipe: _ExitPipe) -> None:
        self.proc = proc
        self.exit_pipe = exit_pipe

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        self.exit_pipe.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


class Shells:
    """Starts command shells and keeps the books on them.

    ``contained``: this process owns every process it can see (a container's PID 1): it reaps
    every child itself (one thread), and a reclaim may kill whatever belongs to no running command.
    Outside a container each shell is waited for by a thread of its own, and a reclaim kills only
    the process groups of finished commands.
    """

    def __init__(
        self,
        workspace: str,
        *,
        shell: str | None = None,
        contained: bool = False,
        subreaper: str | None = None,
        inline_command_max: int = INLINE_COMMAND_MAX,
    ) -> None:
        self.workspace = workspace
        self.shell = shell or find_shell()
        self.contained = contained
        self.inline_command_max = inline_command_max
        self._subreaper = subreaper
        # Not probed by running it (a shell started at every helper's start): a program that
        # cannot be exec'd here (another architecture, a noexec mount) fails its first command's
        # exec, and the shells fall back then (see _spawn_reclaiming).
        self.subreaper: SubreaperHow = (
            "exec" if subreaper and os.access(subreaper, os.X_OK) else "preexec" if procs.has_prctl() else "none"
        )
        # One lock for the books (held briefly: never across a fork).
        self._lock = threading.Condition()
        self._running: dict[int, Shell] = {}  # shells whose command is still being waited on
        self._groups: set[int] = set()  # not contained: groups that may outlive their command
        self._reaping: dict[int, Shell] = {}  # contained: shells the reaper reports on
        self._spawned = 0  # spawns completed: wakes a reaper that found no child
        self._spawning = 0  # spawns in progress: their children may be reaped before registered
        self._early: dict[int, int] = {}  # wait statuses collected while spawns were in progress
        self._reclaiming = False
        if contained:
            threading.Thread(target=self._reap, name="reaper", daemon=True).start()

    # --- starting ------------------------------------------------------------------------

    def start(self, command: str, env: Mapping[str, str]) -> Shell:
        """A shell running ``command``. OpError("spawn"), or ("resources") when the pids limit
        leaves no process even after reclaiming the background ones."""
        argv, fd = self._argv(command)
        try:
            shell = self._spawn_reclaiming(argv, env, pass_fds=() if fd is None else (fd,))
        finally:
            if fd is not None:
                os.close(fd)
        with self._lock:
            self._running[shell.pid] = shell
            if not self.contained:
                self._groups.add(shell.pid)
        return shell

    def _argv(self, command: str) -> tuple[list[str], int | None]:
        """The argv to start, and the memfd holding the command when it is too long for one."""
        first = [self._subreaper] if self.subreaper == "exec" and self._subreaper else []
        if len(command) * 4 <= self.inline_command_max or len(command.encode()) <= self.inline_command_max:
            return [*first, self.shell, "-c", command], None
        fd = _memfd(command.encode())
        text = f"$(</dev/fd/{fd})" if self.shell.endswith("bash") else f"$(cat /dev/fd/{fd})"
        # eval runs the text the way -c would (same $0, $LINENO, exit codes); the redirection
        # closes the memfd for the command itself. The trailing argument is $0, as with -c.
        return [*first, self.shell, "-c", f'eval -- "{text}" {fd}<&-', self.shell], fd

    def _spawn_reclaiming(self, argv: list[str], env: Mapping[str, str], *, pass_fds: Sequence[int]) -> Shell:
        try:
            try:
                return self._spawn_or_fall_back(argv, env, pass_fds=pass_fds)
            except (BlockingIOError, RuntimeError):
                # The pids limit is exhausted, typically by a fork bomb an earlier command left in
                # the background: reclaim those processes so the session keeps working.
                self.reclaim()
                try:
                    return self._spawn(argv, env, pass_fds=pass_fds)
                except (OSError, RuntimeError) as exc:
                    raise OpError("resources", f"cannot start {self.shell}: {exc}") from exc
        except OSError as exc:
            raise OpError("spawn", f"cannot start {self.shell}: {exc}") from exc

    def _spawn_or_fall_back(self, argv: list[str], env: Mapping[str, str], *, pass_fds: Sequence[int]) -> Shell:
        try:
            return self._spawn(argv, env, pass_fds=pass_fds)
        except OSError as exc:
            if self.subreaper != "exec" or argv[0] != self._subreaper or exc.filename != self._subreaper:
                raise
            # The subreaper program itself could not be exec'd here: shells ask in preexec_fn
            # from now on (or, without prctl, are no subreapers), and this one starts so.
            self.subreaper = "preexec" if procs.has_prctl() else "none"
            return self._spawn(argv[1:], env, pass_fds=pass_fds)

    def _spawn(self, argv: list[str], env: Mapping[str, str], *, pass_fds: Sequence[int]) -> Shell:
        exit_pipe = _ExitPipe()
        with self._lock:
            while self._reclaiming:  # what starts now would look like a stray to it
                self._lock.wait()
            self._spawning += 1
        try:
            # Not under the lock: a slow start must not hold up the reaper or other commands.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workspace,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
                preexec_fn=procs.become_subreaper if self.subreaper == "preexec" else None,
            )
        except BaseException:
            self._spawned_one(None)
            exit_pipe.close()
            raise
        shell = Shell(proc, exit_pipe)
        status = self._spawned_one(shell)
        if status is not None:  # it was over before we could register it
            proc.returncode = _exit_code(status)
            exit_pipe.fire()
        try:
            # Children, not the helper, should be the OOM killer's first choice. (os.open and
            # os.write: no file object, no text layer, on every command's way.)
            fd = os.open(f"/proc/{proc.pid}/oom_score_adj", os.O_WRONLY)
            try:
                os.write(fd, b"1000")
            finally:
                os.close(fd)
        except OSError:
            pass
        if not self.contained:
            self._watch(shell)
        return shell

    def _watch(self, shell: Shell) -> None:
        """Outside a container each shell is waited for by a thread of its own."""

        def wait() -> None:
            shell.proc.wait()
            shell.exit_pipe.fire()

        try:
            threading.Thread(target=wait, daemon=True).start()
        except RuntimeError:  # no pid left for a thread: free the background ones, then retry
            self.reclaim()
            threading.Thread(target=wait, daemon=True).start()

    def _spawned_one(self, shell: Shell | None) -> int | None:
        """Register a new shell; its wait status if the reaper already collected it."""
        with self._lock:
            self._spawning -= 1
            status = None if shell is None else self._early.pop(shell.pid, None)
            if not self._spawning:
                self._early.clear()
            if shell is not None and self.contained and status is None:
                self._reaping[shell.pid] = shell
            self._spawned += 1
            self._lock.notify_all()
        return status

    def _reap(self) -> None:
        """PID 1's duty: reap every child, and tell a command's loop when its shell is gone."""
        while True:
            with self._lock:
                seen = self._spawned
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # no child yet: wait for the next spawn
                with self._lock:
                    while self._spawned == seen:
                        self._lock.wait()
                continue
            with self._lock:
                shell = self._reaping.pop(pid, None)
                if shell is None and self._spawning:
                    self._early[pid] = status  # perhaps a shell whose spawn is still returning
            if shell is not None:
                shell.proc.returncode = _exit_code(status)  # so Popen never waits on the pid itself
                shell.exit_pipe.fire()

    def reaped(self, shell: Shell) -> bool:
        """Reap ``shell`` here if it has exited (contained: else the reaper thread's): True when
        it is done for and its exit code set. The reaper may get there first; then it sets the
        code and fires the exit pipe as usual. Outside a container its own thread waits for it."""
        if not self.contained:
            return False
        with self._lock:  # a spawn registers under it: the pid cannot be someone else's meanwhile
            if self._reaping.get(shell.pid) is not shell:
                return False
            try:
                pid, status = os.waitpid(shell.pid, os.WNOHANG)
            except ChildProcessError:  # the reaper has it: it tells through the exit pipe
                return False
            if pid == 0:
                return False  # still running (it closed its pipes itself)
            del self._reaping[shell.pid]
        shell.proc.returncode = _exit_code(status)
        return True

    # --- the books -----------------------------------------------------------------------

    def finished(self, shell: Shell, *, timed_out: bool) -> None:
        """The command's loop is done with ``shell`` (exited and drained, or ended)."""
        with self._lock:
            self._reaping.pop(shell.pid, None)
            self._running.pop(shell.pid, None)
            if not self.contained:
                try:
                    os.killpg(shell.pid, 0)  # anything left running in the background?
                    if timed_out:
                        self._groups.discard(shell.pid)
                except ProcessLookupError:
                    self._groups.discard(shell.pid)  # no: forget it, before its number is reused
                except PermissionError:
                    pass
        shell.close()

    def reclaim(self) -> None:
        """Kill every background process whose command already returned (in a container: every
        process that belongs to no running command, setsid escapees included)."""
        if not self.contained:
            with self._lock:
                idle = self._groups - set(self._running)
                self._groups.difference_update(idle)
            for pgid in idle:
                procs.kill_group(pgid)
            return
        with self._lock:
            while self._spawning or self._reclaiming:  # a shell half-started is no stray
                self._lock.wait()
            self._reclaiming = True
            ours = set(self._running)
        try:
            keep = ours | {1, os.getpid()}

            def strays(table: Mapping[int, procs.Proc]) -> Iterable[int]:
                return set(table) - keep - procs.descendants(table, ours)

            procs.kill_all(strays)
        finally:
            with self._lock:
                self._reclaiming = False
                self._lock.notify_all()

    def shutdown(self) -> None:
        """Kill everything started here (in a container the kernel does it when PID 1 exits)."""
        with self._lock:
            running, groups = list(self._running), list(self._groups)
        for pid in running:
            procs.kill_all(procs.tree(pid, with_root=True))
        for pgid in groups:
            procs.kill_group(pgid)
