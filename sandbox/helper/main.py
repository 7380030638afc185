"""sandloop's helper: runs commands and file operations for the host. Standard library only.

It speaks :mod:`sandbox.helper.wire` on two file descriptors (stdin/stdout when run as a
program) and, given ``--socket``, on a unix socket of the host's as well, connected once at start:
one thread per request, so a slow command never blocks another; one reply per request, on the
stream it came from. When an input ends (the front-end went away, even SIGKILLed) or it has been
idle too long, it exits. :class:`Helper` holds all of its state, so tests can run one in-process
(``Helper(workspace=tmp, contained=False).handle(request)``); :func:`main` is the program.

In a container the helper is the main process, PID 1 (``--contained``): nothing else holds the
attach stream it talks over, it reaps every orphan, and it owns every process it can see. At
start it makes itself non-dumpable, so a command, even one running as the same uid or as uid 0
without capabilities, cannot open its descriptors, memory or root through ``/proc`` or ptrace it:
the protocol cannot be written into from inside. Its code is a read-only bind mount.

The parts: :mod:`~sandbox.helper.shells` starts each command's shell (a child subreaper, so
everything the command forks stays in its tree) and keeps the books; :mod:`~sandbox.helper.procs`
reads the process table and freezes and kills trees; :mod:`~sandbox.helper.files` does the file
operations (``O_NOFOLLOW`` on every component, all-or-nothing commits); :mod:`~sandbox.helper.desktop`
the X display of a desktop image (started on the first ``desktop`` request, then driven and
captured in-process).

A timed-out command's tree alone is ended, in steps: frozen (SIGSTOP, rescanned until no new
process appears, so a fork bomb cannot outrun it); SIGTERM to every process below the shell
while the shell stays stopped (alive, it remains the subreaper of whatever they fork or orphan);
once they are gone, or after a grace period, SIGKILL to what is left below it and SIGTERM to the
shell (which runs its trap, if any); after another grace period SIGKILL to whatever remains. A
background process of an earlier, finished command is never touched; when the container's pids
limit is (nearly) used up, or was hit since the last command with half of it still taken, the
helper reclaims every process that belongs to no running command.

Why a socket besides the attach stream: under load, each hop of that stream (the engine, the
container's shim) waits for a CPU on the way in and on the way out; a unix socket is one copy in
the kernel. The attach stream stays, for the hello and for the lifecycle: its end still ends the
helper, and with it the container. The socket is the host's (bind-mounted read-only, so
``connect`` works and nothing can be planted there); the host accepts one connection, this one,
before any command runs, then closes it to everyone else.

Why threads and selectors rather than asyncio subprocesses: asyncio's ``Process.wait()`` only
returns once every pipe is closed, so a grandchild that keeps stdout open (``server &``) would
hang the call. Here the exit of the shell is observed on its own and the pipes are then drained
against a short deadline.
"""

from __future__ import annotations

import argparse
import base64
import os
import select
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from sandbox.helper import archive, confine, procs, wire
from sandbox.helper.desktop import DISPLAY, Desktop
from sandbox.helper.files import Workspace
from sandbox.helper.shells import INLINE_COMMAND_MAX, Shell, Shells
from sandbox.helper.wire import OpError

if TYPE_CHECKING:
    from sandbox.helper.wire import Reply, Result, StepReply

    StepSink = Callable[[StepReply], None]

__all__ = ["ARCHIVE", "Helper", "main"]

# After the shell exits, pipes still held by background children are drained until they close,
# until QUIET_S passes with no new bytes, or until DRAIN_MAX_S — whichever comes first.
DRAIN_MAX_S = 2.0
QUIET_S = 0.25
#: How long a timed-out command's processes get after SIGTERM, in each of the two steps.
KILL_GRACE_S = 0.5
#: How often the tree of a timed-out command is looked at while it is being ended.
POLL_S = 0.01
MAX_READ_BYTES = 64 << 20
#: The ops a leading thread serves without handing its stream over (see :meth:`Helper._dispatch`).
_ANSWERED_AT_ONCE = frozenset({"cancel", "stat", "hello"})

#: How long a thread that served a request waits to lead again before it ends (while another is
#: ready): a session's requests reuse threads instead of starting one each.
WORKER_IDLE_S = 30.0

#: The helper's first argument for its archive mode (the snapshot's tar of /tmp, on stdout).
ARCHIVE = "--archive"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Capped:
    """Keeps the first and last bytes of a stream within a budget and counts what it drops."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.newlines = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self.newlines += data.count(b"\n")
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap > 0:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def result(self) -> wire.Capture:
        kept = len(self.head) + len(self.tail)
        dropped = self.total - kept
        kept_lines = self.head.count(b"\n") + self.tail.count(b"\n")
        return {
            "head": base64.b64encode(bytes(self.head)).decode(),
            "tail": base64.b64encode(bytes(self.tail)).decode(),
            "total_bytes": self.total,
            "dropped_bytes": dropped,
            "dropped_lines": self.newlines - kept_lines if dropped else 0,
        }


_RUNNING, _TERM_CHILDREN, _TERM_SHELL, _KILLED = range(4)


class _Ending:
    """How far ending a timed-out command has got."""

    def __init__(self) -> None:
        self.phase = _RUNNING
        self.until = 0.0  # when the current step's grace period ends
        self.known: dict[int, int] = {}  # every process of its tree seen: pid -> start


class _Stream:
    """One stream the protocol travels on: its replies' descriptor (written whole, one frame at a
    time) and its ``runs`` in flight, which a ``cancel`` on the same stream can stop."""

    def __init__(self, out_fd: int | None) -> None:
        self.out_fd = out_fd
        self.write_lock = threading.Lock()
        self.runs: dict[int, threading.Event] = {}  # request id -> set when cancelled
        # Serving it (see Helper.serve):
        self.in_fd = -1
        self.read_lock = threading.Lock()  # held by the thread that leads: reads the next request
        self.lock = threading.Lock()  # for ready
        self.ready = 0  # threads waiting to lead
        self.ended = threading.Event()


class _Lead:
    """A thread's lead of a stream (its read lock held): the thread reads the stream's next
    request itself once it has served this one, unless it hands the stream over first (see
    :meth:`Helper.serve`)."""

    def __init__(self, helper: Helper, stream: _Stream) -> None:
        self.stream = stream
        self.held = True
        self._helper = helper

    def pending(self) -> bool:
        """Is more of the stream (a request, or its end) already there to be read?"""
        poller = select.poll()
        poller.register(self.stream.in_fd, select.POLLIN)
        return bool(poller.poll(0))

    def hand_over(self) -> None:
        """Let another thread lead (one is started if none waits, which is rare: see
        Helper._follow_stream); idempotent."""
        if not self.held:
            return
        self.held = False
        with self.stream.lock:
            waiting = self.stream.ready
        self.stream.read_lock.release()
        if not waiting and not self._helper._add_follower(self.stream):
            self._helper.shells.reclaim()  # free the pids a background fork bomb holds, then try again
            self._helper._add_follower(self.stream)  # else this thread leads again once it is done


def _error_body(exc: Exception) -> wire.ErrorBody:
    """What a request (or one command of a ``runs``) that raised ``exc`` is answered with."""
    if isinstance(exc, OpError):
        return {"kind": exc.kind, "message": str(exc)}
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return {"kind": "io", "message": f"{exc.strerror or exc}{where}"}
    return {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}  # a bug: still answered


class Helper:
    """Serves requests for one workspace.

    ``contained``: this helper owns every process it can see (it is a container's PID 1): see
    :class:`~sandbox.helper.shells.Shells`. Never set it in a process with children of its own
    (a test runner). ``subreaper``: the path of the subreaper program
    (:mod:`sandbox.helper.subreaper`), when there is one.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        contained: bool = False,
        home: str | None = None,
        shell: str | None = None,
        subreaper: str | None = None,
        max_read_bytes: int = MAX_READ_BYTES,
        inline_command_max: int = INLINE_COMMAND_MAX,
        kill_grace_s: float = KILL_GRACE_S,
    ) -> None:
        self.workspace = os.path.realpath(os.fspath(workspace))
        self.contained = contained
        self.kill_grace_s = kill_grace_s
        self.files = Workspace(self.workspace, max_read_bytes=max_read_bytes)
        self.shells = Shells(self.workspace, shell=shell, contained=contained, subreaper=subreaper,
                             inline_command_max=inline_command_max)
        self.env = {
            # In a container the helper's own PATH is the image's (the engine or the kubelet sets
            # it from the image's config): where an environment puts /opt/env/bin, or a
            # language image its toolchain. Outside one, a fixed PATH, never the caller's.
            "PATH": (os.environ.get("PATH") if contained else None) or _PATH,
            "HOME": home or "/tmp/home",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "PWD": self.workspace,
            "TMPDIR": "/tmp",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        self._lock = threading.Lock()  # the request count
        self._busy = 0
        self._last_activity = time.monotonic()
        self._in_process = _Stream(None)  # what handle() answers for: no stream of its own
        #: it reached the host's socket at start (``--socket``), and serves requests there too
        self.socket = False
        self._desktop: Desktop | None = None

    # --- requests ------------------------------------------------------------------------

    def handle(self, message: object, on_step: StepSink | None = None) -> Reply:
        """The reply to one request (a ``runs`` tells ``on_step`` each command's result first).
        Never raises: a failure is an error reply."""
        self._begin()
        try:
            return self._answer(message, self._in_process, time.monotonic(), on_step or (lambda step: None))
        finally:
            self._end()

    def _answer(self, message: object, stream: _Stream, received: float, on_step: StepSink,
                lead: _Lead | None = None) -> Reply:
        rid = message.get("id") if isinstance(message, dict) else None
        rid = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
        try:
            request = wire.parse_request(message)
            return wire.ok_reply(request["id"], self._dispatch(request, stream, received, on_step, lead))
        except Exception as exc:
            error = _error_body(exc)
            return wire.error_reply(rid, error["kind"], error["message"])

    def _dispatch(self, request: wire.Request, stream: _Stream, received: float, on_step: StepSink,
                  lead: _Lead | None) -> Result:
        """``lead``: this thread's lead of ``stream``, when it holds it (see :meth:`serve`)."""
        if request["op"] == "run":
            return self.run(request, received, lead)
        if request["op"] == "runs":
            return self.runs(request, stream, received, on_step, lead)
        # Any op but these few answers-at-once may take a while (a read, a commit, a desktop batch):
        # the stream goes to another thread first, so a request sent meanwhile (a cancel, a command
        # that kills a hung X server) is not queued behind it.
        if lead is not None and request["op"] not in _ANSWERED_AT_ONCE:
            lead.hand_over()
        if request["op"] == "cancel":
            cancelled = stream.runs.get(request["target"])
            if cancelled is not None:
                cancelled.set()
            return {"cancelled": cancelled is not None}
        if request["op"] == "read":
            return self.files.read(request["path"])
        if request["op"] == "stat":
            return self.files.stat(request["path"])
        if request["op"] == "commit":
            return self.files.commit(request["changes"])
        if request["op"] == "desktop":
            return self.desktop(request)
        return self.hello()

    def desktop(self, request: wire.DesktopRequest) -> wire.DesktopResult:
        """A batch on the display, started on first use; from then on commands see it too."""
        with self._lock:
            if self._desktop is None:
                self._desktop = Desktop(self.workspace, {**self.env, **request["env"]})
                self.env["DISPLAY"] = DISPLAY
        width, height = request["size"]
        return self._desktop.request(request["steps"], float(request["settle_s"]), (width, height))

    def _begin(self) -> None:
        with self._lock:
            self._busy += 1
            self._last_activity = time.monotonic()

    def _end(self) -> None:
        with self._lock:
            self._busy -= 1
            self._last_activity = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last request ended; 0 while one is being served."""
        with self._lock:
            return 0.0 if self._busy else time.monotonic() - self._last_activity

    def hello(self) -> wire.HelloResult:
        return {
            "protocol": wire.PROTOCOL_VERSION,
            "python": sys.version.split()[0],
            "pid": os.getpid(),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "shell": self.shells.shell,
            "kernel": os.uname().release,
            "workspace_writable": os.access(self.workspace, os.W_OK),
            "contained": self.contained,
            "non_dumpable": procs.non_dumpable(),
            "subreaper": self.shells.subreaper,
            "socket": self.socket,
            "seccomp": confine.status(),
        }

    # --- serving a stream ----------------------------------------------------------------

    def serve(self, in_fd: int, out_fd: int) -> None:
        """Answer the requests read from ``in_fd`` on ``out_fd`` until ``in_fd`` ends.

        Leaders and followers: of the stream's threads, the one holding its read lock (leading)
        reads the next request and serves it itself — no hand-over to another thread on the way
        of a request — and keeps leading: one command after another, no other thread wakes
        (under load each wakeup waits for a CPU, and each thread that wakes wants the
        interpreter lock the spawn holds). It hands the stream to a follower (one is started if
        none waits) as soon as anything more arrives: at once when the next request is already
        there, while its command runs when one comes then (the command's loop watches the
        stream too), and before an op that may take long (a read or a commit); so no request
        ever waits for another's command. Threads idle for WORKER_IDLE_S end while another
        waits."""
        stream = _Stream(out_fd)
        stream.in_fd = in_fd
        self._add_follower(stream)
        stream.ended.wait()

    def _add_follower(self, stream: _Stream) -> bool:
        with stream.lock:
            stream.ready += 1
        try:
            threading.Thread(target=self._follow_stream, args=(stream,), daemon=True).start()
        except RuntimeError:  # no thread left: a fork bomb holds every pid
            with stream.lock:
                stream.ready -= 1
            return False
        return True

    def _follow_stream(self, stream: _Stream) -> None:
        while not stream.ended.is_set():
            if not stream.read_lock.acquire(timeout=WORKER_IDLE_S):
                with stream.lock:
                    leave = stream.ready > 1
                    if leave:
                        stream.ready -= 1
                if leave:
                    return
                continue
            with stream.lock:
                stream.ready -= 1
                alone = stream.ready == 0
            # One follower waits from the start, so a hand-over never needs a new thread (and a
            # pid, which a command may have taken all of by then); it sleeps until one comes.
            if alone and not self._add_follower(stream):
                self.shells.reclaim()  # free the pids a background fork bomb holds, then try again
                self._add_follower(stream)
            lead = _Lead(self, stream)
            try:
                self._lead(stream, lead)
            finally:
                if lead.held:  # the stream ended (or a bug): the lock goes back, nobody new starts
                    lead.held = False
                    stream.read_lock.release()
                with stream.lock:
                    stream.ready += 1

    def _lead(self, stream: _Stream, lead: _Lead) -> None:
        """Read and serve ``stream``'s requests while this thread leads it."""
        while lead.held and not stream.ended.is_set():
            try:
                message = wire.read_frame(lambda n: os.read(stream.in_fd, n))
            except OpError as exc:
                self._send(stream, wire.error_reply(None, exc.kind, str(exc)))
                message = None  # the stream is out of step: nothing after this can be trusted
            if message is None:
                stream.ended.set()
                return
            received = time.monotonic()
            self._begin()
            if lead.pending():  # the next request is there already: it is read beside this one
                lead.hand_over()
            self._serve_one(message, stream, received, lead)

    def _serve_one(self, message: object, stream: _Stream, received: float, lead: _Lead) -> None:
        try:
            self._send(stream, self._answer(message, stream, received, lambda step: self._send(stream, step),
                                            lead))
        finally:
            self._end()

    def _send(self, stream: _Stream, reply: Reply | StepReply) -> None:
        if stream.out_fd is None:
            return
        try:
            frame = wire.encode_frame(cast("Mapping[str, Any]", reply))
        except OpError as exc:  # a reply too large to frame is still answered
            error: dict[str, Any] = {**wire.error_reply(reply["id"], "too_large", str(exc))}
            if "step" in cast("Mapping[str, Any]", reply):
                error["step"] = cast("wire.StepReply", reply)["step"]
            frame = wire.encode_frame(error)
        view = memoryview(frame)
        with stream.write_lock:
            try:
                while view:
                    view = view[os.write(stream.out_fd, view):]
            except OSError:
                pass  # the host is gone; the read side sees the end of the stream

    def shutdown(self) -> None:
        """Kill every process this helper started (in a container the kernel does it anyway)."""
        self.shells.shutdown()
        if self._desktop is not None:
            self._desktop.close()

    # --- run -----------------------------------------------------------------------------

    def runs(self, req: wire.RunsRequest, stream: _Stream, received: float, on_step: StepSink,
             lead: _Lead | None = None) -> wire.RunsResult:
        """The commands one after another, each answered by a step as soon as it is done; none
        after one that timed out, nor after a ``cancel``."""
        rid, cancelled = req["id"], threading.Event()
        stream.runs[rid] = cancelled
        ran = 0
        try:
            for index, command in enumerate(req["commands"]):
                if cancelled.is_set():
                    break
                one: wire.RunRequest = {"id": rid, "op": "run", "command": command, "timeout_s": req["timeout_s"],
                                        "max_output_bytes": req["max_output_bytes"], "env": req["env"]}
                ran += 1
                try:
                    wire.parse_request(one)  # its command, as a run's: no NUL byte
                    result = self.run(one, received, lead)
                except Exception as exc:  # this command could not start: the next may
                    on_step(wire.step_reply(rid, index, None, _error_body(exc)))
                    received = time.monotonic()
                    continue
                on_step(wire.step_reply(rid, index, result))
                if result["timed_out"]:
                    break
                received = result["timing"]["answered"]
        finally:
            stream.runs.pop(rid, None)
        return {"ran": ran}

    def run(self, req: wire.RunRequest, received: float | None = None, lead: _Lead | None = None) -> wire.RunResult:
        if received is None:
            received = time.monotonic()
        out, err = Capped(req["max_output_bytes"]), Capped(req["max_output_bytes"])
        oom_before = procs.oom_kills()
        if self.contained and procs.pids_exhausted():
            # Something left in the background (a fork bomb, typically) holds nearly every pid:
            # free them before this command, or it could not even start its own pipeline. That
            # may take a while: the stream goes on meanwhile.
            if lead is not None:
                lead.hand_over()
            self.shells.reclaim()
        started = time.monotonic()
        shell = self.shells.start(req["command"], {**self.env, **req["env"]})
        spawned = time.monotonic()
        timed_out, exited = False, 0.0
        try:
            timed_out, exited = self._follow(shell, started + float(req["timeout_s"]), out, err, lead)
        finally:
            self.shells.finished(shell, timed_out=timed_out)
        code = shell.proc.returncode
        sig = -code if code is not None and code < 0 else None
        # Read again only for a SIGKILL, the one way an OOM kill ends a command.
        oom = sig == signal.SIGKILL and oom_before is not None and (procs.oom_kills() or 0) > oom_before
        return {
            "exit_code": None if timed_out else (128 + sig if sig else code),
            "signal": sig,
            "timed_out": timed_out,
            "oom_killed": bool(oom),
            "duration_s": time.monotonic() - started,
            "stdout": out.result(),
            "stderr": err.result(),
            "timing": {"received": received, "started": started, "spawned": spawned, "exited": exited,
                       "answered": time.monotonic()},
        }

    def _follow(self, shell: Shell, deadline: float, out: Capped, err: Capped,
                lead: _Lead | None = None) -> tuple[bool, float]:
        """Collect the output until the shell exits (ending it at the deadline), then drain the
        pipes background children may hold; while this thread leads a stream, hand it over as
        soon as anything arrives on it. Whether the command timed out, and when its shell's exit
        was seen (0.0: never)."""
        proc, exit_r = shell.proc, shell.exit_pipe.r
        assert proc.stdout is not None and proc.stderr is not None
        streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        sel = selectors.DefaultSelector()
        for fd in (*streams, exit_r):
            sel.register(fd, selectors.EVENT_READ)
        if lead is not None and lead.held:
            sel.register(lead.stream.in_fd, selectors.EVENT_READ, lead)
        open_pipes = set(streams)
        ending = _Ending()
        wake = deadline
        exited_at: float | None = None
        last_data = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if exited_at is None:
                    if now >= wake:
                        wake = self._escalate(proc.pid, ending, now)
                    waits = [wake - now]
                else:
                    if not open_pipes:
                        break
                    if now >= exited_at + DRAIN_MAX_S or now >= max(last_data, exited_at) + QUIET_S:
                        break
                    waits = [exited_at + DRAIN_MAX_S - now, max(last_data, exited_at) + QUIET_S - now]
                for key, _ in sel.select(max(0.0, min(waits))):
                    if key.data is lead and lead is not None:  # a request (or the stream's end)
                        sel.unregister(key.fd)
                        lead.hand_over()
                        continue
                    if key.fd == exit_r:
                        sel.unregister(exit_r)
                        exited_at = time.monotonic()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        streams[key.fd].add(chunk)
                        last_data = time.monotonic()
                    else:
                        sel.unregister(key.fd)
                        open_pipes.discard(key.fd)
                if exited_at is None and not open_pipes and self.shells.reaped(shell):
                    # Both pipes ended with the shell, which we reaped ourselves: no waiting for
                    # the reaper thread to notice and tell us (one wakeup less on every command).
                    sel.unregister(exit_r)
                    exited_at = time.monotonic()
        finally:
            sel.close()
        if ending.phase == _RUNNING:
            return False, exited_at or 0.0

        # Whatever the tree left behind goes too: a timed-out call leaves no process.
        def leftovers(table: Mapping[int, procs.Proc]) -> Iterable[int]:
            alive = [pid for pid, start in ending.known.items() if pid in table and table[pid].start == start]
            return {*alive, *procs.descendants(table, alive)}

        procs.kill_all(leftovers)
        return True, exited_at or 0.0

    def _escalate(self, pid: int, ending: _Ending, now: float) -> float:
        """One step of ending a command that ran past its deadline; returns when to look again.

        The shell stays stopped while the processes below it get their SIGTERM: alive, it
        remains the subreaper of everything they fork or orphan, so none of it leaves the tree.
        Then the shell gets its own SIGTERM (and runs its trap, if it has one)."""
        grace = self.kill_grace_s
        if ending.phase == _RUNNING:
            members = procs.freeze(procs.tree(pid, with_root=True))
            ending.known.update(members)
            for member in members:
                if member != pid:
                    procs.send(member, signal.SIGTERM)
                    procs.send(member, signal.SIGCONT)
            ending.phase, ending.until = _TERM_CHILDREN, now + grace
        if ending.phase == _TERM_CHILDREN:
            if now < ending.until and procs.alive(procs.tree(pid, with_root=False)):
                return now + POLL_S
            ending.known.update(procs.kill_all(procs.tree(pid, with_root=False)))
            procs.send(pid, signal.SIGTERM)
            procs.send(pid, signal.SIGCONT)
            ending.phase, ending.until = _TERM_SHELL, now + grace
            return ending.until
        if ending.phase == _TERM_SHELL:
            ending.known.update(procs.kill_all(procs.tree(pid, with_root=True)))
            ending.phase = _KILLED
        return now + POLL_S * 5


# --- the program -----------------------------------------------------------------------------


def _connect(path: str) -> socket.socket | None:
    """The host's socket, or None (where the sandbox cannot reach host sockets, gVisor's, the
    attach stream carries everything)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inherited by commands
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        print(f"sandloop-helper: the host's socket is out of reach ({exc}); serving on stdin only",
              file=sys.stderr)
        return None
    return sock


def _serve_to_the_end(helper: Helper, in_fd: int, out_fd: int) -> None:
    helper.serve(in_fd, out_fd)
    # An input ended: the front-end is gone. Take every command with us (in a container the
    # kernel does it when PID 1 exits; on the host, LocalSession relies on this).
    helper.shutdown()
    os._exit(0)


def _idle_watch(helper: Helper, idle_s: float) -> None:
    while True:
        time.sleep(min(5.0, idle_s / 4))
        if helper.idle_for() > idle_s:
            helper.shutdown()
            os._exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [confine.EXEC]:  # not a helper: the seccomp filter, then a program (see confine)
        return confine.exec_confined(argv[1:])
    if argv[:1] == [ARCHIVE]:  # not a helper: the seccomp filter, then /tmp's entries as a tar on stdout
        refused = confine.confine(required=True)
        if refused is not None:
            print(refused, file=sys.stderr)
            return 1
        archive.archive(argv[1:], sys.stdout.buffer)
        return 0
    parser = argparse.ArgumentParser(prog="sandloop-helper")
    parser.add_argument("--workspace", default="/workspace")
    parser.add_argument("--idle", type=float, default=900.0, help="exit after this long without a request")
    parser.add_argument("--home", default="/tmp/home")
    parser.add_argument("--contained", action="store_true", help="the only user of this container (its PID 1)")
    parser.add_argument("--subreaper", help="the program that makes each command's shell a subreaper")
    parser.add_argument("--socket", help="a unix socket of the host's to serve requests on as well")
    parser.add_argument("--no-seccomp", action="store_true", help="run without sandloop's seccomp filter")
    parser.add_argument("--restore", help="a snapshot's tar of /tmp to unpack before serving")
    args = parser.parse_args(argv)
    # Before any command can run: sandloop's seccomp filter, inherited by all of them (confine.py).
    refusal = confine.confine(required=not args.no_seccomp)
    # First of all: from now on no other process can open our descriptors, memory or root
    # through /proc, nor ptrace us — not one with our uid, nor uid 0 without CAP_SYS_PTRACE.
    # Our commands are such processes, and the protocol travels on our descriptors.
    procs.set_non_dumpable()
    if args.contained:
        procs.set_subreaper()  # orphans come to us even where we are not PID 1
    # Python turns SIGINT into KeyboardInterrupt; as PID 1 that handler would let a command's
    # `kill -INT 1` through. With the default action the kernel drops it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The protocol gets private descriptors; fds 0 and 1 become /dev/null and stderr, so a
    # stray print can never corrupt a frame.
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    if refusal is not None:  # no filter, no command: every request is answered with the reason
        return confine.refuse(in_fd, out_fd, refusal)
    if args.restore:  # under the filter, before the first request: a resumed session's files
        archive.restore(args.restore)
    os.makedirs(args.home, exist_ok=True)
    # Before anything is read: the host's first request (its hello) learns whether this worked.
    sock = _connect(args.socket) if args.socket else None
    helper = Helper(args.workspace, contained=args.contained, home=args.home, subreaper=args.subreaper)
    threading.Thread(target=_idle_watch, args=(helper, args.idle), name="idle", daemon=True).start()
    if sock is not None:
        helper.socket = True
        threading.Thread(target=_serve_to_the_end, args=(helper, sock.fileno(), sock.fileno()), name="socket",
                         daemon=True).start()
    _serve_to_the_end(helper, in_fd, out_fd)
    return 0


if __name__ == "__main__":
    main()
