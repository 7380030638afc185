"""The Docker back-end against a real engine: semantics, limits, isolation, files, lifecycle."""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import pytest
import pytest_asyncio

from sandbox.docker import DockerConfig, DockerSession
from sandloop.errors import FileMissing, PathRefused, ResourcesExhausted, SandboxUnavailable

from .containers import pids_used, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def module_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws") / "repo"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


@pytest.fixture(scope="module")
def api_key_in_environment() -> Iterator[None]:
    """The host has an API key set while the sessions start (restored afterwards)."""
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "sk-test-must-not-leak"
    yield
    if saved is None:
        del os.environ["OPENAI_API_KEY"]
    else:
        os.environ["OPENAI_API_KEY"] = saved


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(docker_client: docker.DockerClient, module_workspace: Path,
                  api_key_in_environment: None) -> AsyncIterator[DockerSession]:
    s = await DockerSession.create(module_workspace, DockerConfig(memory="256m"), client=docker_client)
    yield s
    await s.close()


async def test_echo_exit_codes_and_stderr(session: DockerSession) -> None:
    r = await session.run("echo hi")
    assert (r.exit_code, r.stdout.text, r.stderr.text, r.timed_out) == (0, "hi\n", "", False)
    r = await session.run("echo oops >&2; exit 3")
    assert (r.exit_code, r.stdout.text, r.stderr.text) == (3, "", "oops\n")


async def test_cwd_and_minimal_environment(session: DockerSession) -> None:
    r = await session.run("pwd; env | sort")
    lines = r.stdout.text.splitlines()
    assert lines[0] == "/workspace"
    names = {line.split("=", 1)[0] for line in lines[1:]}
    assert "OPENAI_API_KEY" not in names
    assert "sk-test-must-not-leak" not in r.stdout.text
    assert {"PATH", "HOME", "LANG"} <= names
    r = await session.run('echo "$FOO"', env={"FOO": "bar"})
    assert r.stdout.text == "bar\n"


async def test_parallel_calls_overlap(session: DockerSession) -> None:
    cmd = "s=$(date +%s.%N); sleep 0.4; e=$(date +%s.%N); echo $s $e"
    results = await asyncio.gather(*[session.run(cmd) for _ in range(4)])
    spans = [tuple(map(float, r.stdout.text.split())) for r in results]
    # Every command started before any of them ended: they ran at the same time.
    assert max(s for s, _ in spans) < min(e for _, e in spans)


async def test_timeout_kills_the_group_and_keeps_partial_output(session: DockerSession) -> None:
    r = await session.run("echo partial; sleep 100", timeout_s=0.5)
    assert r.timed_out and r.exit_code is None
    assert r.stdout.text == "partial\n"
    ps = await session.run("ps -eo args")
    assert "sleep 100" not in ps.stdout.text


async def test_timeout_also_kills_what_escaped_the_group(session: DockerSession) -> None:
    r = await session.run("setsid sleep 301 & sleep 100", timeout_s=0.5)
    assert r.timed_out
    ps = await session.run("ps -eo args")
    assert "sleep 301" not in ps.stdout.text and "sleep 100" not in ps.stdout.text


async def test_a_timeout_spares_a_concurrent_command_that_changed_its_group(session: DockerSession) -> None:
    # coreutils timeout puts its child in a new process group, in the same session
    innocent = asyncio.create_task(session.run("timeout 20 sleep 2; echo rc=$?", timeout_s=30))
    await asyncio.sleep(0.3)
    r = await session.run("sleep 30", timeout_s=0.5)
    assert r.timed_out
    assert (await innocent).stdout.text == "rc=0\n"


async def test_escapees_that_keep_spawning_are_all_killed(session: DockerSession) -> None:
    r = await session.run("setsid sh -c 'while :; do sh -c \"sleep 302 &\"; sleep 0.01; done' & sleep 100",
                          timeout_s=1)
    assert r.timed_out
    ps = await session.run("ps -eo args")
    assert "sleep 302" not in ps.stdout.text and "while" not in ps.stdout.text


async def test_a_timeout_spares_a_daemon_an_earlier_command_started(session: DockerSession) -> None:
    r = await session.run("setsid sleep 1001 >/dev/null 2>&1 & echo started")
    assert r.stdout.text == "started\n"
    r = await session.run("sleep 60", timeout_s=0.5)
    assert r.timed_out
    ps = await session.run("ps -eo args")
    assert "sleep 1001" in ps.stdout.text.splitlines()  # the earlier command's daemon lives on
    await session.run("pkill -f 'sleep 1001'")


async def test_double_fork_escapees_of_a_timed_out_command_are_killed(session: DockerSession) -> None:
    r = await session.run("(setsid sh -c 'sleep 1002 & sleep 1002 &' &); (sleep 1002 &); sleep 60", timeout_s=1)
    assert r.timed_out
    ps = await session.run("ps -eo args")
    assert "sleep 1002" not in ps.stdout.text


async def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(session: DockerSession) -> None:
    # The shell traps TERM and goes on; a child below it ignores TERM altogether.
    script = "(trap '' TERM; exec sleep 1003) & trap 'echo got TERM' TERM; while :; do sleep 0.05; done"
    r = await asyncio.wait_for(session.run(script, timeout_s=2), 30)
    assert r.timed_out and r.exit_code is None
    assert r.stdout.text == "got TERM\n" and r.signal == 9  # asked first, then killed
    ps = await session.run("ps -eo args")
    assert "sleep 1003" not in ps.stdout.text
    assert session.restarts == 0


@pytest.mark.parametrize("megabytes", [1, 10])
async def test_megabyte_commands_run(session: DockerSession, megabytes: int) -> None:
    body = ("y" * 99 + "\n") * (megabytes * 10486)
    command = f"cat <<'EOF' | wc -c\n{body}EOF\necho \"$0\"; exit 3"
    assert len(command) > megabytes << 20
    r = await session.run(command, timeout_s=120)
    assert (r.exit_code, r.stdout.text, r.stderr.text) == (3, f"{len(body)}\n/bin/bash\n", "")


async def test_background_process_does_not_hold_the_call(session: DockerSession) -> None:
    r = await session.run("sleep 100 & echo started", timeout_s=30)
    assert not r.timed_out and r.exit_code == 0 and r.stdout.text == "started\n"
    ps = await session.run("ps -eo args")
    assert "sleep 100" in ps.stdout.text  # it lives on until the session closes
    await session.run("pkill -f 'sleep 100'")


async def test_grandchild_holding_pipes_is_drained_not_waited_on(session: DockerSession) -> None:
    r = await session.run("(sleep 30; echo late) & echo now", timeout_s=20)
    assert not r.timed_out and r.stdout.text == "now\n"
    await session.run("pkill -f 'sleep 30'")


async def test_stdin_is_dev_null(session: DockerSession) -> None:
    r = await session.run("cat; echo done", timeout_s=20)
    assert not r.timed_out and r.stdout.text == "done\n"


async def test_output_flood_is_capped_inside_with_exact_counts(session: DockerSession) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = await session.run("yes | head -c 200000000; echo tail-error >&2", max_output_bytes=65536)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = r.stdout
    assert out.total_bytes == 200_000_000
    assert out.dropped_bytes == 200_000_000 - 65536
    kept_lines = 65536 // 2  # "y\n" repeated: every kept byte pair is one line
    assert out.dropped_lines == 100_000_000 - kept_lines
    assert "bytes, " in out.text and "lines dropped" in out.text
    assert r.stderr.text == "tail-error\n"  # stderr has its own budget
    assert after - before < 50_000  # KiB: the flood never reached host memory


async def test_fork_bomb_is_contained(session: DockerSession) -> None:
    # The bomb starts in the background, so the command returns at once (started in the
    # foreground, its first shell raced its own copies for pids, and under load it lost: it sat
    # retrying fork until the timeout ended the whole tree); its copies go on until the pids
    # limit stops them. The next command finds no pid free, and the helper reclaims them.
    await session.run("bash -c ':(){ :|:& };:' >/dev/null 2>&1 &", timeout_s=3)

    def full() -> bool:
        current, limit = pids_used(session)
        return current >= limit * 0.9

    await wait_until(full, "the fork bomb fills the pids limit")
    ok = await session.run("echo alive", timeout_s=30)
    assert ok.stdout.text == "alive\n"
    count = await session.run("ps -e --no-headers | wc -l")
    assert int(count.stdout.text) < 20


async def test_memory_bomb_is_oom_killed_and_reported(session: DockerSession) -> None:
    r = await session.run("python3 -c \"x = b'x' * (600 << 20)\"", timeout_s=60)
    assert r.oom_killed and r.exit_code == 137
    assert (await session.run("echo alive")).stdout.text == "alive\n"


async def test_isolation(session: DockerSession) -> None:
    r = await session.run("ls /sys/class/net; id -u; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
    lines = r.stdout.text.split()
    assert lines[0] == "lo" and lines[1] == "1000"
    status = r.stdout.text
    assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status
    r = await session.run("touch /x")
    assert r.exit_code != 0 and "Read-only file system" in r.stderr.text
    r = await session.run("python3 -c \"import socket; socket.getaddrinfo('example.com', 80)\"")
    assert r.exit_code != 0 and "gaierror" in r.stderr.text


async def test_file_operations(session: DockerSession, module_workspace: Path) -> None:
    await session.write_file("src/new.txt", b"hello\n")
    assert (module_workspace / "src/new.txt").read_bytes() == b"hello\n"
    assert (module_workspace / "src/new.txt").stat().st_uid == 1000
    assert await session.read_file("src/new.txt") == b"hello\n"
    info = await session.stat("src/new.txt")
    assert info is not None and info.size == 6 and not info.is_symlink
    assert await session.stat("nope.txt") is None
    await session.run("chmod 755 src/new.txt")
    await session.write_file("src/new.txt", b"#!/bin/sh\n")
    assert (module_workspace / "src/new.txt").stat().st_mode & 0o777 == 0o755  # mode kept
    await session.delete_file("src/new.txt")
    assert not (module_workspace / "src/new.txt").exists()
    with pytest.raises(FileMissing):
        await session.read_file("src/new.txt")
    with pytest.raises(FileMissing):
        await session.delete_file("src/new.txt")


async def test_planted_symlinks_cannot_lead_outside(session: DockerSession, module_workspace: Path) -> None:
    await session.run("ln -sfn /etc etc-link && ln -sf /etc/passwd pw-link")
    for path in ("etc-link/passwd", "pw-link", "../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(PathRefused):
            await session.read_file(path)
    with pytest.raises(PathRefused):
        await session.write_file("etc-link/evil", b"x")
    assert not Path("/etc/evil").exists()


async def test_commit_is_all_or_nothing(session: DockerSession, module_workspace: Path) -> None:
    from sandloop.files import FileChange

    await session.write_file("keep.txt", b"original\n")
    with pytest.raises(PathRefused):
        await session.commit([
            FileChange("keep.txt", b"changed\n"),
            FileChange("fresh.txt", b"new\n"),
            FileChange("etc-link/x", b"escape\n"),
        ])
    assert (module_workspace / "keep.txt").read_bytes() == b"original\n"
    assert not (module_workspace / "fresh.txt").exists()
    leftovers = [p.name for p in module_workspace.iterdir() if p.name.startswith(".sandloop-")]
    assert leftovers == []


async def test_dead_container_is_recreated(session: DockerSession) -> None:
    assert session.container is not None
    old = session.container.id
    task = asyncio.create_task(session.run("sleep 20", timeout_s=60))
    await asyncio.sleep(0.5)
    await asyncio.to_thread(session.container.kill)
    with pytest.raises(SandboxUnavailable):
        await task
    r = await session.run("echo back")
    assert r.stdout.text == "back\n"
    assert session.container is not None and session.container.id != old
    assert session.restarts == 1 and "died" in session.notes[-1]


async def test_no_pid_left_is_resources_exhausted(docker_client: docker.DockerClient, user_workspace: Path) -> None:
    """A running command that holds every pid (nothing a reclaim may take) leaves none for the
    next: that call is answered with ResourcesExhausted, and the session survives it."""
    async with await DockerSession.create(user_workspace, DockerConfig(pids_limit=48), client=docker_client) as s:
        hog = asyncio.create_task(s.run("for i in $(seq 100); do sleep 1000 & done 2>/dev/null; wait", timeout_s=120))

        def full() -> bool:
            current, limit = pids_used(s)
            return current >= limit - 1

        await wait_until(full, "the running command holds every pid")
        with pytest.raises(ResourcesExhausted) as info:
            await s.run("echo hi")
        assert "cannot start" in str(info.value) or "pids limit" in str(info.value)
        hog.cancel()
        assert s.restarts == 0
