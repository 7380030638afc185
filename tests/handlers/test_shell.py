"""shell_call / local_shell_call handlers: the pure output builder, and real runs in a container."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from openai.types.responses import ResponseFunctionShellToolCall
from openai.types.responses.response_input_item_param import LocalShellCallOutput, ShellCallOutput
from pydantic import TypeAdapter

from executor.handlers.local_shell import LocalShellCallKind, handle_local_shell_call, local_shell_command
from executor.handlers.shell import (
    EXIT_DENIED,
    Step,
    effective_timeout_ms,
    handle_shell_call,
    shell_call_output,
    truncate_middle,
)
from executor.toolbox import Toolbox
from sandbox.docker import DockerSession
from sandloop.limits import Limits
from sandloop.verdict import Decision, Verdict


class DenyWordGate:
    """A policy seam for these tests: denies any command containing a given word."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.asked: list[str] = []
        self.outcomes: list[tuple[str, str, dict[str, object]]] = []

    async def shell(self, command: str, *, call_id: str) -> Verdict:
        self.asked.append(command)
        if self.word in command:
            return Verdict(Decision.DENY, f"{self.word} is not allowed here", "no-" + self.word, "test:1")
        return Verdict(Decision.ALLOW, "ok")

    def shell_asks(self, command: str) -> bool:
        return False

    async def patch(self, path, kind, *, call_id):  # type: ignore[no-untyped-def]
        raise AssertionError("not used")

    url = function = mcp = patch

    async def outcome(self, action: str, subject: str, **fields: object) -> None:
        self.outcomes.append((action, subject, fields))


def _call(commands: list[str], **action: object) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall.model_validate({
        "type": "shell_call", "id": "sh_1", "call_id": "call_1", "status": "completed",
        "action": {"commands": commands, **action}, "environment": {"type": "local"},
    })


def test_output_shape_validates_against_the_sdk() -> None:
    caller = {"type": "program", "caller_id": "prog_1"}
    out = shell_call_output("call_1", [Step("x" * 100, "err", 0), Step("", "", None)],
                            max_output_length=50, caller=caller)
    TypeAdapter(ShellCallOutput).validate_python(out)
    assert out["max_output_length"] == 50 and out["caller"] == caller
    assert "status" not in out and "id" not in out
    first, second = out["output"]
    assert len(first["stdout"]) + len(first["stderr"]) <= 50 and first["stderr"] == "err"
    assert second["outcome"] == {"type": "timeout"}


def test_truncate_middle_keeps_head_and_tail() -> None:
    text = "HEAD" + "." * 1000 + "TAIL"
    cut = truncate_middle(text, 100)
    assert len(cut) == 100 and cut.startswith("HEAD") and cut.endswith("TAIL") and "chars dropped" in cut
    assert truncate_middle("short", 100) == "short"


def test_negative_max_output_length_means_nothing_not_everything() -> None:
    out = shell_call_output("call_1", [Step("x" * 100, "y" * 100, 0)], max_output_length=-5)
    assert out["output"][0]["stdout"] == "" and out["output"][0]["stderr"] == ""


def test_local_shell_env_is_part_of_the_command_the_policy_sees() -> None:
    action = {"command": ["ls"], "env": {"BASH_ENV": "/workspace/evil.sh", "A B": "dropped"}}
    assert local_shell_command(action, "/workspace") == "BASH_ENV=/workspace/evil.sh ls"


async def test_local_shell_dangerous_env_is_decided_by_the_default_policy() -> None:
    from policies.engine import load_policy

    action = {"command": ["ls"], "env": {"BASH_ENV": "/workspace/evil.sh"}}
    verdict = load_policy("default").shell(local_shell_command(action, "/workspace"))
    assert verdict.decision is not Decision.ALLOW


def test_timeouts_default_and_cap() -> None:
    limits = Limits(default_timeout_s=120, max_timeout_s=10)
    assert effective_timeout_ms(None, limits) == 10_000
    assert effective_timeout_ms(500, limits) == 500
    assert effective_timeout_ms(10**9, limits) == 10_000


def test_local_shell_command_quotes_argv_and_stays_in_workspace() -> None:
    assert local_shell_command({"command": ["echo", "a b", "$HOME"]}, "/workspace") == "echo 'a b' '$HOME'"
    in_src = local_shell_command({"command": ["ls"], "working_directory": "src"}, "/workspace")
    assert in_src == "cd /workspace/src && ls"
    assert local_shell_command({"command": ["ls"], "working_directory": "/etc"}, "/workspace") == "ls"


@pytest.mark.docker
async def test_three_commands_in_order_with_one_denied(docker_client, user_workspace: Path) -> None:
    gate = DenyWordGate("push")
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        out = await handle_shell_call(
            _call(["echo one", "git push origin main", "echo three >&2; exit 4"], timeout_ms=5000), session, gate
        )
        TypeAdapter(ShellCallOutput).validate_python(out)
        one, denied, three = out["output"]
        assert one == {"stdout": "one\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
        assert denied["outcome"] == {"type": "exit", "exit_code": EXIT_DENIED}
        assert "push is not allowed here" in denied["stderr"] and "no-push" in denied["stderr"]
        assert three == {"stdout": "", "stderr": "three\n", "outcome": {"type": "exit", "exit_code": 4}}
        assert gate.asked == ["echo one", "git push origin main", "echo three >&2; exit 4"]
        # what each command that ran came to, for the audit log beside the decisions
        assert [(a, s, f["exit_code"], f["ok"]) for a, s, f in gate.outcomes] == [
            ("shell", "echo one", 0, True), ("shell", "echo three >&2; exit 4", 4, False)]
        assert all(f["duration_s"] > 0 and f["call_id"] == "call_1" for _, _, f in gate.outcomes)

        # A timeout answers with the partial output and skips the rest of the call.
        out = await handle_shell_call(_call(["echo part; sleep 30", "echo never"], timeout_ms=500), session, gate)
        timed, skipped = out["output"]
        assert timed["outcome"] == {"type": "timeout"} and timed["stdout"] == "part\n"
        assert "timed out after 500 ms" in timed["stderr"]
        assert "skipped" in skipped["stderr"] and "never" not in skipped["stdout"]


@pytest.mark.docker
async def test_dead_backend_is_an_answer_not_an_exception(docker_client, user_workspace: Path) -> None:
    gate = DenyWordGate("nothing-denied")
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        assert session.container is not None
        container = session.container
        task = asyncio.create_task(handle_shell_call(_call(["sleep 20", "echo b"]), session, gate))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(container.kill)
        first, second = (await task)["output"]
        # The first command dies with its container; the second runs in a fresh one, and the
        # model is told so (once: nothing it did in the container's own file system is there).
        assert first["outcome"]["exit_code"] == 125 and "sandbox unavailable" in first["stderr"]
        assert second["stdout"] == "b\n" and second["outcome"] == {"type": "exit", "exit_code": 0}
        assert second["stderr"].startswith("[sandloop] sandbox container died (")
        assert second["stderr"].endswith("; started a new one\n")
        # A container that died between calls is replaced before the next command runs.
        assert session.container is not None
        runner = await session._client()
        await asyncio.to_thread(session.container.kill)
        for _ in range(100):  # until the stream's end reaches the reader thread
            if not runner.alive:
                break
            await asyncio.sleep(0.05)
        out = await handle_shell_call(_call(["echo c", "echo d"]), session, gate)
        c, d = out["output"]
        assert c["stdout"] == "c\n" and "[sandloop] sandbox container died" in c["stderr"]
        assert d["stderr"] == ""  # told once


@pytest.mark.docker
async def test_local_shell_call_round_trip(docker_client, user_workspace: Path) -> None:
    (user_workspace / "src").mkdir()
    gate = DenyWordGate("nothing-denied")
    item = {
        "type": "local_shell_call", "id": "lsh_1", "call_id": "call_9", "status": "completed",
        "action": {"type": "exec", "command": ["bash", "-lc", "pwd; echo $GREETING"], "env": {"GREETING": "hi"},
                   "timeout_ms": 5000, "working_directory": "src", "user": None},
    }
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        kind = LocalShellCallKind(Toolbox(session=session, gate=gate))
        out = await handle_local_shell_call(kind.parse(item), session, gate)
        TypeAdapter(LocalShellCallOutput).validate_python(out)
        assert out["id"] == "call_9"
        body = json.loads(out["output"])
        assert body["stdout"] == "/workspace/src\nhi\n" and body["exit_code"] == 0
        # the legacy shape with only ``id`` is accepted, and the id field is one switch
        legacy = {k: v for k, v in item.items() if k != "call_id"}
        out = await handle_local_shell_call(kind.parse(legacy), session, gate, id_field="call_id")
        assert out["call_id"] == "lsh_1"


class AskingGate(DenyWordGate):
    """Allows everything, but would ask a person about commands with "ask" in them: when it is
    asked, it notes whether the command before has already run (its file exists)."""

    def __init__(self, workspace: Path) -> None:
        super().__init__("nothing-denied")
        self.workspace = workspace
        self.seen_before_asking: list[bool] = []

    def shell_asks(self, command: str) -> bool:
        return "ask" in command

    async def shell(self, command: str, *, call_id: str) -> Verdict:
        if "ask" in command:
            self.seen_before_asking.append((self.workspace / "first").exists())
        return await super().shell(command, call_id=call_id)


@pytest.mark.docker
async def test_commands_before_one_a_person_decides_have_run_first(docker_client, user_workspace: Path) -> None:
    gate = AskingGate(user_workspace)
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        out = await handle_shell_call(_call(["touch first", "echo ask", "echo after"]), session, gate)
        assert [o["stdout"] for o in out["output"]] == ["", "ask\n", "after\n"]
        assert gate.seen_before_asking == [True]


@pytest.mark.docker
async def test_a_call_of_many_commands_answers_each_on_its_own(docker_client, user_workspace: Path) -> None:
    gate = DenyWordGate("push")
    commands = [f"echo {i}; exit {i % 3}" for i in range(60)]
    commands[10] = "echo bad \x00 byte"  # refused by the helper: that command alone
    commands[20] = "git push"  # refused by the gate
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        out = await handle_shell_call(_call(commands, timeout_ms=10_000), session, gate)
    entries = out["output"]
    assert len(entries) == 60
    for i, entry in enumerate(entries):
        if i == 10:
            assert entry["outcome"]["exit_code"] == 125 and "NUL" in entry["stderr"]
        elif i == 20:
            assert entry["outcome"]["exit_code"] == EXIT_DENIED
        else:
            assert entry == {"stdout": f"{i}\n", "stderr": "", "outcome": {"type": "exit", "exit_code": i % 3}}
    assert len(gate.outcomes) == 58


@pytest.mark.docker
async def test_a_cancelled_call_starts_no_further_command(docker_client, user_workspace: Path) -> None:
    gate = DenyWordGate("nothing-denied")
    async with await DockerSession.create(user_workspace, client=docker_client) as session:
        task = asyncio.create_task(handle_shell_call(_call(["sleep 1", "touch later"]), session, gate))
        await asyncio.sleep(0.4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(2)
        assert not (user_workspace / "later").exists()
        assert (await session.run("echo still")).stdout.text == "still\n"
