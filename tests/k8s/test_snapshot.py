"""Snapshot and resume on the Kubernetes back-end (the fake API server, pods backed by Docker),
through the public API with the real openai client against the strict fake Responses server:
the pod's $HOME comes home as a tar in the run folder, a resumed run's pod gets it back before
its first command, the conversation chains on, two resumes are independent, and a writable root
is refused in one line (a pod's root cannot be committed from here)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import openai
import pytest

import executor
from executor.testing import FakeResponsesServer, ScriptedModel, message, shell_call
from policies.audit import check
from sandbox.kubernetes.options import KubernetesOptions
from sandloop.errors import SandboxError
from tests.api.scenario import outputs
from tests.api.test_snapshot_api import INSTALL, _stdout, fork_turn
from tests.api.test_snapshot_cli import SANDLOOP, _env, _sandloop
from tests.k8s.conftest import policy_file
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker]

POLICY = """\
version = 1
[shell]
default = "allow"
[files]
writable = ["**"]
read_only = []
allow_delete = true
[session]
snapshot = "on_stop"
"""


async def test_a_pod_session_resumes_with_its_home(tmp_path: Path, user_workspace: Path,
                                                   fake: FakeKubernetes | None, options: KubernetesOptions) -> None:
    policy = policy_file(tmp_path, POLICY, options)
    (user_workspace / "a.txt").write_text("one\n")

    model = ScriptedModel([[shell_call([INSTALL])], [message("installed")], *[fork_turn] * 4])
    with FakeResponsesServer(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        async with executor.open_run(user_workspace, policy=policy, model="scripted", client=client) as run:
            await run.task("install snapmod")
            first = run.folder
        tar = json.loads((first / "snapshot" / "manifest.json").read_text())["tar"]
        assert (first / "snapshot" / tar["name"]).stat().st_size == tar["bytes"] > 0
        assert not (user_workspace / ".sandloop-snapshot.tar").exists()  # it never comes home
        folders = []

        async def fork(name: str) -> None:
            async with executor.open_run(user_workspace, model="scripted", client=client, resume=first) as run:
                outcome = await run.task(name)
                folders.append(run.folder)
            assert outcome.result.exit_code is executor.ExitCode.ANSWERED

        await asyncio.gather(fork("fork-a"), fork("fork-b"))
        await client.close()
    assert not server.rejections, server.rejections
    assert "installed" in _stdout(outputs(server.requests, "shell_call_output")[0])
    answered = server.responses[1]["id"]
    assert {body.get("previous_response_id") for body in server.requests[2:4]} == {answered}
    seen = {_stdout(o).split()[0]: _stdout(o) for o in outputs(server.requests, "shell_call_output")[1:]}
    assert set(seen) == {"fork-a", "fork-b"}, seen
    assert "fork-b" not in seen["fork-a"] and "snapmod 42" in seen["fork-a"]
    assert "fork-a" not in seen["fork-b"] and "snapmod 42" in seen["fork-b"]
    for folder in folders:
        assert check(folder / "audit.jsonl").problems == []
    assert sorted(p.name for p in user_workspace.iterdir()) == ["a.txt"]  # the checkout is the host's


async def test_a_writable_root_is_refused_on_kubernetes(tmp_path: Path, user_workspace: Path,
                                                        fake: FakeKubernetes | None,
                                                        options: KubernetesOptions) -> None:
    policy = policy_file(tmp_path, POLICY + "writable_root = true\n", options)
    async with executor.open_run(user_workspace, policy=policy, model="scripted", api_key="x") as run:
        with pytest.raises(SandboxError, match="root file system cannot be committed") as caught:
            await run.snapshot()
    assert "\n" not in str(caught.value)


def test_a_snapshot_the_run_cannot_take_is_one_line(tmp_path: Path, user_workspace: Path,
                                                    fake: FakeKubernetes | None, options: KubernetesOptions) -> None:
    """`sandloop snapshot RUN` on a pod session whose policy asks for a writable root: the
    running front-end refuses, and the command says why at once instead of waiting."""
    arrived, release = threading.Event(), threading.Event()

    def thinking(body: dict[str, Any], history: list[Any]) -> Any:
        arrived.set()
        release.wait(120)
        return [message("never read")]

    policy = policy_file(tmp_path, POLICY + "writable_root = true\n", options)
    env = {**_env(tmp_path / "state"), "KUBECONFIG": options.kubeconfig or ""}
    with FakeResponsesServer(ScriptedModel([[shell_call(["true"])], thinking])) as server:
        front = subprocess.Popen([SANDLOOP, "run", "work", "--repo", str(user_workspace), "--policy", str(policy),
                                  "--base-url", server.base_url, "--model", "scripted"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert arrived.wait(120), "no second request"
            (run,) = list((tmp_path / "state" / "sandloop" / "runs").iterdir())
            took = _sandloop("snapshot", run.name, "--timeout", "100", env=env)
        finally:
            release.set()
            front.send_signal(signal.SIGINT)
            front.wait(120)
    assert took.returncode == 1
    assert "could not take the snapshot" in took.stderr and "root file system cannot be committed" in took.stderr
    assert len(took.stderr.strip().splitlines()) == 1
