"""sandloop's in-sandbox helper. Standard library only: it is copied into images we do not build.

It speaks a small framed protocol on stdin/stdout: each frame is a 4-byte big-endian length and a
UTF-8 JSON object. Requests carry an integer ``id`` and an ``op``; every request gets exactly one
reply with the same ``id`` (``{"id", "ok": true, ...}`` or ``{"id", "ok": false, "error":
{"kind", "message"}}``). Requests run concurrently (a thread each), so one slow command never
blocks another. When stdin closes (the front-end went away) or the session is idle too long,
the helper exits, and with it the container.

Ops: ``hello``, ``run``, ``read``, ``stat``, ``commit``.

Why threads and selectors rather than asyncio subprocesses: asyncio's ``Process.wait()`` only
returns once every pipe is closed, so a grandchild that keeps stdout open (``server &``) would
hang the call. Here the exit of the main process is observed on its own and the pipes are then
drained against a short deadline.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import json
import os
import secrets
import selectors
import signal
import stat as stat_mod
import struct
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = 1
MAX_FRAME = 256 << 20
# After the main process exits, pipes still held by background children are drained until they
# close, until QUIET_S passes with no new bytes, or until DRAIN_MAX_S — whichever comes first.
DRAIN_MAX_S = 2.0
QUIET_S = 0.25
KILL_GRACE_S = 0.5
MAX_READ_BYTES = 64 << 20

_write_lock = threading.Lock()
_groups: set[int] = set()  # process groups started; killed when the front-end goes away
_running: set[int] = set()  # groups whose command is still being waited on
_groups_lock = threading.Lock()  # guards both sets (commands run in threads)
_busy = 0
_busy_lock = threading.Lock()
_last_activity = time.monotonic()


class RequestError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# --- framing -------------------------------------------------------------------------------


def send(obj: dict) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    frame = struct.pack(">I", len(data)) + data
    with _write_lock:
        view = memoryview(frame)
        while view:
            n = os.write(1, view)
            view = view[n:]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(fd: int) -> dict | None:
    header = _read_exact(fd, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > MAX_FRAME:
        raise RequestError("bad_request", f"frame of {size} bytes exceeds {MAX_FRAME}")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return json.loads(body)


# --- output capture ------------------------------------------------------------------------


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

    def result(self) -> dict:
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


# --- commands ------------------------------------------------------------------------------


def _oom_kills() -> int | None:
    """The cgroup's OOM-kill counter (v2 memory.events or v1 memory.oom_control)."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _killpg(pgid: int, sig: int) -> None:
    # A fork bomb keeps forking while we kill: repeat until the group is empty.
    for _ in range(50):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        if sig != signal.SIGKILL:
            return
        time.sleep(0.002)


def _shell() -> list[str]:
    for candidate in ("/bin/bash", "/usr/bin/bash"):
        if os.access(candidate, os.X_OK):
            return [candidate, "-c"]
    return ["/bin/sh", "-c"]


SHELL = _shell()


def _spawn(command: str, workspace: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*SHELL, command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workspace,
        env=env,
        start_new_session=True,
        close_fds=True,
    )


CONTAINED = False  # set by --contained: this helper owns every process it can see


def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[3])  # field 6: the session id
    except (OSError, ValueError, IndexError):
        return None


def _kill_sessions_except(keep: set[int]) -> None:
    """Kill every process (but init and the helper) whose session is not in ``keep``.

    Sessions, not process groups: every command starts its own session, and tools inside it
    (``timeout``, job-control shells) may change their group but not their session; only a
    deliberate ``setsid`` leaves it. Repeated until a pass finds nothing, so a loop that keeps
    spawning escapees is emptied too.
    """
    me = os.getpid()
    keep = keep | {os.getsid(0)}
    for _ in range(20):
        killed = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (1, me):
                continue
            sid = _session_of(entry)
            if sid is not None and sid not in keep:
                try:
                    os.kill(int(entry), signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
        if not killed:
            return
        time.sleep(0.005)


def _kill_strays(timed_out: int) -> None:
    """After a timeout, also kill what escaped the command (``setsid cmd &``).

    Only inside a container, where every process but init and the helper came from a command:
    whatever is in no session of a command still running, nor of a background job an earlier
    command started on purpose, is a stray of the timed-out one.
    """
    if CONTAINED:
        with _groups_lock:
            keep = _groups - {timed_out}
        _kill_sessions_except(keep)


def _read_int(*paths: str) -> int | None:
    for path in paths:
        try:
            with open(path) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _pids_exhausted() -> bool:
    """Is the container's pids limit (nearly) used up? cgroup v2, then v1."""
    limit = _read_int("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
    current = _read_int("/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current")
    return limit is not None and current is not None and current >= limit * 0.9


def _spawn_tracked(command: str, workspace: str, env: dict[str, str]) -> subprocess.Popen:
    # Under the lock, so a concurrent timeout's scan never sees the new session untracked.
    with _groups_lock:
        proc = _spawn(command, workspace, env)
        _groups.add(proc.pid)
        _running.add(proc.pid)
    return proc


def _reclaim() -> None:
    """Kill every background process whose command already returned — in a container,
    escapees from any session too, since they hold pids just the same."""
    with _groups_lock:
        idle = _groups - _running
        _groups.difference_update(idle)
        running = set(_running)
    for pgid in idle:
        _killpg(pgid, signal.SIGKILL)
    if CONTAINED:
        _kill_sessions_except(running)


def run_command(req: dict, workspace: str, base_env: dict[str, str]) -> dict:
    command = req["command"]
    timeout = float(req.get("timeout_s") or 120.0)
    cap = int(req.get("max_output_bytes") or (1 << 20))
    env = dict(base_env)
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    oom_before = _oom_kills()
    if _pids_exhausted():
        # Something left in the background (a fork bomb, typically) holds nearly every pid:
        # free them before this command, or it could not even start its own pipeline.
        _reclaim()
    started = time.monotonic()
    try:
        proc = _spawn_tracked(command, workspace, env)
    except BlockingIOError:
        # The pids limit is exhausted, typically by a fork bomb left running in the background
        # by an earlier command. Reclaim those processes so the session keeps working.
        _reclaim()
        try:
            proc = _spawn_tracked(command, workspace, env)
        except OSError as exc:
            raise RequestError("resources", f"cannot start {SHELL[0]}: {exc}") from exc
    except OSError as exc:
        raise RequestError("spawn", f"cannot start {SHELL[0]}: {exc}") from exc
    try:
        # Children, not the helper, should be the OOM killer's first choice.
        with open(f"/proc/{proc.pid}/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass

    exit_r, exit_w = os.pipe()

    def waiter() -> None:
        proc.wait()
        os.write(exit_w, b"x")

    try:
        threading.Thread(target=waiter, daemon=True).start()
    except RuntimeError:  # no pid left for a thread: free the background ones, then retry
        _reclaim()
        threading.Thread(target=waiter, daemon=True).start()
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): Capped(cap), proc.stderr.fileno(): Capped(cap)}
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    for fd in (out_fd, err_fd, exit_r):
        sel.register(fd, selectors.EVENT_READ)
    open_pipes = {out_fd, err_fd}
    deadline = started + timeout
    exited_at: float | None = None
    term_at: float | None = None
    killed = False
    last_data = started
    try:
        while True:
            now = time.monotonic()
            if exited_at is None:
                if term_at is None and now >= deadline:
                    _killpg(proc.pid, signal.SIGTERM)
                    term_at = now
                if term_at is not None and not killed and now >= term_at + KILL_GRACE_S:
                    _killpg(proc.pid, signal.SIGKILL)
                    killed = True
                waits = [deadline - now] if term_at is None else [term_at + KILL_GRACE_S - now]
                if killed:
                    waits = [0.05]
            else:
                if not open_pipes:
                    break
                if now >= exited_at + DRAIN_MAX_S or now >= max(last_data, exited_at) + QUIET_S:
                    break
                waits = [exited_at + DRAIN_MAX_S - now, max(last_data, exited_at) + QUIET_S - now]
            for key, _ in sel.select(max(0.0, min(waits))):
                fd = key.fd
                if fd == exit_r:
                    os.read(exit_r, 1)
                    sel.unregister(exit_r)
                    exited_at = time.monotonic()
                    continue
                chunk = os.read(fd, 65536)
                if chunk:
                    streams[fd].add(chunk)
                    last_data = time.monotonic()
                else:
                    sel.unregister(fd)
                    open_pipes.discard(fd)
    finally:
        sel.close()
        for fd in (exit_r, exit_w):
            os.close(fd)
        proc.stdout.close()
        proc.stderr.close()
    with _groups_lock:
        _running.discard(proc.pid)
        try:
            os.killpg(proc.pid, 0)  # anything left running in the background?
        except ProcessLookupError:
            _groups.discard(proc.pid)  # no: forget it, before its number is reused
        except PermissionError:
            pass
    code = proc.returncode
    timed_out = term_at is not None
    if timed_out:
        # Whatever the group left behind goes too: a timed-out call leaves no process.
        _killpg(proc.pid, signal.SIGKILL)
        _kill_strays(proc.pid)
        with _groups_lock:
            _groups.discard(proc.pid)
    sig = -code if code is not None and code < 0 else None
    oom_after = _oom_kills()
    oom = sig == signal.SIGKILL and oom_before is not None and (oom_after or 0) > oom_before
    return {
        "exit_code": None if timed_out else (128 + sig if sig else code),
        "signal": sig,
        "timed_out": timed_out,
        "oom_killed": bool(oom),
        "duration_s": time.monotonic() - started,
        "stdout": streams[out_fd].result(),
        "stderr": streams[err_fd].result(),
    }


# --- files ---------------------------------------------------------------------------------


def _components(path: str) -> list[str]:
    if not isinstance(path, str) or not path:
        raise RequestError("path_refused", "empty path")
    if "\x00" in path:
        raise RequestError("path_refused", "path contains a NUL byte")
    if path.startswith("/"):
        raise RequestError("path_refused", f"{path!r} is absolute; paths are relative to the workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise RequestError("path_refused", f"{path!r} names the workspace itself")
    if ".." in parts:
        raise RequestError("path_refused", f"{path!r} contains '..'")
    return parts


class Walker:
    """Opens directories one component at a time with O_NOFOLLOW, so no symlink anywhere on the
    path — planted before or during the call — can lead outside the workspace."""

    def __init__(self, workspace: str) -> None:
        self.root = workspace

    def open_parent(self, path: str, create: bool) -> tuple[int, str]:
        parts = _components(path)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        missing = "/".join(parts[: i + 1])
                        raise RequestError("missing", f"{path}: directory {missing} does not exist") from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise RequestError(
                            "path_refused",
                            f"{path}: {'/'.join(parts[: i + 1])} is a symlink or not a directory",
                        ) from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def op_read(req: dict, walker: Walker) -> dict:
    path = req["path"]
    dir_fd, name = walker.open_parent(path, create=False)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            raise RequestError("missing", f"{path} does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RequestError("path_refused", f"{path} is a symlink") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise RequestError("path_refused", f"{path} is not a regular file")
            if st.st_size > MAX_READ_BYTES:
                raise RequestError("too_large", f"{path} is {st.st_size} bytes (limit {MAX_READ_BYTES})")
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return {"data": base64.b64encode(b"".join(chunks)).decode(), "mode": stat_mod.S_IMODE(st.st_mode)}


def op_stat(req: dict, walker: Walker) -> dict:
    path = req["path"]
    try:
        dir_fd, name = walker.open_parent(path, create=False)
    except RequestError as exc:
        if exc.kind == "missing":
            return {"exists": False}
        raise
    try:
        st = _lstat(dir_fd, name)
    finally:
        os.close(dir_fd)
    if st is None:
        return {"exists": False}
    return {
        "exists": True,
        "size": st.st_size,
        "mode": stat_mod.S_IMODE(st.st_mode),
        "is_dir": stat_mod.S_ISDIR(st.st_mode),
        "is_symlink": stat_mod.S_ISLNK(st.st_mode),
    }


def op_commit(req: dict, walker: Walker) -> dict:
    """All or nothing: stage every new file as a temp beside its target, then swap them in,
    keeping the old files as backups until every swap succeeded; roll back on any failure."""
    changes = req["changes"]
    staged: list[dict] = []  # {dir_fd, name, tmp, backup, delete, existed}
    done: list[dict] = []

    def cleanup(entries: list[dict], names: tuple[str, ...]) -> None:
        for e in entries:
            for key in names:
                if e.get(key):
                    with contextlib.suppress(OSError):
                        os.unlink(e[key], dir_fd=e["dir_fd"])

    try:
        seen: set[str] = set()
        for change in changes:
            path = change["path"]
            key = "/".join(_components(path))
            if key in seen:
                raise RequestError("bad_request", f"{path} appears twice in one commit")
            seen.add(key)
            delete = change.get("data") is None
            dir_fd, name = walker.open_parent(path, create=not delete)
            entry: dict = {"dir_fd": dir_fd, "name": name, "delete": delete, "path": path}
            staged.append(entry)
            st = _lstat(dir_fd, name)
            if st is not None and stat_mod.S_ISDIR(st.st_mode):
                raise RequestError("path_refused", f"{path} is a directory")
            entry["existed"] = st is not None
            if delete:
                if st is None:
                    raise RequestError("missing", f"{path} does not exist")
                continue
            mode = change.get("mode")
            if mode is None:
                mode = stat_mod.S_IMODE(st.st_mode) if st is not None and not stat_mod.S_ISLNK(st.st_mode) else 0o644
            tmp = f".sandloop-{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
            entry["tmp"] = tmp
            try:
                data = base64.b64decode(change["data"])
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        # Swap phase.
        for entry in staged:
            if entry["existed"]:
                backup = f".sandloop-{secrets.token_hex(6)}.bak"
                os.rename(entry["name"], backup, src_dir_fd=entry["dir_fd"], dst_dir_fd=entry["dir_fd"])
                entry["backup"] = backup
            if not entry["delete"]:
                os.rename(entry["tmp"], entry["name"], src_dir_fd=entry["dir_fd"], dst_dir_fd=entry["dir_fd"])
                entry["tmp"] = None
            done.append(entry)
    except BaseException as exc:
        for entry in reversed(done):
            try:
                if not entry["delete"]:
                    os.unlink(entry["name"], dir_fd=entry["dir_fd"])
                if entry.get("backup"):
                    os.rename(entry["backup"], entry["name"], src_dir_fd=entry["dir_fd"], dst_dir_fd=entry["dir_fd"])
                    entry["backup"] = None
            except OSError:
                pass
        cleanup(staged, ("tmp", "backup") if not done else ("tmp",))
        for entry in staged:
            os.close(entry["dir_fd"])
        if isinstance(exc, RequestError):
            raise
        if isinstance(exc, OSError):
            raise RequestError("io", f"{exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".strip()) from exc
        raise
    cleanup(staged, ("backup",))
    for entry in staged:
        os.close(entry["dir_fd"])
    return {"changed": len(staged)}


# --- main loop -----------------------------------------------------------------------------


def handle(req: dict, workspace: str, walker: Walker, env: dict[str, str]) -> None:
    global _busy, _last_activity
    rid = req.get("id")
    try:
        op = req.get("op")
        if op == "run":
            result = run_command(req, workspace, env)
        elif op == "read":
            result = op_read(req, walker)
        elif op == "stat":
            result = op_stat(req, walker)
        elif op == "commit":
            result = op_commit(req, walker)
        elif op == "hello":
            result = {
                "protocol": PROTOCOL_VERSION,
                "python": sys.version.split()[0],
                "uid": os.getuid(),
                "gid": os.getgid(),
                "shell": SHELL[0],
                "workspace_writable": os.access(workspace, os.W_OK),
                "kernel": os.uname().release,
            }
        else:
            raise RequestError("bad_request", f"unknown op {op!r}")
        send({"id": rid, "ok": True, **result})
    except RequestError as exc:
        send({"id": rid, "ok": False, "error": {"kind": exc.kind, "message": str(exc)}})
    except OSError as exc:
        send({"id": rid, "ok": False, "error": {"kind": "io", "message": f"{exc.strerror or exc}"}})
    except Exception as exc:  # a bug here must still answer the request
        send({"id": rid, "ok": False, "error": {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}})
    finally:
        with _busy_lock:
            _busy -= 1
            _last_activity = time.monotonic()


def _start_handler(req: dict, workspace: str, walker: Walker, env: dict[str, str]) -> None:
    threading.Thread(target=handle, args=(req, workspace, walker, env), daemon=True).start()


def idle_watch(idle_s: float) -> None:
    while True:
        time.sleep(min(5.0, idle_s / 4))
        with _busy_lock:
            idle = _busy == 0 and time.monotonic() - _last_activity > idle_s
        if idle:
            for pgid in list(_groups):
                _killpg(pgid, signal.SIGKILL)
            os._exit(0)


def main() -> None:
    global _busy, _last_activity, CONTAINED
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", default="/workspace")
    parser.add_argument("--idle", type=float, default=900.0)
    parser.add_argument("--home", default="/tmp/home")
    parser.add_argument("--contained", action="store_true", help="the only user of this container")
    args = parser.parse_args()
    CONTAINED = args.contained
    workspace = os.path.realpath(args.workspace)
    os.makedirs(args.home, exist_ok=True)
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": args.home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PWD": workspace,
        "TMPDIR": "/tmp",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    walker = Walker(workspace)
    threading.Thread(target=idle_watch, args=(args.idle,), daemon=True).start()
    while True:
        try:
            req = read_frame(0)
        except (RequestError, ValueError) as exc:
            send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": str(exc)}})
            break
        if req is None:
            break
        with _busy_lock:
            _busy += 1
            _last_activity = time.monotonic()
        try:
            _start_handler(req, workspace, walker, env)
        except RuntimeError:  # no threads left: a fork bomb holds every pid
            _reclaim()
            try:
                _start_handler(req, workspace, walker, env)
            except RuntimeError as exc:
                with _busy_lock:
                    _busy -= 1
                error = {"kind": "resources", "message": f"pids limit exhausted: {exc}"}
                send({"id": req.get("id"), "ok": False, "error": error})
    # stdin closed: the front-end is gone. Take every command's process group with us (in a
    # container the engine would anyway; on the host, LocalSession relies on this).
    for pgid in list(_groups):
        _killpg(pgid, signal.SIGKILL)
    os._exit(0)


if __name__ == "__main__":
    main()
