"""A snapshot decides exactly as the policy file does: for the presets and a layered policy that
sets every deciding key, the Decider read back from a snapshot and the engine loaded from the
file give the same verdicts — rule, decision, why and file:line — for every inline example, the
option probes the linter tries, patches, URLs, MCP tools, functions and generated command
lines."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import snapshot
from policies.compiled import decided_paths
from policies.engine import Decider, PolicyEngine
from policies.lint import COMMAND_OPTION_PROBES

LAYERED = '''version = 1
extends = ["default", "./team.toml"]
unattended = false

[[shell.rules]]
id = "deploy"
pattern = ["make", ["deploy", "release*"]]
decision = "deny"
justification = "deploys leave the sandbox"
match = ["make deploy", "make release-1"]

[files]
writable = ["src/**", "tests/**", "*.md"]
read_only = [".git/**", "**/.env", "secrets/**"]
allow_delete = true
max_patch_bytes = 2048

[browser]
allow_domains = ["example.com", "*.docs.example.org", "127.0.0.1:8080"]
block_domains = ["ads.example.com"]
default = "prompt"

[mcp]
default = "deny"
[mcp.servers.github]
default = "prompt"
tools = { search = "allow", delete_repo = "deny" }
[mcp.servers.local]
tools = { read = "allow" }

[functions]
default = "prompt"
tools = { lookup = "allow", pay = "deny" }
'''
TEAM = '''version = 1
[shell]
default = "prompt"
[[shell.rules]]
id = "make"
pattern = ["make"]
decision = "allow"
justification = "builds"
'''
URLS = ["https://example.com/", "https://ads.example.com/x", "https://a.docs.example.org/", "http://127.0.0.1:8080/",
        "http://127.0.0.1/", "http://localhost/", "about:blank", "file:///etc/passwd", "https://other.net/",
        "http://0x7f000001/", "https://exa mple.com/"]
PATHS = ["src/a.py", "tests/t.py", "README.md", ".git/config", "a/.env", "secrets/k", "docs/x.md", "../up", "/abs"]
KINDS = ["create_file", "update_file", "delete_file"]


@pytest.fixture(params=["default", "strict", "ci", "layered"])
def pair(request: pytest.FixtureRequest, write_policy: Callable[..., Path]) -> tuple[PolicyEngine, Decider]:
    """The engine from the file, and a Decider read back from its snapshot."""
    if request.param == "layered":
        write_policy(TEAM, "team.toml")
        spec = str(write_policy(LAYERED))
    else:
        spec = request.param
    full = snapshot.decider(spec)
    assert isinstance(full, PolicyEngine)
    again = snapshot.decider(spec)
    assert type(again) is Decider
    return full, again


def _lines(engine: PolicyEngine) -> Iterator[str]:
    for rule in engine.rules:
        yield from rule.rule.match
        yield from rule.rule.not_match
    for probes in COMMAND_OPTION_PROBES.values():
        yield from probes
    yield from ["", "ls", "cd src && echo x > a.py", "echo x > /workspace/README.md", "cd .. && rm -rf x",
                "eval $X", "PATH=/tmp ls", "bash -c 'git push origin main'", "echo $'\\x1b]52;c;x\\x07'"]


def _same(full: Decider, snap: Decider, line: str) -> None:
    assert snap.explain_shell(line) == full.explain_shell(line), line
    assert snap.shell(line) == full.shell(line), line


def test_every_source_is_where_the_layers_say(pair: tuple[PolicyEngine, Decider]) -> None:
    full, snap = pair
    for path in decided_paths(snap.view):
        assert snap.where(path) == full.loaded.where(path), path
    assert [r.source for r in snap.rules] == [r.source for r in full.rules]


def test_the_same_verdict_for_every_subject(pair: tuple[PolicyEngine, Decider]) -> None:
    full, snap = pair
    for line in _lines(full):
        _same(full, snap, line)
    for path, kind in itertools.product(PATHS, KINDS):
        for size in (None, 10, 10**7):
            assert snap.patch(path, kind, size_bytes=size) == full.patch(path, kind, size_bytes=size)
    for url in URLS:
        assert snap.url(url) == full.url(url), url
    for server, tool in itertools.product(["github", "local", "other"], ["search", "delete_repo", "read", "x"]):
        assert snap.mcp(server, tool) == full.mcp(server, tool)
    for name in ["lookup", "pay", "other"]:
        assert snap.function(name) == full.function(name)


WORDS = st.sampled_from(["git", "push", "origin", "main", "rm", "-rf", "make", "deploy", "release-2", "ls",
                         "curl", "sh", "bash", "-c", "'ls -la'", "python3", "-m", "pytest", "sudo", "find",
                         "-exec", "{}", "+", "xargs", "env", "src/a.py", "*.py", "$X", '"$Y"', "$(whoami)",
                         "`id`", "sed", "-i", "s/a/b/e", "tar", "--to-command=sh", "cd", "..", "/tmp",
                         "npm", "install", "pip", "echo", "hi"])
JOINS = st.sampled_from([" ", " ", " ", " && ", " || ", "; ", " | ", " > out.txt ", " >> src/log ",
                         " 2>&1 ", " & ", "\n"])


@st.composite
def command_lines(draw: st.DrawFn) -> str:
    words = draw(st.lists(WORDS, min_size=1, max_size=10))
    joins = draw(st.lists(JOINS, min_size=len(words) - 1, max_size=len(words) - 1))
    line = words[0] + "".join(j + w for j, w in zip(joins, words[1:], strict=True))
    wrap = draw(st.sampled_from(["{}", "({})", "$({})", "bash -c '{}'", "sudo {}", "timeout 5 {}"]))
    return wrap.format(line) if "'" not in line or "'" not in wrap else line


@pytest.fixture(scope="module")
def layered_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[PolicyEngine, Decider]:
    folder = tmp_path_factory.mktemp("parity")
    (folder / "team.toml").write_text(TEAM)
    (folder / "policy.toml").write_text(LAYERED)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(folder / "state"))
        full, again = snapshot.decider(folder / "policy.toml"), snapshot.decider(folder / "policy.toml")
    assert isinstance(full, PolicyEngine) and type(again) is Decider
    return full, again


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=command_lines())
def test_generated_command_lines(layered_pair: tuple[PolicyEngine, Decider], line: str) -> None:
    full, snap = layered_pair
    _same(full, snap, line)
