"""The helper in-process: its wire protocol, every error kind end to end, long commands, and
how a timed-out command's process tree is ended. Container-level behaviour is in the Docker tests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import pytest_asyncio

from sandbox.bundle import helper_programs
from sandbox.helper import wire
from sandbox.helper.client import ERROR_CLASSES, HelperClient
from sandbox.helper.main import Helper
from sandloop.errors import SandboxError

# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(params=["exec", "preexec"])
def helper(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Helper]:
    """A helper whose shells become subreapers through the subreaper program, or in preexec_fn."""
    subreaper = helper_programs()[1] if request.param == "exec" else None
    if request.param == "exec" and subreaper is None:
        pytest.skip("no subreaper program for this architecture")
    h = Helper(tmp_path, kill_grace_s=0.3, subreaper=str(subreaper) if subreaper else None)
    assert h.shells.subreaper == request.param
    yield h
    h.shutdown()


def run(helper: Helper, command: str, *, timeout_s: float = 30, env: dict[str, str] | None = None) -> wire.RunResult:
    reply = helper.handle({"id": 1, "op": "run", "command": command, "timeout_s": timeout_s,
                           "max_output_bytes": 1 << 20, "env": env or {}})
    assert reply["ok"], reply
    return reply["result"]  # type: ignore[return-value]


def text(capture: wire.Capture) -> str:
    return (base64.b64decode(capture["head"]) + base64.b64decode(capture["tail"])).decode()


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def pids_of(command: str) -> list[int]:
    """Live processes on this host whose command line is ``command`` (or ends with it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    args = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if (args == command or args.endswith(" " + command)) and pid_alive(int(entry)):
                found.append(int(entry))
    return found


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = 60) -> None:
    """Poll ``condition`` until it holds (the deadline only stops a test that would hang)."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def killing(marker: str) -> Iterator[None]:
    """Whatever a test leaves running on the host with ``marker`` in its command line dies."""
    try:
        yield
    finally:
        for pid in pids_of(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- the wire ------------------------------------------------------------------------------


def test_frames_round_trip_and_refuse_what_they_cannot_carry() -> None:
    message = {"id": 7, "op": "read", "path": "é/x"}
    stream = io.BytesIO(wire.encode_frame(message))
    assert wire.read_frame(lambda n: stream.read(min(n, 3))) == message  # short reads are fine
    assert wire.read_frame(lambda n: b"") is None
    for bad in ((wire.MAX_FRAME + 1).to_bytes(4, "big"), b"\0\0\0\2{]"):
        with pytest.raises(wire.OpError) as info:
            wire.read_frame(io.BytesIO(bad).read)
        assert info.value.kind == "bad_request"


@pytest.mark.parametrize("message", [
    [], {"op": "hello"}, {"id": True, "op": "hello"}, {"id": 1, "op": "nope"},
    {"id": 1, "op": "run", "command": "x\x00y", "timeout_s": 1, "max_output_bytes": 1, "env": {}},
    {"id": 1, "op": "run", "command": "x", "timeout_s": 0, "max_output_bytes": 1, "env": {}},
    {"id": 1, "op": "run", "command": "x", "timeout_s": 1, "max_output_bytes": 1, "env": {"A": 1}},
    {"id": 1, "op": "run", "command": "x", "timeout_s": 1, "max_output_bytes": 1, "env": {"A=B": "1"}},
    {"id": 1, "op": "read"},
    {"id": 1, "op": "commit", "changes": [{"path": "a", "data": 3, "mode": None}]},
    {"id": 1, "op": "commit", "changes": [{"path": "a", "data": None, "mode": 0o10000}]},
])
def test_malformed_requests_are_bad_requests_not_bugs(helper: Helper, message: Any) -> None:
    reply = helper.handle(message)
    assert reply["ok"] is False and reply["error"]["kind"] == "bad_request", reply


# --- every error kind, end to end ----------------------------------------------------------


@pytest_asyncio.fixture
async def wired(tmp_path: Path) -> AsyncIterator[tuple[Helper, HelperClient]]:
    """A Helper serving a HelperClient over two pipes, as in a container, but in-process."""
    to_helper, to_client = os.pipe(), os.pipe()
    helper = Helper(tmp_path / "ws", max_read_bytes=8)
    (tmp_path / "ws").mkdir()
    thread = threading.Thread(target=helper.serve, args=(to_helper[0], to_client[1]), daemon=True)
    thread.start()

    def send(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(to_helper[1], view):]

    client = HelperClient(lambda n: os.read(to_client[0], n), send, name="in-process helper")
    yield helper, client
    os.close(to_helper[1])  # the helper sees the end of its input and returns
    thread.join(10)
    helper.shutdown()
    for fd in (to_helper[0], to_client[0], to_client[1]):
        with contextlib.suppress(OSError):
            os.close(fd)


def _broken(helper: Helper, client: HelperClient) -> Awaitable[object]:
    def bug(path: str) -> wire.StatResult:
        raise ZeroDivisionError("a bug")

    helper.files.stat = bug  # type: ignore[method-assign]
    return client.stat("x")


def _gone_workspace(helper: Helper, client: HelperClient) -> Awaitable[object]:
    os.rmdir(helper.workspace)  # the shell cannot even be given its working directory
    return client.run("true", timeout_s=5, max_output_bytes=100, env={})


def _too_large(helper: Helper, client: HelperClient) -> Awaitable[object]:
    Path(helper.workspace, "big").write_bytes(b"x" * 9)  # the helper reads at most 8 here
    return client.read_file("big")


#: One real way to make the helper answer with each kind. ``resources`` needs a container's pids
#: limit: tests/sandbox/test_docker_session.py::test_no_pid_left_is_resources_exhausted;
#: ``unconfined`` a helper program whose seccomp filter the kernel refuses:
#: tests/sandbox/test_seccomp.py::test_a_helper_without_its_filter_refuses_every_request.
SCENARIOS: dict[str, Callable[[Helper, HelperClient], Awaitable[object]]] = {
    "bad_request": lambda h, c: c.run("echo \x00", timeout_s=5, max_output_bytes=100, env={}),
    "path_refused": lambda h, c: c.read_file("../outside"),
    "missing": lambda h, c: c.read_file("no-such-file"),
    "too_large": _too_large,
    "spawn": _gone_workspace,
    "io": lambda h, c: c.read_file("n" * 300),  # ENAMETOOLONG: the file system refuses the name
    "internal": _broken,
}


def test_every_error_kind_has_an_exception_and_a_scenario() -> None:
    kinds = set(get_args(wire.ErrorKind))
    assert set(ERROR_CLASSES) == kinds
    assert set(SCENARIOS) | {"resources", "unconfined"} == kinds
    assert all(issubclass(cls, SandboxError) and cls is not SandboxError for cls in ERROR_CLASSES.values())


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
async def test_each_error_kind_round_trips(wired: tuple[Helper, HelperClient], kind: wire.ErrorKind) -> None:
    helper, client = wired
    with pytest.raises(SandboxError) as info:
        await SCENARIOS[kind](helper, client)
    assert type(info.value) is ERROR_CLASSES[kind]
    assert str(info.value)
    # The stream is still in step: the next request is answered normally.
    assert (await client.hello())["protocol"] == wire.PROTOCOL_VERSION


# --- long commands -------------------------------------------------------------------------

#: Scripts whose behaviour under ``bash -c`` the long-command path must reproduce exactly.
CORPUS = [
    "echo $0; echo \"$#\" \"$@\"",
    "echo a; exit 7; echo b",
    "set -e; false; echo not-here",
    "set -u; echo $undefined_variable; echo not-here",
    "cat <<EOF\nhello $0\n  indented\nEOF\n",
    "cat <<'EOF'\n$literal `not run`\nEOF",
    "echo $LINENO\n\necho $LINENO",
    "f() { return 3; }; f; echo $?",
    "return 4",
    "no_such_command_x; echo $?",
    "trap 'echo bye $?' EXIT; false",
    "echo \"$-\" \"${BASH_SOURCE[0]:-none}\" \"${FUNCNAME[0]:-none}\" \"$_\"",
    "ls /proc/self/fd | sort -n | tr '\\n' ' '",
    "exec 3>&1; echo via-fd3 >&3",
    "read x; echo \"[$x]\" $?",
    "echo partial; kill -TERM $$; echo not-here",
    "x=1 \\\n  y=2; echo $x$y",
    "echo no-newline-at-end",
]
#: Syntax errors: the same output and exit status; bash names the source ``-c`` in one case and
#: ``eval`` in the other, which is the one difference.
SYNTAX_ERRORS = ["echo before\nif\necho after", "echo before\nfi\necho after", "echo \"unterminated"]


async def test_a_request_sent_while_a_command_runs_is_answered_before_it_ends(
        wired: tuple[Helper, HelperClient]) -> None:
    # The thread serving the long command leads the stream; it hands it over when the next
    # request arrives, so neither that request nor the ones after it wait for the command.
    _, client = wired
    options = {"timeout_s": 30.0, "max_output_bytes": 1 << 16, "env": None}
    slow = asyncio.create_task(client.run("sleep 5; echo slow", **options))
    await asyncio.sleep(0.3)  # its command runs, its thread leads
    for i in range(3):  # one after another: each quick one is read by whoever leads now
        got = await asyncio.wait_for(client.run(f"echo {i}", **options), 4)
        assert got.stdout.text == f"{i}\n"
    assert not slow.done()
    assert (await asyncio.wait_for(slow, 15)).stdout.text == "slow\n"
    quick = await asyncio.gather(*[client.run(f"echo {i}", **options) for i in range(8)])  # all at once
    assert [r.stdout.text for r in quick] == [f"{i}\n" for i in range(8)]


@pytest.mark.parametrize("script", CORPUS + SYNTAX_ERRORS)
def test_a_long_command_runs_exactly_as_bash_c_would(tmp_path: Path, script: str) -> None:
    direct, via_memfd = Helper(tmp_path), Helper(tmp_path, inline_command_max=0)
    a, b = run(direct, script), run(via_memfd, script)
    assert (a["exit_code"], a["signal"], text(a["stdout"])) == (b["exit_code"], b["signal"], text(b["stdout"]))
    if script in SYNTAX_ERRORS:
        assert text(a["stderr"]).replace("-c: line", "eval: line") == text(b["stderr"]), text(b["stderr"])
        assert a["exit_code"] == 2
    else:
        assert text(a["stderr"]) == text(b["stderr"])


@pytest.mark.parametrize("megabytes", [1, 10])
def test_megabyte_commands_run(helper: Helper, megabytes: int) -> None:
    body = ("y" * 99 + "\n") * (megabytes * 10486)
    command = f"cat <<'EOF' | wc -c\n{body}EOF\necho \"$0\"; exit 3"
    assert len(command) > megabytes << 20
    r = run(helper, command, timeout_s=120)
    assert (r["exit_code"], text(r["stdout"]), text(r["stderr"])) == (3, f"{len(body)}\n/bin/bash\n", "")


# --- ending a timed-out command ------------------------------------------------------------


def test_a_timeout_spares_a_daemon_an_earlier_command_started(helper: Helper) -> None:
    with killing("sleep 1001"):
        before = set(pids_of("sleep 1001"))
        r = run(helper, "setsid sleep 1001 >/dev/null 2>&1 & echo started")
        assert text(r["stdout"]) == "started\n"
        wait_for(lambda: bool(set(pids_of("sleep 1001")) - before), "the daemon runs")
        (daemon,) = set(pids_of("sleep 1001")) - before
        assert run(helper, "sleep 60", timeout_s=0.5)["timed_out"]
        assert pid_alive(daemon)


def test_a_timeout_leaves_nothing_of_its_own_even_escapees(helper: Helper) -> None:
    with killing("sleep 1002"):
        command = "setsid sleep 1002 & (setsid sh -c 'sleep 1002 & sleep 1002 &' &); sleep 60"
        r = run(helper, command, timeout_s=1)
        assert r["timed_out"] and r["exit_code"] is None
        assert pids_of("sleep 1002") == []


def test_a_subreaper_program_that_cannot_run_here_falls_back_at_the_first_command(tmp_path: Path) -> None:
    # Not probed at start: the first command's exec of it fails, and that command still runs,
    # its shell a subreaper all the same (an escapee below it stays in its tree and is ended).
    program = tmp_path / "subreaper"
    program.write_bytes(b"not a program for any machine\n")
    program.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    h = Helper(workspace, kill_grace_s=0.3, subreaper=str(program))
    try:
        assert h.shells.subreaper == "exec"
        assert text(run(h, "echo hi")["stdout"]) == "hi\n"
        assert h.shells.subreaper == "preexec"
        with killing("sleep 1004"):
            r = run(h, "(setsid sleep 1004 &); sleep 60", timeout_s=1)
            assert r["timed_out"]
            assert pids_of("sleep 1004") == []
    finally:
        h.shutdown()


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(helper: Helper) -> None:
    with killing("sleep 1003"):
        # The shell traps TERM and goes on; a child below it ignores TERM altogether.
        script = "(trap '' TERM; exec sleep 1003) & trap 'echo got TERM' TERM; while :; do sleep 0.05; done"
        r = run(helper, script, timeout_s=1)
        assert r["timed_out"] and r["signal"] == 9
        assert text(r["stdout"]) == "got TERM\n"  # asked first, then killed
        assert pids_of("sleep 1003") == []


async def test_parallel_commands_in_process(helper: Helper) -> None:
    results = await asyncio.gather(*[asyncio.to_thread(run, helper, f"sleep 0.2; echo {i}") for i in range(6)])
    assert [text(r["stdout"]) for r in results] == [f"{i}\n" for i in range(6)]


@pytest.mark.parametrize("failure", [ValueError("read of closed file"), OSError(9, "Bad file descriptor")])
async def test_a_stream_closed_under_the_reader_ends_the_client_not_a_thread(
        failure: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    # A local helper's pipe is closed at close() while the reader may still be about to read:
    # that is the end of the stream, never an exception escaping the reader thread.
    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))

    def recv(n: int) -> bytes:
        raise failure

    client = HelperClient(recv, lambda data: None, name="closed")
    for _ in range(200):
        if not client.alive:
            break
        await asyncio.sleep(0.01)
    assert not client.alive and escaped == []
    with pytest.raises(SandboxError, match="the helper's stream broke"):
        await client.stat(".")


def test_a_commit_of_many_files_holds_one_descriptor_per_folder(tmp_path: Path) -> None:
    # Thousands of files in a few folders (a copy-back, a large patch): one descriptor per
    # folder, so a process with a low limit (256 on macOS, 1024 here) commits them all.
    import resource

    from sandbox.helper.files import Workspace

    workspace = Workspace(str(tmp_path), max_read_bytes=1 << 20)
    data = base64.b64encode(b"x\n").decode()
    changes: list[Any] = [{"path": f"d{i % 3}/f{i}.txt", "data": data, "mode": 0o644} for i in range(1500)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard))
    try:
        assert workspace.commit(changes) == {"changed": 1500}
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(os.listdir(tmp_path / "d0")) == 500 and (tmp_path / "d2" / "f1499.txt").read_text() == "x\n"


# --- several commands in one request ----------------------------------------------------------


def test_runs_answers_each_command_as_a_step_and_stops_after_a_timeout(helper: Helper) -> None:
    steps: list[wire.StepReply] = []
    reply = helper.handle({"id": 4, "op": "runs", "commands": ["echo a", "exit 3", "echo \x00", "sleep 5", "echo no"],
                           "timeout_s": 0.5, "max_output_bytes": 1 << 10, "env": {}}, steps.append)
    assert reply == {"id": 4, "ok": True, "result": {"ran": 4}}
    assert [s["step"] for s in steps] == [0, 1, 2, 3] and all(s["id"] == 4 for s in steps)
    first, second, nul, slow = steps
    assert text(first["result"]["stdout"]) == "a\n" and second["result"]["exit_code"] == 3
    assert not nul["ok"] and nul["error"]["kind"] == "bad_request"
    assert slow["result"]["timed_out"]
    timing = first["result"]["timing"]
    assert timing["received"] <= timing["started"] <= timing["spawned"] <= timing["exited"] <= timing["answered"]
    # the next command's wait is counted from the one before, not from the request
    assert second["result"]["timing"]["received"] == timing["answered"]


def test_a_cancel_stops_a_runs_request_between_commands(helper: Helper, tmp_path: Path) -> None:
    to_helper, to_client = os.pipe(), os.pipe()
    thread = threading.Thread(target=helper.serve, args=(to_helper[0], to_client[1]), daemon=True)
    thread.start()
    os.write(to_helper[1], wire.encode_frame({"id": 1, "op": "runs", "commands": ["sleep 0.5", "touch later"],
                                               "timeout_s": 5, "max_output_bytes": 100, "env": {}}))
    time.sleep(0.1)
    os.write(to_helper[1], wire.encode_frame({"id": 2, "op": "cancel", "target": 1}))
    frames = [wire.read_frame(lambda n: os.read(to_client[0], n)) for _ in range(3)]
    os.close(to_helper[1])
    thread.join(10)
    by_kind = {("step" if "step" in f else f["id"]): f for f in frames if isinstance(f, dict)}
    assert by_kind[2]["result"] == {"cancelled": True}
    assert by_kind["step"]["step"] == 0 and by_kind[1]["result"] == {"ran": 1}
    assert not (tmp_path / "later").exists()
