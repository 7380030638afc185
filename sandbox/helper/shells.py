"""The shells the helper runs commands in: starting them, knowing which still run, reaping them.
Standard library only (shipped with the helper).

Every command runs as ``bash -c COMMAND`` (stdin ``/dev/null``, a new session, the workspace as
its directory, exactly the environment asked for) in a shell that is a *child subreaper*: an
orphan anywhere below it — a ``setsid cmd &`` or a double fork — is reparented to the shell, not
to init, so while the command runs everything it started is in its process tree, and a timeout can
end exactly that tree.

A process only becomes a subreaper by asking itself (prctl), so the shell must ask between fork
and exec. Python can run code there only through ``preexec_fn``, which forces a real fork of the
helper instead of vfork: measured, that makes starting a command about twice as costly. So the helper
keeps a few *standby* shells ready, started that slow way in the background, each blocked reading
the command it will run from a memfd; a command takes one, and it ``exec``s
``bash -c COMMAND`` with the command's environment (the pid, the session, the output pipes and
the subreaper bit survive the exec). A command that cannot go that way — none is ready, it is too
long for one argument, or its environment names a variable bash treats specially — is started
directly, the slow way.

A command longer than one argument may be (the kernel refuses more than 128 KiB) travels in a
memfd that ``bash -c 'eval -- "$(</dev/fd/N)" N<&-'`` reads: the same ``$0``, ``$LINENO``, exit
codes, ``set -e``, heredocs and errors as ``bash -c``, except that a syntax error is reported as
``eval: line N`` where ``bash -c`` says ``-c: line N``.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence

from sandbox.helper import procs
from sandbox.helper.wire import OpError

__all__ = ["INLINE_COMMAND_MAX", "STANDBY", "Shell", "Shells", "find_shell"]

#: Longest command passed as ``bash -c``'s argument (the kernel refuses one over 128 KiB).
INLINE_COMMAND_MAX = 100_000
#: Standby shells kept ready (each holds one pid and a few MB until a command takes it).
STANDBY = 2

_SEALS = getattr(fcntl, "F_SEAL_SEAL", 1) | getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4) \
    | getattr(fcntl, "F_SEAL_WRITE", 8)

# Variables a standby shell could not hand over exactly as given: bash keeps its own value of
# these, treats them as read-only or recomputes them when it exports them.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SHELL_OWNED = frozenset({
    "_", "SHLVL", "SHELLOPTS", "EUID", "UID", "PPID", "RANDOM", "SRANDOM", "SECONDS", "LINENO",
    "HISTCMD", "FUNCNAME", "GROUPS", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "PIPESTATUS",
    "COMP_WORDBREAKS",
})


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


def _memfd(data: bytes = b"", *, sealable: bool = False) -> int:
    """A readable, unlinked in-memory file holding ``data``."""
    try:
        fd = os.memfd_create("sandloop-command", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealable else 0))
    except (AttributeError, OSError):  # no memfd here: an unlinked temporary file instead
        if sealable:
            raise
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


class _Standby(Shell):
    """A shell started ahead of its command: blocked until ``go`` closes, then it reads the
    command and its environment (NUL-separated) from ``request`` and execs ``bash -c``.

    Other processes of the sandbox run as the same user and can open the standby's descriptors
    (as they can open, or ptrace, any running command's): the request is sealed once written and
    read back, and the standby must still be waiting with empty output pipes, or it is not used.
    """

    def __init__(self, proc: subprocess.Popen[bytes], exit_pipe: _ExitPipe, request: int, go: int,
                 argv: list[str]) -> None:
        super().__init__(proc, exit_pipe)
        self.request = request
        self.go = go
        self.cmdline = b"".join(os.fsencode(a) + b"\0" for a in argv)

    def waiting(self) -> bool:
        """Still the standby we started, blocked on ``go`` (not exec'd, not gone), with nothing
        written into its output pipes yet?"""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as fh:
                if fh.read() != self.cmdline or not procs.running(self.pid):
                    return False
            readable, _, _ = select.select([self.proc.stdout, self.proc.stderr], [], [], 0)
            return not readable
        except OSError:
            return False

    def hand_over(self, command: str, env: Mapping[str, str]) -> bool:
        """Write the request, seal it, and let the standby go. False when it cannot be trusted
        to run exactly this (tampered with, or gone): then it was let go with nothing to run."""
        data = b"".join(os.fsencode(part) + b"\0" for part in [command, *(f"{k}={v}" for k, v in env.items())])
        try:
            if not self.waiting():
                return False
            os.ftruncate(self.request, 0)
            os.pwrite(self.request, data, 0)
            fcntl.fcntl(self.request, fcntl.F_ADD_SEALS, _SEALS)
            return os.pread(self.request, len(data) + 1, 0) == data and self.waiting()
        except OSError:
            return False
        finally:
            self.release()

    def release(self) -> None:
        """Let it go: with the command written it runs it; with none it exits."""
        for fd in (self.request, self.go):
            if fd >= 0:
                os.close(fd)
        self.request = self.go = -1


def _standby_script(shell: str, go: int, script: int) -> bytes:
    """What a standby shell sources (from a memfd, so ``ps`` shows only ``. /dev/fd/N``): wait
    for ``go`` to close, read the NUL-separated command and ``NAME=value`` entries (one mapfile:
    ``read -d`` would read byte by byte), export them, become ``bash -c COMMAND``."""
    return (
        f"exec {script}<&-; read -r -N 1 _sandloop_go <&{go}; exec {go}<&-\n"
        "mapfile -d '' -t _sandloop_r || exit 1\n"
        "((${#_sandloop_r[@]})) || exit 1\n"
        '((${#_sandloop_r[@]} > 1)) && export -- "${_sandloop_r[@]:1}"\n'
        f'exec {shlex.quote(shell)} -c "${{_sandloop_r[0]}}" </dev/null\n'
    ).encode()


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
        standby: int = STANDBY,
        inline_command_max: int = INLINE_COMMAND_MAX,
    ) -> None:
        self.workspace = workspace
        self.shell = shell or find_shell()
        self.contained = contained
        self.subreaper = procs.has_prctl()
        # Standby shells only pay off when they save the slow start a subreaper needs; they need
        # bash for their script.
        self.standby = standby if self.subreaper and self.shell.endswith("bash") else 0
        self.inline_command_max = inline_command_max
        # One lock for the books (held briefly: never across a fork).
        self._lock = threading.Condition()
        self._running: dict[int, Shell] = {}  # shells whose command is still being waited on
        self._ready: list[_Standby] = []
        self._groups: set[int] = set()  # not contained: groups that may outlive their command
        self._reaping: dict[int, Shell] = {}  # contained: shells the reaper reports on
        self._spawned = 0  # spawns completed: wakes a reaper that found no child
        self._spawning = 0  # spawns in progress: their children may be reaped before registered
        self._early: dict[int, int] = {}  # wait statuses collected while spawns were in progress
        self._reclaiming = False
        self._unusable = 0  # standby shells found unusable in a row
        self._refill_wanted = threading.Event()
        self._refiller: threading.Thread | None = None
        if contained:
            threading.Thread(target=self._reap, name="reaper", daemon=True).start()

    # --- starting ------------------------------------------------------------------------

    def start(self, command: str, env: Mapping[str, str]) -> Shell:
        """A shell running ``command``. OpError("spawn"), or ("resources") when the pids limit
        leaves no process even after reclaiming the background ones."""
        shell = self._take(command, env)
        if shell is None:
            shell = self._start_direct(command, env)
        with self._lock:
            self._running[shell.pid] = shell
            if not self.contained:
                self._groups.add(shell.pid)
            empty = not self._ready
        if empty:
            self.want_refill()  # now; otherwise the helper asks once it has answered
        return shell

    def _eligible(self, command: str, env: Mapping[str, str]) -> bool:
        if len(command) * 4 > self.inline_command_max and len(command.encode()) > self.inline_command_max:
            return False
        return all(_NAME.match(k) and k not in _SHELL_OWNED and not k.startswith("BASH") for k in env)

    def _take(self, command: str, env: Mapping[str, str]) -> Shell | None:
        if not self._eligible(command, env):
            return None
        while True:
            with self._lock:
                if not self._ready:
                    return None
                standby = self._ready.pop()
            if standby.proc.returncode is None and standby.hand_over(command, env):
                self._unusable = 0
                return standby
            self._discard(standby)
            code = standby.proc.returncode
            if code is not None and code > 0:  # it gave up by itself: not killed, not tampered with
                self._unusable += 1
                if self._unusable >= 3:
                    # This image's shell cannot run the standby script (mapfile -d needs bash 4.4):
                    # start every command directly.
                    self.standby = 0

    def _discard(self, standby: _Standby) -> None:
        standby.release()  # with no command written, it exits by itself
        procs.send(standby.pid, signal.SIGKILL)
        standby.close()

    def _argv(self, command: str) -> tuple[list[str], int | None]:
        """The shell's argv, and the memfd holding the command when it is too long for one."""
        if len(command) * 4 <= self.inline_command_max or len(command.encode()) <= self.inline_command_max:
            return [self.shell, "-c", command], None
        fd = _memfd(command.encode())
        text = f"$(</dev/fd/{fd})" if self.shell.endswith("bash") else f"$(cat /dev/fd/{fd})"
        # eval runs the text the way -c would (same $0, $LINENO, exit codes); the redirection
        # closes the memfd for the command itself. The trailing argument is $0, as with -c.
        return [self.shell, "-c", f'eval -- "{text}" {fd}<&-', self.shell], fd

    def _start_direct(self, command: str, env: Mapping[str, str]) -> Shell:
        argv, fd = self._argv(command)
        try:
            return self._spawn_reclaiming(argv, env, stdin=subprocess.DEVNULL, pass_fds=() if fd is None else (fd,))
        finally:
            if fd is not None:
                os.close(fd)

    def _spawn_reclaiming(self, argv: list[str], env: Mapping[str, str], *, stdin: int,
                          pass_fds: Sequence[int]) -> Shell:
        try:
            try:
                return self._spawn(argv, env, stdin=stdin, pass_fds=pass_fds)
            except (BlockingIOError, RuntimeError):
                # The pids limit is exhausted, typically by a fork bomb an earlier command left in
                # the background: reclaim those processes so the session keeps working.
                self.reclaim()
                try:
                    return self._spawn(argv, env, stdin=stdin, pass_fds=pass_fds)
                except (OSError, RuntimeError) as exc:
                    raise OpError("resources", f"cannot start {self.shell}: {exc}") from exc
        except OSError as exc:
            raise OpError("spawn", f"cannot start {self.shell}: {exc}") from exc

    def _spawn(self, argv: list[str], env: Mapping[str, str], *, stdin: int, pass_fds: Sequence[int]) -> Shell:
        exit_pipe = _ExitPipe()
        with self._lock:
            while self._reclaiming:  # what starts now would look like a stray to it
                self._lock.wait()
            self._spawning += 1
        try:
            # Not under the lock: a slow start (a standby's fork) must not hold up the reaper.
            proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workspace,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
                preexec_fn=procs.become_subreaper if self.subreaper else None,
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
            # Children, not the helper, should be the OOM killer's first choice.
            with open(f"/proc/{proc.pid}/oom_score_adj", "w") as fh:
                fh.write("1000")
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

    # --- standby shells ------------------------------------------------------------------

    def want_refill(self) -> None:
        """Bring the standby shells back to their number, in the background."""
        if not self.standby:
            return
        self._refill_wanted.set()
        if self._refiller is None:
            try:
                self._refiller = threading.Thread(target=self._refill_loop, name="standby", daemon=True)
                self._refiller.start()
            except RuntimeError:  # no thread now; the next command asks again
                self._refiller = None

    def _refill_loop(self) -> None:
        while True:
            self._refill_wanted.wait()
            self._refill_wanted.clear()
            while True:
                with self._lock:
                    if len(self._ready) >= self.standby:
                        break
                try:
                    standby = self._start_standby()
                except (OSError, RuntimeError):
                    break  # no pid to spare now (a fork bomb?): the next command asks again
                with self._lock:
                    self._ready.append(standby)

    def _start_standby(self) -> _Standby:
        request, script = _memfd(sealable=True), _memfd()
        go_r, go_w = os.pipe()
        argv = [self.shell, "-c", f". /dev/fd/{script}", "sandloop-standby"]
        try:
            os.pwrite(script, _standby_script(self.shell, go_r, script), 0)
            shell = self._spawn(argv, {}, stdin=request, pass_fds=(go_r, script))
        except BaseException:
            for fd in (request, go_w):
                os.close(fd)
            raise
        finally:
            os.close(go_r)
            os.close(script)
        return _Standby(shell.proc, shell.exit_pipe, request, go_w, argv)

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
            ours = set(self._running) | {s.pid for s in self._ready}
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
        self.standby = 0
        with self._lock:
            ready, self._ready = self._ready, []
            running, groups = list(self._running), list(self._groups)
        for standby in ready:
            self._discard(standby)
        for pid in running:
            procs.kill_all(procs.tree(pid, with_root=True))
        for pgid in groups:
            procs.kill_group(pgid)
