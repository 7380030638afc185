"""The [environment] policy section: validated like the others (file and line), in the schema,
turned into the builder's plain spec with paths relative to the policy file; and the presets
still ask before (ci: refuse) installs in the agent phase while test runners run."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.sandbox_config import docker_config, environment_spec
from policies.engine import load_policy
from policies.model import PolicyLoadError, json_schema
from sandbox.ca import CA_PATH
from sandbox.environment.prepare import Prepared
from sandloop.verdict import Decision


def _policy(tmp_path: Path, body: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(f"version = 1\n\n[environment]\n{body}")
    return path


@pytest.mark.parametrize(("body", "line", "words"), [
    ('image = "a"\ndockerfile = "Dockerfile"\n', None, ["image or dockerfile"]),
    ('context = "."\n', None, ["context", "dockerfile"]),
    ('setup = ["ok", " "]\n', 4, ["setup", "empty"]),
    ('packages = ["curl; rm -rf /"]\n', 4, ["not a package name"]),
    ('setup_network = ["https://pypi.org/"]\n', 4, ["setup_network", "host"]),
    ('setup_registries = ["cargo"]\n', 4, ["setup_registries"]),
    ('cache_key = ["../outside.lock"]\n', 4, ["relative"]),
    ('cache_paths = ["/abs"]\n', 4, ["relative"]),
    ('setup_timeout_s = 0\n', 4, ["setup_timeout_s"]),
    ('sources = []\n', 4, ["unknown key", "environment.sources"]),
])
def test_a_bad_environment_names_its_line(tmp_path: Path, body: str, line: int | None, words: list[str]) -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_policy(_policy(tmp_path, body))
    problem = info.value.problems[0]
    text = str(info.value)
    assert all(word in text for word in words), text
    if line is not None:
        assert problem.line == line, text


def test_the_schema_documents_the_section() -> None:
    schema = json_schema()
    section = schema["$defs"]["EnvironmentSection"]["properties"]
    assert {"image", "dockerfile", "context", "packages", "setup", "setup_network", "setup_registries",
            "cache_key", "cache_paths", "trust_host_ca", "setup_timeout_s"} <= set(section)
    assert "environment" in schema["properties"]


def test_the_spec_resolves_paths_against_the_policy_that_sets_them(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    _policy(tmp_path / "team", 'dockerfile = "docker/Dockerfile"\ncontext = ".."\nsetup = ["make deps"]\n',
            "base.toml")
    top = tmp_path / "project.toml"
    top.write_text('version = 1\nextends = ["./team/base.toml"]\n[shell.resources]\nmemory = "3g"\n'
                   '[shell.env]\nFOO = "1"\n[environment]\nsetup_registries = ["pip", "pip"]\ntrust_host_ca = true\n')
    spec = environment_spec(load_policy(top).loaded)
    assert spec.dockerfile == (tmp_path / "team" / "docker" / "Dockerfile").resolve()
    assert spec.context == tmp_path.resolve()
    assert spec.setup == ("make deps",) and spec.setup_registries == ("pip",) and spec.trust_host_ca
    assert spec.memory == "3g" and spec.env["FOO"] == "1" and ".git" in spec.read_only_paths
    # --image replaces the image or Dockerfile for one run; the setup stays
    override = environment_spec(load_policy(top).loaded, "other:tag")
    assert override.image == "other:tag" and override.dockerfile is None and override.setup == ("make deps",)


def test_no_section_means_the_default_image_unchanged() -> None:
    spec = environment_spec(load_policy("default").loaded)
    assert spec.is_default
    assert docker_config(load_policy("default").policy, prepared=Prepared(image=None, source="default")) \
        == docker_config(load_policy("default").policy)


def test_a_prepared_environment_reaches_the_session_config() -> None:
    policy = load_policy("ci").policy
    prepared = Prepared(image="sandloop-env:abc", source="cached", path="/opt/env/bin:/usr/bin",
                        ca_bundle="/etc/ssl/certs/ca-certificates.crt")
    config = docker_config(policy, prepared=prepared)
    assert config.image == "sandloop-env:abc" and config.env["PATH"] == "/opt/env/bin:/usr/bin"
    assert config.ca_bundle == "/etc/ssl/certs/ca-certificates.crt" and config.network_allow is None
    assert CA_PATH  # the session mounts and names it (tests/environments/test_setup.py)


@pytest.mark.parametrize("preset", ["default", "ci"])
def test_test_runners_run_and_installs_still_ask_in_the_agent_phase(preset: str) -> None:
    engine = load_policy(preset)
    for line in ("python3 -m pytest -q", "python3 -m unittest -v", "npm test", "npm run lint", "pytest -x"):
        assert engine.shell(line).decision is Decision.ALLOW, line
    asked = Decision.DENY if preset == "ci" else Decision.PROMPT
    for line in ("pip install requests", "python3 -m pip install x", "/opt/env/bin/pip install x", "npm install",
                 "npm ci", "apt-get install -y jq", "npm i left-pad", "uv pip install x"):
        assert engine.shell(line).decision is asked, line
