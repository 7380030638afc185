from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import load_policy
from policies.model import PRESETS_DIR, PolicyLoadError, json_schema, key_lines, preset_names
from sandloop.verdict import Decision

RULE = '''
[[shell.rules]]
id = "{id}"
pattern = {pattern}
decision = "{decision}"
justification = "because"
'''


def _error(path: Path) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as info:
        load_policy(path)
    return info.value


def test_presets_are_there() -> None:
    assert {"default", "strict", "ci"} <= set(preset_names())


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("version = 1\n[shell]\ndefault = \"maybe\"\n", 3, ["shell.default", "allow"]),
        ("version = 1\n\n[shell]\ntimeout = 5\n", 4, ["unknown key", "shell.timeout"]),
        ("version = 1\n[shell]\nnetwork = \"all\"\n", 3, ["network", "none"]),
        ("version = 2\n", 1, ["version"]),
        ("[shell]\ndefault = \"deny\"\n", None, ["missing", "version"]),
        ("version = 1\n[shell\n", 2, ["invalid TOML"]),
        ("version = 1\n[files]\nmax_patch_bytes = -1\n", 3, ["max_patch_bytes", "greater"]),
        ("version = 1\n[browser]\nallow_domains = [\n  \"ok.com\",\n  \"https://x.com/\",\n]\n",
         3, ["not a host name"]),
        ("version = 1\n" + RULE.format(id="a", pattern='["git", 5]', decision="allow"), 5,
         ["pattern element 1"]),
        ("version = 1\n" + RULE.format(id="a", pattern='["/bin/rm"]', decision="deny"), 5,
         ["base name"]),
        ("version = 1\n" + RULE.format(id="a", pattern='["ls"]', decision="allow")
         + "colour = 'red'\n", 8, ["unknown key", "shell.rules[0].colour"]),
        ("version = 1\n" + RULE.format(id="a", pattern='["ls"]', decision="allow")
         + RULE.format(id="b", pattern='["x"]', decision="nope"), 12,
         ["shell.rules[1].decision"]),
    ],
)
def test_broken_policy_names_file_and_line(write_policy: Callable[..., Path], text: str,
                                           line: int | None, words: list[str]) -> None:
    error = _error(write_policy(text))
    problem = error.problems[0]
    assert problem.file.endswith("policy.toml")
    assert problem.line == line, str(error)
    for word in words:
        assert word in str(error)


def test_failing_example_stops_the_load_naming_rule_and_example(
        write_policy: Callable[..., Path]) -> None:
    text = ("version = 1\n" + RULE.format(id="git-push", pattern='["git", "push"]',
                                          decision="prompt")
            + 'match = ["git push origin", "git pull"]\nnot_match = ["git push -f"]\n')
    error = _error(write_policy(text))
    message = str(error)
    assert "rule 'git-push'" in message
    assert "'git pull'" in message and "'git push -f'" in message
    assert [p.line for p in error.problems] == [8, 9]
    load_policy(write_policy(text), check_examples=False)  # `policy test` can still report


def test_extends_layers_and_overrides(write_policy: Callable[..., Path]) -> None:
    base = write_policy('version = 1\n[shell]\ndefault = "deny"\nnetwork = ["pkgs.example.test"]\n'
                        + RULE.format(id="ls", pattern='["ls"]', decision="allow")
                        + RULE.format(id="git", pattern='["git"]', decision="prompt"), "base.toml")
    top = write_policy('version = 1\nextends = ["./base.toml"]\n[shell]\nnetwork = "none"\n'
                       + RULE.format(id="git", pattern='["git"]', decision="allow")
                       + RULE.format(id="rm", pattern='["rm"]', decision="deny"), "top.toml")
    engine = load_policy(top)
    assert [r.rule.id for r in engine.rules] == ["git", "rm", "ls"]
    assert engine.policy.shell.default is Decision.DENY  # inherited
    assert engine.policy.shell.network == "none"  # replaced
    assert engine.shell("git push").decision is Decision.ALLOW  # the override wins
    assert engine.shell("ls").source == "base.toml:6" or (engine.shell("ls").source or "").endswith(
        "base.toml:6")
    assert (engine.shell("git x").source or "").endswith("top.toml:6")
    assert (engine.shell("zzz").source or "").endswith("base.toml:3")
    manifest = f"{hashlib.sha256(base.read_bytes()).hexdigest()}\n" \
               f"{hashlib.sha256(top.read_bytes()).hexdigest()}\n"
    assert engine.sha256 == hashlib.sha256(manifest.encode()).hexdigest()


def test_single_file_sha256_is_the_file_hash(write_policy: Callable[..., Path]) -> None:
    path = write_policy("version = 1\n")
    assert load_policy(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_extends_preset_and_errors(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy('version = 1\nextends = ["strict"]\n[shell]\ndefault = "prompt"\n'))
    assert engine.shell("ls").decision is Decision.ALLOW
    assert engine.shell("zzz").decision is Decision.PROMPT
    error = _error(write_policy('version = 1\nextends = ["nosuch"]\n'))
    assert error.problems[0].line == 2 and "no preset named 'nosuch'" in str(error)
    write_policy('version = 1\nextends = ["./b.toml"]\n', "a.toml")
    cyc = write_policy('version = 1\nextends = ["./a.toml"]\n', "b.toml")
    assert "cycle" in str(_error(cyc))


def test_duplicate_rule_ids_refused(write_policy: Callable[..., Path]) -> None:
    text = "version = 1\n" + RULE.format(id="a", pattern='["ls"]', decision="allow") * 2
    assert "used twice" in str(_error(write_policy(text)))


def test_key_lines_handles_multiline_values_and_quoted_keys() -> None:
    text = (
        'version = 1\n'
        'note = """\n[not.a.table]\nx = 1\n"""\n'
        '[shell]\n'
        'network = [\n  "a.com", # comment ]\n  "b.com",\n]\n'
        '[[shell.rules]]\nid = "r0"\n'
        '[[shell.rules]]\nid = "r1"\npattern = ["[x]"]\n'
        '[mcp.servers."my server".tools]\n"a.b" = "allow"\n'
        'resources.memory = "1g"\n'
    )
    lines = key_lines(text)
    assert lines[("note",)] == 2
    assert ("not", "a", "table") not in lines
    assert lines[("shell", "network")] == 7
    assert lines[("shell", "rules", 0, "id")] == 12
    assert lines[("shell", "rules", 1)] == 13
    assert lines[("shell", "rules", 1, "pattern")] == 15
    assert lines[("mcp", "servers", "my server", "tools", "a.b")] == 17
    assert lines[("mcp", "servers", "my server", "tools", "resources", "memory")] == 18


def test_json_schema_export() -> None:
    schema = json_schema()
    assert schema["additionalProperties"] is False
    assert {"shell", "files", "browser", "mcp", "functions", "budget"} <= set(schema["properties"])
    assert "ShellRule" in schema["$defs"]


def test_presets_are_commented_for_an_auditor() -> None:
    for path in PRESETS_DIR.glob("*.toml"):
        text = path.read_text()
        assert text.startswith("# sandloop"), path
        assert "auditor" in text, path
        engine = load_policy(path)
        for rule in engine.rules:
            if rule.source.startswith(f"policies/presets/{path.name}"):
                assert rule.rule.match and rule.rule.not_match, rule.rule.id
