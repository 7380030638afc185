"""``sandloop k8s manifest --json``: every object a session creates, checked field by field
against the container's hardening — and the options' errors name the policy file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from executor.cli import main
from sandbox.kubernetes import loader, untar
from sandbox.kubernetes.manifest import memory_quantity
from sandloop.errors import ConfigError


def _manifest(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert main(["k8s", "manifest", "--json", *args]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kind"] == "List" and listing["apiVersion"] == "v1"
    items: list[dict[str, Any]] = listing["items"]
    return items


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.toml"
    path.write_text("version = 1\n" + text)
    return str(path)


def _pod(items: list[dict[str, Any]], role: str = "sandbox") -> dict[str, Any]:
    (pod,) = [i for i in items if i["kind"] == "Pod" and i["metadata"]["labels"]["sandloop.role"] == role]
    return pod


def test_session_pod_has_the_containers_hardening(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = _write(tmp_path, '[shell.resources]\nmemory = "3g"\ncpus = 1.5\n'
                              '[backend.kubernetes]\nnamespace = "agents"\nrun_as_user = 4242\n')
    items = _manifest(capsys, "--policy", policy)
    assert [i["kind"] for i in items] == ["NetworkPolicy", "Pod"]  # the policy first: never a window
    pod = _pod(items)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == "agents"
    labels = meta["labels"]
    assert {"sandloop.session", "sandloop.owner_pid", "sandloop.owner_host", "sandloop.expires"} <= set(labels)
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 24 * 3600
    assert "runtimeClassName" not in spec and "hostNetwork" not in spec and "hostPID" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 4242 and sc["runAsUser"] != 0
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"] == {"cpu": "1500m", "memory": "3Gi"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert "env" not in container and "envFrom" not in container  # nothing from the host
    assert container["stdin"] and container["stdinOnce"] and not container["tty"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/tmp"]]["emptyDir"]["medium"] == "Memory"
    assert set(volumes[mounts["/workspace"]]) == {"name", "emptyDir"}  # no hostPath, ever
    # The helper's code is pinned: the loader runs only the program with this sha256.
    assert container["command"][:4] == ["python3", "-I", "-c", loader.LOADER]
    assert meta["annotations"]["sandloop.io/helper-sha256"] == container["command"][4]
    # The deny-all policy selects exactly this pod and allows nothing.
    (deny,) = [i for i in items if i["kind"] == "NetworkPolicy"]
    selector = deny["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert deny["spec"]["egress"] == [] and deny["spec"]["ingress"] == []


def test_read_only_paths_are_read_only_volumes_written_by_an_init_container(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for rel in (".git/hooks", "vendor/dep/.git", "docs"):
        (repo / rel).mkdir(parents=True)
    (repo / "lib").mkdir()
    (repo / "lib" / ".git").write_text("gitdir: elsewhere\n")
    policy = _write(tmp_path, 'extends = ["default"]\n[files]\nread_only = ["docs/**"]\n')
    spec = _pod(_manifest(capsys, "--policy", policy, "--repo", str(repo)))["spec"]
    (init,) = spec["initContainers"]
    (container,) = spec["containers"]
    assert init["name"] == "copy-in" and init["image"] == container["image"]
    for key in ("securityContext", "resources", "stdin", "stdinOnce", "tty"):
        assert init[key] == container[key], key  # hardened as the helper's container is
    assert init["command"] == ["python3", "-I", "-c", untar.UNTAR]  # all it runs, for the auditor to read
    assert init["workingDir"] == "/copy-in"
    assert init["volumeMounts"] == [{"name": "workspace", "mountPath": "/copy-in"}]  # the whole volume, writable
    assert container["volumeMounts"] == [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "workspace", "mountPath": "/workspace", "subPath": "checkout"},
        {"name": "workspace", "mountPath": "/workspace/.git", "subPath": "read-only/0", "readOnly": True},
        {"name": "workspace", "mountPath": "/workspace/docs", "subPath": "read-only/1", "readOnly": True},
        {"name": "workspace", "mountPath": "/workspace/lib/.git", "subPath": "read-only/2", "readOnly": True},
        {"name": "workspace", "mountPath": "/workspace/vendor/dep/.git", "subPath": "read-only/3", "readOnly": True},
    ]
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "workspace"]  # emptyDirs only, still
    # A checkout with nothing read-only: one container, the whole volume at /workspace.
    bare = tmp_path / "bare"
    bare.mkdir()
    spec = _pod(_manifest(capsys, "--policy", policy, "--repo", str(bare)))["spec"]
    assert "initContainers" not in spec
    assert spec["containers"][0]["volumeMounts"][1] == {"name": "workspace", "mountPath": "/workspace"}


def test_gvisor_and_the_allow_list_proxy(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = _write(tmp_path, '[shell]\nruntime = "runsc"\nnetwork = ["pypi.org", "*.example.com:443"]\n')
    items = _manifest(capsys, "--policy", policy)
    assert [i["kind"] for i in items] == ["NetworkPolicy"] * 3 + ["Pod", "Pod"]
    pod, proxy = _pod(items), _pod(items, "egress-proxy")
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    # The session pod may reach its proxy and nothing else; only it may reach the proxy.
    deny, allow, ingress = items[:3]
    assert deny["spec"]["egress"] == []
    (rule,) = allow["spec"]["egress"]
    (peer,) = rule["to"]
    assert peer["podSelector"]["matchLabels"].items() <= proxy["metadata"]["labels"].items()
    assert peer["podSelector"]["matchLabels"]["sandloop.role"] == "egress-proxy"
    assert rule["ports"] == [{"protocol": "TCP", "port": 3128}]
    assert ingress["spec"]["podSelector"]["matchLabels"]["sandloop.role"] == "egress-proxy"
    assert ingress["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["sandloop.role"] == "sandbox"
    command = proxy["spec"]["containers"][0]["command"]
    assert command[command.index("--allow") + 1] == "pypi.org" and "*.example.com:443" in command
    psc = proxy["spec"]["containers"][0]["securityContext"]
    assert psc["runAsUser"] == 65534 and psc["capabilities"] == {"drop": ["ALL"]}
    assert psc["readOnlyRootFilesystem"] is True and psc["allowPrivilegeEscalation"] is False


def test_yaml_and_the_warm_pool_objects(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["k8s", "manifest", "--warm-pool", "agents", "--replicas", "3"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    deny, template, pool = docs
    assert deny["spec"]["egress"] == [] and deny["spec"]["podSelector"]["matchLabels"]["sandloop.role"] == "sandbox"
    assert template["kind"] == "SandboxTemplate" and template["spec"]["networkPolicyManagement"] == "Unmanaged"
    pod_spec = template["spec"]["podTemplate"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["containers"][0]["command"][3] == loader.LOADER  # YAML keeps the code as written
    assert pool == {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                    "metadata": {"name": "agents", "namespace": "default",
                                 "labels": {"app.kubernetes.io/managed-by": "sandloop"}},
                    "spec": {"replicas": 3, "sandboxTemplateRef": {"name": "agents"}}}


@pytest.mark.parametrize(("table", "line", "words"), [
    ('namespace = "Not_A_Name"\n', 5, ["backend.kubernetes.namespace", "pattern"]),
    ('colour = "red"\n', 5, ["unknown key", "backend.kubernetes.colour"]),
    ('run_as_user = 0\n', 5, ["run_as_user", "greater than 0"]),
])
def test_option_errors_are_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    table: str, line: int, words: list[str]) -> None:
    policy = _write(tmp_path, '[backend]\ntype = "kubernetes"\n[backend.kubernetes]\n' + table)
    from executor.k8s_cli import manifest

    with pytest.raises(ConfigError) as info:
        manifest(policy)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{policy}:{line}: "), text
    assert all(w in text for w in words), text
    assert main(["k8s", "manifest", "--policy", policy]) == 2  # a usage error, one line
    assert f"policy.toml:{line}" in capsys.readouterr().err


def test_unknown_backend_type_is_named(tmp_path: Path) -> None:
    from sandbox.backends import get

    with pytest.raises(ConfigError, match=r"no back-end 'podman' .known: docker, kubernetes"):
        get("podman")


@pytest.mark.parametrize(("docker", "k8s"), [("2g", "2Gi"), ("512m", "512Mi"), ("64k", "64Ki"), ("1000", "1000")])
def test_memory_quantities(docker: str, k8s: str) -> None:
    assert memory_quantity(docker) == k8s
