"""Snapshot and resume through the public API, on real Docker sessions, with the real openai
client against the strict fake server: a package installed into $HOME survives, the resumed
conversation chains on the snapshot's last response, one audit chain covers both runs, two
resumes of one snapshot are independent, and bad snapshots are one-line errors."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest

import executor
from executor.snapshot import SnapshotError
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from policies.audit import check
from tests.api.scenario import outputs

pytestmark = pytest.mark.docker

#: a package "installed" into the user site of $HOME (/tmp/home), outside the checkout
INSTALL = ("site=$(python3 -m site --user-site) && mkdir -p \"$site/snapmod\" && "
           "echo 'VALUE = 42' > \"$site/snapmod/__init__.py\" && "
           "echo 'print(\"snapmod\", __import__(\"snapmod\").VALUE)' > \"$site/snapmod/__main__.py\" && echo installed")
USE = "python3 -m snapmod"


def _policy(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "policy.toml"
    # every command allowed: what is tested here is the snapshot, not the rules
    path.write_text('version = 1\n\n[shell]\ndefault = "allow"\n\n'
                    '[files]\nwritable = ["**"]\nread_only = []\nallow_delete = true\n\n'
                    f'[session]\nsnapshot = "on_stop"\n{extra}', encoding="utf-8")
    return path


def _stdout(output: dict[str, Any]) -> str:
    return "".join(str(entry.get("stdout", "")) for entry in output["output"])


async def _first_run(repo: Path, policy: Path, server: FakeResponsesServer) -> Path:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-snapshot-secret-1234", max_retries=0)
    async with executor.open_run(repo, policy=policy, model="scripted", client=client) as run:
        outcome = await run.task("install snapmod")
        assert outcome.result.exit_code is executor.ExitCode.ANSWERED
        folder = run.folder
    await client.close()
    return folder


async def test_a_resumed_run_has_the_package_and_continues_the_conversation(
        repo: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    model = ScriptedModel([[shell_call([INSTALL])], [message("installed")],
                           [shell_call([USE])], [message("it is there")]])
    with FakeResponsesServer(model) as server:
        first = await _first_run(repo, policy, server)
        answered = server.responses[1]["id"]
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        async with executor.open_run(repo, model="scripted", client=client, resume=first) as run:
            outcome = await run.task("is snapmod still there?")
            folder = run.folder
        await client.close()
    assert not server.rejections, server.rejections
    assert outcome.result.exit_code is executor.ExitCode.ANSWERED
    assert "installed" in _stdout(outputs(server.requests, "shell_call_output")[0])
    resumed = server.requests[2]
    # the conversation goes on from the snapshot's last response, the new task its next message
    assert resumed["previous_response_id"] == answered
    assert resumed["input"] == [{"role": "user", "content": "is snapmod still there?"}]
    assert "snapmod 42" in _stdout(outputs(server.requests, "shell_call_output")[-1])
    # one chain over both runs: the first run's records, then the resume, then the new ones
    log = folder / "audit.jsonl"
    assert check(log).problems == []
    snap = json.loads((first / "snapshot" / "manifest.json").read_text())
    assert check(log, head=snap["audit_head"]).problems == []
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert "resume" in kinds and kinds.index("resume") == int(snap["audit_head"].split(":")[1])
    # budgets go on: the resumed run's turns are counted after the first run's
    assert [t.index for t in outcome.result.turns] == [3, 4]


async def test_two_resumes_of_one_snapshot_do_not_see_each_other(repo: Path, tmp_path: Path) -> None:
    def fork_turn(body: dict[str, Any], history: list[Any]) -> Any:
        """A fork's task names its file: write it and list $HOME; its output: answer."""
        item = body["input"][-1]
        if item.get("role") == "user":
            mine = str(item["content"])
            return [shell_call([f"echo {mine} > ~/{mine} && sleep 1 && ls ~ && python3 -m snapmod"])]
        return [message("done")]

    model = ScriptedModel([[shell_call([INSTALL])], [message("installed")], *[fork_turn] * 4])
    with FakeResponsesServer(model) as server:
        first = await _first_run(repo, _policy(tmp_path), server)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)

        async def fork(name: str) -> None:
            async with executor.open_run(repo, model="scripted", client=client, resume=first) as run:
                outcome = await run.task(name)
            assert outcome.result.exit_code is executor.ExitCode.ANSWERED

        await asyncio.gather(fork("fork-a"), fork("fork-b"))  # both at once, from one snapshot
        await client.close()
    assert not server.rejections, server.rejections
    seen = {_stdout(output).split()[0]: _stdout(output) for output in outputs(server.requests, "shell_call_output")[1:]}
    assert set(seen) == {"fork-a", "fork-b"}, seen
    assert "fork-b" not in seen["fork-a"] and "snapmod 42" in seen["fork-a"]
    assert "fork-a" not in seen["fork-b"] and "snapmod 42" in seen["fork-b"]


async def test_bad_snapshots_are_one_line_errors(repo: Path, tmp_path: Path) -> None:
    model = ScriptedModel([[message("nothing to do")]])
    with FakeResponsesServer(model) as server:
        first = await _first_run(repo, _policy(tmp_path), server)
    snap = first / "snapshot"

    async def resume(folder: Path) -> str:
        with pytest.raises(SnapshotError) as caught:
            await executor.open_run(repo, model="scripted", api_key="x", resume=folder)
        text = str(caught.value)
        assert "\n" not in text
        return text

    missing = tmp_path / "missing-run"
    missing.mkdir()
    assert "no snapshot in" in await resume(missing)
    other = tmp_path / "other-format"
    shutil.copytree(first, other)
    manifest = json.loads((other / "snapshot" / "manifest.json").read_text())
    (other / "snapshot" / "manifest.json").write_text(json.dumps({**manifest, "format": 99, "sandloop": "9.0"}))
    assert "has format 99 (written by sandloop 9.0)" in await resume(other)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(first, corrupt)
    (corrupt / "snapshot" / "tmp.tar").write_bytes(b"cut short")
    assert "is corrupt" in await resume(corrupt)
    (corrupt / "snapshot" / "manifest.json").write_text("{not json")
    assert "is corrupt" in await resume(corrupt)
    # the policy file changed: refused, with the difference on the exception
    policy = tmp_path / "policy.toml"
    policy.write_text(policy.read_text() + "\n[budget]\nmax_turns = 7\n")
    with pytest.raises(executor.snapshot.PolicyChanged) as changed:  # type: ignore[attr-defined]
        await executor.open_run(repo, model="scripted", api_key="x", resume=first)
    assert "--policy-changed-ok" in str(changed.value) and "+max_turns = 7" in changed.value.difference
    assert snap.is_dir()  # nothing of the snapshot was touched
