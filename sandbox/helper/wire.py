"""The helper's wire protocol, written once and used by both sides.

Standard library only: the helper's zip application carries this module, and the host's
:mod:`sandbox.helper.client` imports the same one, so the two sides cannot drift apart.

Framing
    One stream each way. A frame is a 4-byte big-endian unsigned length followed by that many
    bytes of UTF-8 JSON holding one object. Frames larger than :data:`MAX_FRAME` are refused.

Two streams may carry the protocol at once (a container's attach stream and the unix socket
the host hands it): each request is answered on the stream it came in on.

Requests (host to helper)
    ``{"id": <int>, "op": <op>, ...fields}``; ``id`` is unique among the requests in flight.

    ========  ================================================================================
    op        fields
    ========  ================================================================================
    hello     (none)
    run       ``command`` str (no NUL), ``timeout_s`` number > 0, ``max_output_bytes`` int > 0
              (per stream), ``env`` object of str to str (names without ``=``, no NUL; added
              to the helper's minimal environment, winning over it)
    runs      ``commands``: a non-empty list of such strings, run one after another, and the same
              other fields as ``run`` (the timeout is each command's own); after a command
              that timed out the rest are not run
    cancel    ``target`` int: a ``runs`` request in flight starts no further command
    read      ``path`` str, relative to the workspace
    stat      ``path`` str
    commit    ``changes``: list of ``{"path": str, "data": base64 str or null (delete),
              "mode": int or null (keep the current mode; 0o644 for a new file)}``
    desktop   ``steps``: a list of input steps (:mod:`sandbox.helper.desktop`), played on the
              helper's X display (started, or restarted, first), then one capture;
              ``settle_s`` number >= 0 (how long the capture may wait for the screen to stop
              changing), ``size`` ``[width, height]`` of the screen, ``env`` (as ``run``'s: added
              to the environment of the programs the desktop starts, when it starts them)
    ========  ================================================================================

Replies (helper to host)
    Exactly one per request, with the request's ``id``, in any order (requests run
    concurrently): ``{"id", "ok": true, "result": {...}}`` with the op's result type below, or
    ``{"id", "ok": false, "error": {"kind": <ErrorKind>, "message": str}}``. A frame that cannot
    be read at all is answered with ``"id": null`` and the helper stops.

    A ``runs`` request is answered by one step frame per command it ran, as soon as that
    command is done — ``{"id", "step": <index>, "ok": true, "result": <run's result>}`` or
    ``{"id", "step": <index>, "ok": false, "error": {...}}`` (that command could not start) —
    and then its reply, ``{"id", "ok": true, "result": {"ran": <how many ran>}}``. The steps
    carry the results, so whatever happens to the helper, the host knows which commands ran.

Error kinds (:data:`ErrorKind`): ``bad_request`` (malformed frame or request), ``path_refused``
(a path is absolute, has ``..``, names a symlink or a non-directory on the way, or a directory
where a file is expected), ``missing`` (the file or a parent directory does not exist),
``too_large`` (a file larger than the helper reads in one piece, or a reply larger than a
frame), ``resources`` (no process left to start the command, even after reclaiming background
ones), ``spawn`` (the shell could not be started), ``io`` (the file system refused a read or a
write), ``internal`` (a bug in the helper), ``unconfined`` (the helper could not install its
seccomp filter, :mod:`sandbox.helper.confine`, and answers every request, hello too, with this).

A ``desktop`` reply is ok even when a step failed or the X server died under it: its ``failed``
says which action, its ``restarted`` why the desktop was started afresh, and the capture is of
the screen as it is after that.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast, get_args

__all__ = [
    "ERROR_KINDS",
    "MAX_FRAME",
    "OPS",
    "PROTOCOL_VERSION",
    "CancelRequest",
    "CancelResult",
    "Capture",
    "Change",
    "CommitRequest",
    "CommitResult",
    "DesktopFailure",
    "DesktopRequest",
    "DesktopResult",
    "DesktopTiming",
    "ErrorBody",
    "ErrorKind",
    "ErrorReply",
    "FrameDecoder",
    "HelloRequest",
    "HelloResult",
    "OkReply",
    "Op",
    "OpError",
    "ReadRequest",
    "ReadResult",
    "RunRequest",
    "RunResult",
    "RunsRequest",
    "RunsResult",
    "SeccompStatus",
    "StatRequest",
    "StatResult",
    "StepReply",
    "SubreaperHow",
    "Timing",
    "encode_frame",
    "error_reply",
    "ok_reply",
    "parse_request",
    "read_frame",
    "step_reply",
]

#: Bumped whenever a request, a reply or the framing changes.
PROTOCOL_VERSION = 4
MAX_FRAME = 256 << 20
_HEADER = struct.Struct(">I")

ErrorKind = Literal["bad_request", "path_refused", "missing", "too_large", "resources", "spawn", "io", "internal",
                    "unconfined"]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

#: How each command's shell is made a child subreaper (so nothing it forks leaves its tree): by
#: exec'ing it through the subreaper program, by a prctl between fork and exec, or not at all.
SubreaperHow = Literal["exec", "preexec", "none"]

Op = Literal["hello", "run", "runs", "cancel", "read", "stat", "commit", "desktop"]
OPS: tuple[Op, ...] = get_args(Op)


class OpError(Exception):
    """A request the helper answers with an error reply of this ``kind``."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


# --- requests ------------------------------------------------------------------------------


class HelloRequest(TypedDict):
    id: int
    op: Literal["hello"]


class RunRequest(TypedDict):
    id: int
    op: Literal["run"]
    command: str
    timeout_s: float
    max_output_bytes: int
    env: dict[str, str]


class RunsRequest(TypedDict):
    id: int
    op: Literal["runs"]
    commands: list[str]
    timeout_s: float
    max_output_bytes: int
    env: dict[str, str]


class CancelRequest(TypedDict):
    id: int
    op: Literal["cancel"]
    target: int


class ReadRequest(TypedDict):
    id: int
    op: Literal["read"]
    path: str


class StatRequest(TypedDict):
    id: int
    op: Literal["stat"]
    path: str


class Change(TypedDict):
    path: str
    data: str | None  # base64; None deletes the file
    mode: int | None  # None keeps the current mode (0o644 for a new file)


class CommitRequest(TypedDict):
    id: int
    op: Literal["commit"]
    changes: list[Change]


class DesktopRequest(TypedDict):
    id: int
    op: Literal["desktop"]
    steps: list[list[Any]]  # [action index, kind, ...arguments]
    settle_s: float
    size: list[int]  # [width, height]
    env: dict[str, str]


# --- results -------------------------------------------------------------------------------


class SeccompStatus(TypedDict):
    filter: Literal["installed", "off"]  # sandloop's own filter, installed by this helper (or not asked for)
    mode: int | None  # the kernel's word (/proc/self/status Seccomp:): 2 is filtering
    filters: int | None  # how many filters (Seccomp_filters:, the runtime's too); None: not reported
    arch: str


class HelloResult(TypedDict):
    protocol: int
    python: str
    pid: int
    uid: int
    gid: int
    shell: str
    kernel: str
    workspace_writable: bool
    contained: bool  # the helper owns every process it can see (a container's PID 1)
    non_dumpable: bool  # commands cannot reach the helper through /proc or ptrace
    subreaper: SubreaperHow
    socket: bool  # it reached the host's socket, and serves requests there too
    seccomp: SeccompStatus


class Capture(TypedDict):
    head: str  # base64 of the first bytes kept
    tail: str  # base64 of the last bytes kept
    total_bytes: int
    dropped_bytes: int
    dropped_lines: int


class Timing(TypedDict):
    """When a command passed each point on its way through the helper: seconds on the helper's
    monotonic clock (the host's own, unless the sandbox has a kernel of its own)."""

    received: float  # its request was read
    started: float  # the helper began to start its shell
    spawned: float  # the shell was started
    exited: float  # the shell's exit was seen (0 when it never exited: timed out)
    answered: float  # its output was collected and its result made


class RunResult(TypedDict):
    exit_code: int | None  # None when the command timed out; 128+N when signal N ended it
    signal: int | None
    timed_out: bool
    oom_killed: bool
    duration_s: float
    stdout: Capture
    stderr: Capture
    timing: Timing


class RunsResult(TypedDict):
    ran: int  # how many commands ran (each was answered by a step frame)


class CancelResult(TypedDict):
    cancelled: bool  # the target was in flight (it starts nothing more)


class ReadResult(TypedDict):
    data: str  # base64
    mode: int


class _StatExists(TypedDict):
    exists: bool


class StatResult(_StatExists, total=False):
    # present when ``exists``; never follows a final symlink
    size: int
    mode: int
    is_dir: bool
    is_symlink: bool


class CommitResult(TypedDict):
    changed: int


class DesktopFailure(TypedDict):
    index: int  # the action (its index in the host's batch) whose step failed
    message: str
    died: bool  # the X server went away under it


class DesktopTiming(TypedDict, total=False):
    input_s: float  # from the request to the last step played (a restart included)
    settle_s: float  # waiting for the screen to stop changing, the encoding included
    total_s: float
    # the last start of the desktop, step by step: Xvfb up (python3-xlib imported), the terminal
    # on screen, the window manager managing it and the terminal active
    server_s: float
    terminal_s: float
    window_manager_s: float


class DesktopResult(TypedDict):
    png: str  # base64
    width: int
    height: int
    done: int  # steps played
    failed: DesktopFailure | None
    restarted: str | None  # why the desktop was started afresh before or during this batch
    starts: int  # how many times the helper has started its X server
    timing: DesktopTiming


class ErrorBody(TypedDict):
    kind: ErrorKind
    message: str


if TYPE_CHECKING:
    Request = (HelloRequest | RunRequest | RunsRequest | CancelRequest | ReadRequest | StatRequest
               | CommitRequest | DesktopRequest)
    Result = (HelloResult | RunResult | RunsResult | CancelResult | ReadResult | StatResult
              | CommitResult | DesktopResult)


class OkReply(TypedDict):
    id: int
    ok: Literal[True]
    result: Result


class ErrorReply(TypedDict):
    id: int | None
    ok: Literal[False]
    error: ErrorBody


class StepReply(TypedDict, total=False):
    id: int
    step: int
    ok: bool
    result: RunResult  # when ok
    error: ErrorBody  # when not


if TYPE_CHECKING:
    Reply = OkReply | ErrorReply


def ok_reply(rid: int, result: Result) -> OkReply:
    return {"id": rid, "ok": True, "result": result}


def step_reply(rid: int, index: int, result: RunResult | None, error: ErrorBody | None = None) -> StepReply:
    if result is not None:
        return {"id": rid, "step": index, "ok": True, "result": result}
    assert error is not None
    return {"id": rid, "step": index, "ok": False, "error": error}


def error_reply(rid: int | None, kind: ErrorKind, message: str) -> ErrorReply:
    return {"id": rid, "ok": False, "error": {"kind": kind, "message": message}}


# --- validation ----------------------------------------------------------------------------


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, op: str, field: str, wanted: str) -> None:
    if not ok:
        raise OpError("bad_request", f"{op}: field {field!r} must be {wanted}")


def parse_request(message: object) -> Request:
    """The request ``message`` is, checked field by field; OpError("bad_request") otherwise."""
    if not isinstance(message, dict):
        raise OpError("bad_request", "a request must be a JSON object")
    rid, op = message.get("id"), message.get("op")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise OpError("bad_request", "a request needs an integer 'id'")
    if op not in OPS:
        raise OpError("bad_request", f"unknown op {op!r}")
    if op in ("run", "runs"):
        if op == "run":
            command = message.get("command")
            _check(isinstance(command, str), op, "command", "a string")
            _check("\x00" not in cast(str, command), op, "command", "free of NUL bytes")
        else:  # each command is checked as it comes up: one with a NUL is that step's error
            commands = message.get("commands")
            _check(isinstance(commands, list) and bool(commands)
                   and all(isinstance(c, str) for c in commands),
                   op, "commands", "a non-empty list of strings")
        _check(_number(message.get("timeout_s")) and message["timeout_s"] > 0, op, "timeout_s", "a number > 0")
        size = message.get("max_output_bytes")
        _check(isinstance(size, int) and not isinstance(size, bool) and size > 0, op, "max_output_bytes",
               "an integer > 0")
    elif op == "cancel":
        target = message.get("target")
        _check(isinstance(target, int) and not isinstance(target, bool), op, "target", "an integer")
    elif op in ("read", "stat"):
        _check(isinstance(message.get("path"), str), op, "path", "a string")
    elif op == "commit":
        changes = message.get("changes")
        _check(isinstance(changes, list), op, "changes", "a list")
        for change in cast("list[Any]", changes):
            _check(isinstance(change, dict), op, "changes[]", "an object")
            _check(isinstance(change.get("path"), str), op, "changes[].path", "a string")
            _check(change.get("data") is None or isinstance(change["data"], str), op, "changes[].data",
                   "base64 text or null")
            mode = change.get("mode")
            _check(mode is None or (isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= 0o7777),
                   op, "changes[].mode", "a permission mode or null")
    elif op == "desktop":
        steps, size = message.get("steps"), message.get("size")
        _check(isinstance(steps, list) and all(isinstance(s, list) and len(s) >= 2 and isinstance(s[0], int)
                                               and isinstance(s[1], str) for s in steps),
               op, "steps", "a list of [action index, kind, ...] lists")
        _check(_number(message.get("settle_s")) and message["settle_s"] >= 0, op, "settle_s", "a number >= 0")
        _check(isinstance(size, list) and len(size) == 2
               and all(isinstance(n, int) and not isinstance(n, bool) and 16 <= n <= 8192 for n in size),
               op, "size", "[width, height] in pixels")
    if op in ("run", "runs", "desktop"):
        env = message.get("env")
        _check(isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
               op, "env", "an object of strings")
        _check(all(k and "=" not in k and "\x00" not in k + v for k, v in cast("dict[str, str]", env).items()),
               op, "env", "names without '=' and values without NUL bytes")
    return cast("Request", message)


# --- framing -------------------------------------------------------------------------------


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise OpError("bad_request", f"a frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def _exact(recv: Callable[[int], bytes], n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _decode(body: bytes) -> object:
    try:
        return cast(object, json.loads(body))
    except ValueError as exc:
        raise OpError("bad_request", f"a frame that is not JSON: {exc}") from None


class FrameDecoder:
    """Frames out of a stream that arrives in pieces of any size (an event loop's reads)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[object]:
        """Every message completed by ``data``. OpError("bad_request") as :func:`read_frame`."""
        self._buf += data
        out: list[object] = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if size > MAX_FRAME:
                raise OpError("bad_request", f"a frame of {size} bytes exceeds {MAX_FRAME}")
            end = _HEADER.size + size
            if len(self._buf) < end:
                break
            body = bytes(self._buf[_HEADER.size:end])
            del self._buf[:end]
            out.append(_decode(body))
        return out


def read_frame(recv: Callable[[int], bytes]) -> object | None:
    """The next message from ``recv`` (a ``read(n)``), or None when the stream ends.

    Raises OpError("bad_request") for an oversized frame or a body that is not JSON.
    """
    header = _exact(recv, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise OpError("bad_request", f"a frame of {size} bytes exceeds {MAX_FRAME}")
    body = _exact(recv, size)
    if body is None:
        return None
    return _decode(body)
