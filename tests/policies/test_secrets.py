"""The ``[secrets]`` section: what it accepts, what lint says, how a value is read and rendered."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.cli import main
from executor.sandbox_config import docker_config, environment_spec
from executor.testing import FakeResponsesServer, ScriptedModel, message
from policies.engine import load_policy
from policies.lint import lint
from policies.model import PolicyLoadError
from sandbox.injection import SecretSpec
from sandloop.errors import ConfigError

BASE = 'version = 1\n[shell]\nnetwork = ["api.example.test", "pkgs.example.test:8443"]\n'


def test_an_entry_names_where_the_value_is_and_how_it_is_sent(write_policy: Callable[..., Path]) -> None:
    path = write_policy(BASE + '[secrets.api]\nhost = "API.example.test"\nenv = "API_TOKEN"\n'
                        '[secrets.index]\nhost = "pkgs.example.test"\nport = 8443\nfile = "/run/token"\nbasic = "ci"\n')
    policy = load_policy(path).policy
    assert policy.secrets["api"].host == "api.example.test"
    assert (policy.secrets["api"].header, policy.secrets["api"].template) == ("Authorization", "Bearer {value}")
    assert lint(load_policy(path)) == []
    specs = docker_config(policy).secrets
    assert [(s.name, s.host, s.port, s.basic) for s in specs] == [
        ("api", "api.example.test", 443, None), ("index", "pkgs.example.test", 8443, "ci")]


@pytest.mark.parametrize(("entry", "message"), [
    ('host = "*.example.test"\nenv = "T"', "must be one exact host name"),
    ('host = "a.test:443"\nenv = "T"', "must be one exact host name"),
    ('host = "a.test"', "give exactly one of env or file"),
    ('host = "a.test"\nenv = "T"\nfile = "/t"', "give exactly one of env or file"),
    ('host = "a.test"\nfile = "token.txt"', "must be an absolute path"),
    ('host = "a.test"\nenv = "T"\ntemplate = "Bearer"', "{value} exactly once"),
    ('host = "a.test"\nenv = "T"\nheader = "Host"', "frames the request"),
    ('host = "a.test"\nenv = "T"\nheader = "X Bad"', "is not a header name"),
    ('host = "a.test"\nenv = "T"\nbasic = "u"\nheader = "X-Key"', "give basic or header/template"),
    ('host = "a.test"\nvalue = "hunter2"', "value"),  # the value itself is never a key
    ('host = "a.test"\nenv = "T"\nheader = "X-Key: evil"', "is not a header name"),
    ('host = "a.test"\nenv = "T"\nheader = "X-Key\\r\\nX-Other"', "is not a header name"),
    ('host = "a.test"\nenv = "T"\nheader = "transfer-ENCODING"', "frames the request"),
    ('host = "a.test"\nenv = "T"\ntemplate = "Bearer {value}\\r\\nX-Other: y"', "line breaks"),
    ('host = "a.test"\nenv = "T"\ntemplate = "{value}{value}"', "{value} exactly once"),
    ('host = "a.test"\nenv = "T"\ntemplate = "{VALUE}"', "{value} exactly once"),
    ('host = "a.test"\nenv = "T"\nbasic = "u:p"', "no ':'"),
    ('host = "a.test"\nenv = "T"\nport = 0', "port"),
    ('host = "a.test"\nenv = "1BAD"', "is not an environment variable name"),
])
def test_bad_entries_name_the_line(write_policy: Callable[..., Path], entry: str, message: str) -> None:
    path = write_policy(BASE + "[secrets.s]\n" + entry + "\n")
    with pytest.raises(PolicyLoadError) as caught:
        load_policy(path)
    assert message in str(caught.value) and f"{path.name}:" in str(caught.value)


def test_a_secret_for_a_host_no_list_allows_is_an_error(write_policy: Callable[..., Path]) -> None:
    path = write_policy(BASE + '[secrets.s]\nhost = "pkgs.example.test"\nenv = "T"\n')  # 443: not listed
    findings = lint(load_policy(path))
    assert [(f.code, f.rule_id, f.source.rsplit(":", 1)[1]) for f in findings] == [
        ("secret-host-not-allowed", "secrets.s", "4")]
    with pytest.raises(ConfigError, match=r"^secret 's' is for pkgs.example.test:443: neither \[shell\] network"):
        docker_config(load_policy(path).policy)
    # Allowed for environment setup only: no lint finding, and the agent's session does not get it.
    path = write_policy('version = 1\n[environment]\nsetup_network = ["pkgs.example.test"]\n'
                        '[secrets.s]\nhost = "pkgs.example.test"\nenv = "T"\n')
    assert lint(load_policy(path)) == []
    assert docker_config(load_policy(path).policy).secrets == ()


# Hosts this test's clients are configured with (test names, never contacted: nothing is fetched).
INDEX, NPM = "index.sandloop.test", "npm.sandloop.test"
OTHER = "evil.sandloop.test"


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip and npm configured, through their own variables, with this test's registries."""
    monkeypatch.setenv("PIP_INDEX_URL", f"https://{INDEX}/simple/")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("npm_config_registry", f"https://{NPM}/")


def _registry_policy(write_policy: Callable[..., Path], registry: str, host: str) -> Path:
    return write_policy(f'version = 1\nextends = ["default"]\n[environment]\nsetup_registries = ["{registry}"]\n'
                        f'[secrets.api]\nhost = "{host}"\nenv = "SANDLOOP_TEST_TOKEN"\n')


@pytest.mark.parametrize("registry", ["pip", "npm"])
def test_setup_registries_allow_their_own_hosts_and_no_other(write_policy: Callable[..., Path], clients: None,
                                                             registry: str) -> None:
    """A registry of setup_registries allows its host as the client has it configured, for setup
    only; a secret for any other host stays a lint error and is refused at start."""
    if registry == "npm" and shutil.which("npm") is None:
        pytest.skip("no npm on this host")
    own = {"pip": INDEX, "npm": NPM}[registry]
    loaded = load_policy(_registry_policy(write_policy, registry, own))
    assert [f for f in lint(loaded) if f.code == "secret-host-not-allowed"] == []
    assert [s.host for s in environment_spec(loaded.loaded).secrets] == [own]  # setup may send it
    assert docker_config(loaded.policy).secrets == ()  # the agent's session never gets it
    path = _registry_policy(write_policy, registry, OTHER)
    (finding,) = [f for f in lint(load_policy(path)) if f.code == "secret-host-not-allowed"]
    assert OTHER in finding.message and f"{registry}: {own}" in finding.message
    assert (finding.rule_id, finding.source) == ("secrets.api", f"{path}:5")
    for start in (lambda: environment_spec(load_policy(path).loaded), lambda: docker_config(load_policy(path).policy)):
        with pytest.raises(ConfigError, match=rf"^secret 'api' is for {OTHER}:443: neither .* nor is it a registry"):
            start()


def test_a_registry_allows_its_own_port_only(write_policy: Callable[..., Path], clients: None) -> None:
    # The index is https://index.sandloop.test/: port 443, not every port of that host.
    path = write_policy(f'version = 1\nextends = ["default"]\n[environment]\nsetup_registries = ["pip"]\n'
                        f'[secrets.api]\nhost = "{INDEX}"\nport = 22\nenv = "SANDLOOP_TEST_TOKEN"\n')
    (finding,) = [f for f in lint(load_policy(path)) if f.code == "secret-host-not-allowed"]
    assert f"{INDEX}:22" in finding.message


def test_a_run_with_a_secret_no_registry_allows_is_refused_before_it_starts(
        write_policy: Callable[..., Path], clients: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDLOOP_TEST_TOKEN", "a-token-for-the-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    policy = _registry_policy(write_policy, "pip", OTHER)
    repo = tmp_path / "repo"
    repo.mkdir()
    with FakeResponsesServer(ScriptedModel([[message("never asked")]])) as server:
        code = main(["run", "say hi", "--repo", str(repo), "--base-url", server.base_url, "--policy", str(policy),
                     "--log", str(tmp_path / "requests.jsonl")])
    assert code == 2 and server.requests == []
    assert f"secret 'api' is for {OTHER}:443" in capsys.readouterr().err
    check = main(["policy", "check", str(policy)])
    assert check == 1


def test_values_are_read_at_start_and_rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T", "s3cret-value")
    bearer = SecretSpec("api", "a.test", env="T").resolve()
    assert (bearer.header, bearer.value, bearer.forms) == ("Authorization", "Bearer s3cret-value", ("s3cret-value",))
    assert "s3cret-value" not in repr(bearer)
    custom = SecretSpec("api", "a.test", env="T", header="X-Api-Key", template="{value}").resolve()
    assert (custom.header, custom.value) == ("X-Api-Key", "s3cret-value")
    (tmp_path / "token").write_text("from-file\n")
    basic = SecretSpec("idx", "a.test", file=str(tmp_path / "token"), basic="ci").resolve()
    encoded = base64.b64encode(b"ci:from-file").decode()
    assert (basic.value, basic.forms) == (f"Basic {encoded}", ("from-file", encoded))
    (tmp_path / "bad").write_text("two\nlines\n")
    with pytest.raises(ConfigError, match=r"^secret 'x': the value has a line break"):
        SecretSpec("x", "a.test", file=str(tmp_path / "bad")).resolve()
    monkeypatch.setenv("EMPTY", "")
    with pytest.raises(ConfigError, match=r"^secret 'x': the value is empty$"):
        SecretSpec("x", "a.test", env="EMPTY").resolve()
    monkeypatch.setenv("SHORT", "abc")
    with pytest.raises(ConfigError, match=r"^secret 'x': the value has under 8 characters"):
        SecretSpec("x", "a.test", env="SHORT").resolve()


def test_a_secret_file_that_is_no_plain_text_file_is_one_line(tmp_path: Path) -> None:
    """A FIFO does not hang the start, a huge file is not read whole, a CRLF ending is dropped,
    a symlink to a good file is read (the policy's author named the path on their own host)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^secret 'x': cannot read .*fifo \(not a regular file\)$"):
        SecretSpec("x", "a.test", file=str(fifo)).resolve()
    with pytest.raises(ConfigError, match=r"^secret 'x': cannot read /dev/zero \(not a regular file\)$"):
        SecretSpec("x", "a.test", file="/dev/zero").resolve()
    with pytest.raises(ConfigError, match=r"^secret 'x': cannot read .* \(Is a directory\)$|not a regular file"):
        SecretSpec("x", "a.test", file=str(tmp_path)).resolve()
    huge = tmp_path / "huge"
    with huge.open("wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB that costs nothing to make
    with pytest.raises(ConfigError, match=r"^secret 'x': .*over 16 KiB"):
        SecretSpec("x", "a.test", file=str(huge)).resolve()
    (tmp_path / "crlf").write_bytes(b"token-with-crlf\r\n")
    (tmp_path / "link").symlink_to(tmp_path / "crlf")
    assert SecretSpec("x", "a.test", file=str(tmp_path / "link")).resolve().value == "Bearer token-with-crlf"
    (tmp_path / "binary").write_bytes(b"\xff\xfe-not-utf8-at-all")
    with pytest.raises(ConfigError, match=r"^secret 'x': .*binary is not UTF-8 text$"):
        SecretSpec("x", "a.test", file=str(tmp_path / "binary")).resolve()
