"""Snapshot and resume through the public API, on real Docker sessions, with the real openai
client against the strict fake server: a package installed into $HOME survives, the resumed
conversation chains on the snapshot's last response, one audit chain covers both runs, two
resumes of one snapshot are independent, and bad snapshots are one-line errors."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import docker.errors
import openai
import pytest

import executor
from executor.cli import main
from executor.snapshot import SnapshotError, load, session_factory
from executor.testing import FakeResponsesServer, ScriptedModel, message, reasoning, shell_call
from policies.audit import check
from sandbox.pool import SessionPool
from sandbox.snapshots import RUN_LABEL, list_snapshots, prune
from tests.api.scenario import make_repo, outputs

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


def fork_turn(body: dict[str, Any], history: list[Any]) -> Any:
    """A fork's turn: its task names its file, which it writes into $HOME before listing $HOME
    and using snapmod; its output is answered."""
    item = body["input"][-1]
    if item.get("role") == "user":
        mine = str(item["content"])
        return [shell_call([f"echo {mine} > ~/{mine} && sleep 1 && ls ~ && {USE}"])]
    return [message("done")]


async def test_two_resumes_of_one_snapshot_do_not_see_each_other(repo: Path, tmp_path: Path) -> None:
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
    tar = json.loads((corrupt / "snapshot" / "manifest.json").read_text())["tar"]["name"]
    (corrupt / "snapshot" / tar).write_bytes(b"cut short")
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


async def test_a_writable_root_is_committed_and_resumed_and_pruned(
        docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # a root-owned checkout runs as uid 0 (every capability dropped): it can install where root
    # owns the root file system
    root_repo = make_repo(tmp_path / "root-repo", uid=0)
    monkeypatch.setenv("SANDLOOP_TEST_SECRET", "host-secret-in-env-77aa")
    install = "mkdir -p /opt/rootpkg && echo 'rooted' > /opt/rootpkg/version && echo root-installed"
    model = ScriptedModel([[shell_call([install, INSTALL])], [message("installed")],
                           [shell_call(["cat /opt/rootpkg/version", USE])], [message("both there")]])
    with FakeResponsesServer(model) as server:
        first = await _first_run(root_repo, _policy(tmp_path, "writable_root = true\n"), server)
        manifest = json.loads((first / "snapshot" / "manifest.json").read_text())
        image = docker_client.images.get(manifest["image"])
        # labelled like the environments, and nothing of the host's in its configuration
        assert image.labels[RUN_LABEL] == first.name
        config = json.dumps(image.attrs["Config"])
        assert "sk-snapshot-secret" not in config and "host-secret-in-env" not in config
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        async with executor.open_run(root_repo, model="scripted", client=client, resume=first) as run:
            await run.task("are they there?")
        await client.close()
    assert not server.rejections, server.rejections
    found = _stdout(outputs(server.requests, "shell_call_output")[-1])
    assert "rooted" in found and "snapmod 42" in found
    # listed with the committed root's layer beside the folder's files, the image by its whole name
    listed = {snap.run_id: snap for snap in list_snapshots(client=docker_client)}[first.name]
    assert listed.layer == docker_client.api.history(manifest["image"])[0]["Size"] and listed.layer > 0
    assert main(["snapshot", "ls"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(first.name)]
    assert f"files {listed.size / 1e6:.1f} MB + root layer {listed.layer / 1e6:.1f} MB" in line, line
    assert line.endswith(f"root {manifest['image']}"), line
    # its image removed by hand: a resume says so in one line, naming the whole image
    docker_client.images.remove(manifest["image"])
    with pytest.raises(SnapshotError, match=rf"needs its root image {re.escape(manifest['image'])}, which was "
                                            r"removed \(pruned\)"):
        await executor.open_run(root_repo, model="scripted", api_key="x", resume=first)
    assert main(["snapshot", "ls"]) == 0
    assert "+ root layer gone" in capsys.readouterr().out
    # pruned: the folder and the resumed run's image go too
    removed = prune(older_than_days=None, everything=True, client=docker_client)
    assert first.name in {snap.run_id for snap in removed}
    for snap in removed:
        assert not snap.folder.exists()
        if snap.image:
            with pytest.raises(docker.errors.ImageNotFound):
                docker_client.images.get(snap.image)
    with pytest.raises(SnapshotError, match="no snapshot in"):
        await executor.open_run(root_repo, model="scripted", api_key="x", resume=first)


async def test_a_pool_is_fed_from_a_snapshot(repo: Path, tmp_path: Path) -> None:
    model = ScriptedModel([[shell_call([INSTALL])], [message("installed")]])
    with FakeResponsesServer(model) as server:
        first = await _first_run(repo, _policy(tmp_path), server)
    async with SessionPool(await session_factory(first), size=2) as pool:
        one, two = await pool.acquire(), await pool.acquire()
        assert "snapmod 42" in (await one.run(USE)).stdout.text
        assert "snapmod 42" in (await two.run(USE)).stdout.text
        await one.run("echo mine > ~/only-in-one")
        assert (await two.run("ls ~")).stdout.text.split() == []  # branches from one point, apart
        assert (await one.run("cat ~/only-in-one")).stdout.text == "mine\n"
        await pool.release(one)
        await pool.release(two)


async def test_a_stateless_run_resumes_with_its_history_and_the_drift_is_told(repo: Path, tmp_path: Path) -> None:
    model = ScriptedModel([[reasoning(["install first"]), shell_call([INSTALL])], [message("installed")],
                           [shell_call([USE])], [message("still there")]])
    with FakeResponsesServer(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        async with executor.open_run(repo, policy=_policy(tmp_path), model="scripted", client=client,
                                     stateless=True) as run:
            await run.task("install snapmod")
            first = run.folder
        (repo / "calc.py").write_text("changed on the host\n")  # the checkout moves on meanwhile
        (repo / "new.txt").write_text("new\n")
        async with executor.open_run(repo, model="scripted", client=client, resume=first) as run:
            notes = run.resume_notes
            outcome = await run.task("check")
        await client.close()
    assert not server.rejections, server.rejections  # the strict server checks the replay
    assert outcome.result.exit_code is executor.ExitCode.ANSWERED
    resumed = server.requests[2]
    assert resumed["store"] is False and "previous_response_id" not in resumed
    kinds = [item.get("type") for item in resumed["input"]]
    # the whole history: the task, the reasoning item (encrypted content kept), the call, its
    # output, the answer, then the new task
    assert kinds == [None, "reasoning", "shell_call", "shell_call_output", "message", None]
    assert resumed["input"][1]["encrypted_content"]
    assert "snapmod 42" in _stdout(outputs(server.requests, "shell_call_output")[-1])
    assert any("the checkout changed since the snapshot: 2 path(s) differ" in note for note in notes)
    assert (repo / "calc.py").read_text() == "changed on the host\n"  # never overwritten


async def test_a_snapshot_cut_short_leaves_the_one_before_whole(repo: Path, tmp_path: Path) -> None:
    async with executor.open_run(repo, policy=_policy(tmp_path), model="scripted", api_key="x") as run:
        await run.sandbox.run("echo one > ~/f")
        folder = await run.snapshot()
        (folder / "state-2.json").mkdir()  # the next snapshot's state cannot be written: it fails there
        await run.sandbox.run("echo two > ~/f")
        with pytest.raises(OSError):
            await run.snapshot()
        kept = load(run.folder)  # the first one, whole: its manifest names its own files
        assert kept.manifest["count"] == 1 and kept.tar.name == "tmp-1.tar"
        assert (folder / "tmp-2.tar").exists()  # what the cut one wrote, named by no manifest
        (folder / "state-2.json").rmdir()
        await run.snapshot()
        assert sorted(p.name for p in folder.iterdir()) == ["checkout-2.json", "manifest.json", "state-2.json",
                                                          "tmp-2.tar"]
        assert load(run.folder).manifest["count"] == 2
