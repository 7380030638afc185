"""The whole loop on the Kubernetes back-end, through the real command line: the real openai
client against the strict fake Responses server, the real kubernetes client against the fake API
server, the helper in a Docker-backed pod. Shell calls, patches, a policy refusal, a timeout and
a pod killed mid-call, and the changes copied back to the checkout at the end."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from executor.cli import main
from executor.testing import FakeResponsesServer, ScriptedModel, apply_patch_call, message, shell_call, update_file
from sandbox.kubernetes.options import KubernetesOptions
from tests.k8s.conftest import policy_file
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker, pytest.mark.fake_only]

POLICY = """\
version = 1
unattended = true
[shell]
default = "allow"
[[shell.rules]]
id = "no-rm"
pattern = ["rm"]
decision = "deny"
justification = "nothing is deleted in this task"
[files]
writable = ["**"]
"""


def _killer(fake: FakeKubernetes, marker: str, done: threading.Event) -> threading.Thread:
    """Kills the session pod's container once a command containing ``marker`` runs in it."""

    def watch() -> None:
        while not done.is_set():
            for pod in fake.store.list("pods", fake.namespace, [("sandloop.role", "sandbox")]):
                cid = fake.container(pod["metadata"]["name"])
                if cid is None:
                    continue
                try:
                    table = fake.client.api.top(cid)
                except Exception:
                    continue
                if any(marker in " ".join(row) for row in table.get("Processes") or []):
                    fake.kill_pod(pod["metadata"]["name"])
                    done.set()
                    return
            done.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _outputs(result: dict[str, Any], turn: int) -> list[Any]:
    return [call["output"] for call in result["turns"][turn]["calls"]]


def test_the_whole_loop_on_kubernetes(tmp_path: Path, user_workspace: Path, fake: FakeKubernetes,
                                      options: KubernetesOptions, capsys: pytest.CaptureFixture[str]) -> None:
    (user_workspace / "a.txt").write_text("one\n")
    (user_workspace / ".git").mkdir()
    (user_workspace / ".git" / "config").write_text("[core]\n")
    policy = policy_file(tmp_path, POLICY, options)
    model = ScriptedModel([
        [shell_call(["echo first; sleep 61"])],  # the pod is killed under this one
        [shell_call(["cat a.txt", "hostname"])],
        [apply_patch_call(update_file("a.txt", "-one\n+two\n")),
         apply_patch_call(update_file(".git/config", "-[core]\n+[core]\n\thooksPath = /tmp\n"))],
        [shell_call(["rm a.txt"])],
        [shell_call(["echo before; sleep 30"], timeout_ms=700)],
        [shell_call(["cat a.txt; echo made > new.txt"])],
        [message("done on kubernetes")],
    ])
    done = threading.Event()
    killer = _killer(fake, "sleep 61", done)
    try:
        with FakeResponsesServer(model) as server:
            code = main(["run", "the task", "--repo", str(user_workspace), "--base-url", server.base_url,
                         "--policy", str(policy), "--log", str(tmp_path / "run" / "requests.jsonl"), "--json"])
    finally:
        done.set()
        killer.join(10)
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert result["final_text"] == "done on kubernetes"
    (killed,) = _outputs(result, 0)
    assert killed["output"][0]["stderr"].startswith("sandbox unavailable"), killed
    (shell,) = _outputs(result, 1)
    first, name = shell["output"]
    assert first["stdout"] == "one\n"  # the replacement pod has the checkout
    # ... and the model is told, once, that its sandbox was replaced and what that lost
    assert "[sandloop] sandbox pod died" in first["stderr"]
    assert "the attach ended: " in first["stderr"]  # the server's last Status, as it said it
    assert "changes since the last copy-back are lost" in first["stderr"]
    assert "[sandloop]" not in name["stderr"]
    assert name["stdout"].startswith("sandloop-")  # a pod of this session (its hostname)
    patched, refused_patch = _outputs(result, 2)
    assert patched["status"] == "completed" and refused_patch["status"] == "failed"
    (refused,) = _outputs(result, 3)
    assert "nothing is deleted in this task" in json.dumps(refused)
    (timed_out,) = _outputs(result, 4)
    chunk = timed_out["output"][0]
    assert chunk["outcome"] == {"type": "timeout"} and chunk["stdout"] == "before\n"
    (last,) = _outputs(result, 5)
    assert last["output"][0]["stdout"] == "two\n"
    # Copied back at the end: the patch and the command's file; .git is the host's.
    assert (user_workspace / "a.txt").read_text() == "two\n"
    assert (user_workspace / "new.txt").read_text() == "made\n"
    assert (user_workspace / ".git" / "config").read_text() == "[core]\n"
    assert fake.store.list("pods", fake.namespace, []) == []  # nothing left in the namespace
    assert fake.store.list("networkpolicies", fake.namespace, []) == []


def test_backend_flag_picks_kubernetes(tmp_path: Path, user_workspace: Path, fake: FakeKubernetes,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The client's usual way to a cluster, with the list kubectl merges: the context is in the second.
    other = tmp_path / "other-kubeconfig"
    other.write_text("apiVersion: v1\nkind: Config\npreferences: {}\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", f"{other}:{fake.kubeconfig()}")
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\nunattended = true\n[shell]\ndefault = "allow"\n')
    model = ScriptedModel([[shell_call(["hostname"])], [message("ok")]])
    with FakeResponsesServer(model) as server:
        code = main(["run", "t", "--repo", str(user_workspace), "--base-url", server.base_url, "--policy",
                     str(policy), "--backend", "kubernetes", "--log", str(tmp_path / "r" / "requests.jsonl"),
                     "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (call,) = _outputs(json.loads(out.out), 0)
    assert call["output"][0]["stdout"].startswith("sandloop-")
    assert any(path.endswith("/attach?container=helper&stderr=true&stdin=true&stdout=true&tty=false")
               for _, path in fake.requests)


def test_bad_backend_options_are_a_usage_error(tmp_path: Path, user_workspace: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[backend]\ntype = "kubernetes"\n[backend.kubernetes]\nnamespace = 5\n')
    code = main(["run", "t", "--repo", str(user_workspace), "--base-url", "http://127.0.0.1:9/v1", "--policy",
                 str(policy), "--log", str(tmp_path / "r" / "requests.jsonl")])
    assert code == 2
    err = capsys.readouterr().err
    assert "policy.toml:5: backend.kubernetes.namespace" in " ".join(err.split())


def test_an_environment_this_host_must_prepare_is_refused_on_kubernetes(
        tmp_path: Path, user_workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Setup, packages, a Dockerfile and the host's CA are this host's engine's work; a pod starts
    # from a pushed image. Refused before any pod or model request, naming the line and the way.
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[backend]\ntype = "kubernetes"\n[environment]\nimage = "python:3.12"\n'
                      'setup = ["pip install -e ."]\n')
    code = main(["run", "t", "--repo", str(user_workspace), "--base-url", "http://127.0.0.1:9/v1", "--policy",
                 str(policy), "--log", str(tmp_path / "r" / "requests.jsonl")])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "policy.toml:6: [environment] setup" in err
    assert "sandloop env build" in err and "[backend.kubernetes] image" in err


@pytest.mark.parametrize(("section", "flag", "image"), [
    ('[environment]\nimage = "python:3.12"', None, "python:3.12"),
    ('[environment]\nimage = "python:3.12"', "registry.test/env:1", "registry.test/env:1"),
    ('[environment]\ndockerfile = "Dockerfile"', "registry.test/env:1", "registry.test/env:1"),  # --image replaces it
    # a pushed environment: the option names it, and the section's setup is taken as done
    ('[environment]\nimage = "python:3.12"\nsetup = ["pip install -e ."]\n'
     '[backend.kubernetes]\nimage = "registry.test/env:2"', None, "registry.test/env:2"),
    ('[backend.kubernetes]\nimage = "registry.test/env:2"', "registry.test/env:3", "registry.test/env:3"),  # flag wins
    ("", None, None),  # sandloop's shell image
])
def test_kubernetes_sessions_start_from_the_environment_image(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              section: str, flag: str | None,
                                                              image: str | None) -> None:
    from executor.environment import remote_config
    from policies.engine import load_policy
    from sandbox import backends, images
    from sandbox.kubernetes.manifest import pod_image

    policy = tmp_path / "policy.toml"
    policy.write_text(f"version = 1\n{section}\n")
    loaded = load_policy(policy).loaded
    options = backends.validate_options("kubernetes", KubernetesOptions, loaded.policy.backend.options("kubernetes"))
    expected = image or images.image_name("shell")
    assert pod_image(remote_config(loaded, "kubernetes", image=flag), options) == expected
    # what `sandloop k8s manifest` shows is what the run starts
    argv = ["k8s", "manifest", "--policy", str(policy), "--json", *(["--image", flag] if flag else [])]
    assert main(argv) == 0
    (pod,) = [o for o in json.loads(capsys.readouterr().out)["items"] if o["kind"] == "Pod"]
    assert pod["spec"]["containers"][0]["image"] == expected
