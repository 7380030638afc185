from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import load_policy
from policies.lint import ERROR, NOTE, lint

RULE = '[[shell.rules]]\nid = "{id}"\npattern = {pattern}\ndecision = "{decision}"\njustification = "j"\n'


def _codes(path: Path, only: str | None = None) -> list[tuple[str, str | None, str]]:
    return [(f.code, f.rule_id, f.source.rsplit(":", 1)[-1]) for f in lint(load_policy(path))
            if only is None or f.code == only]


@pytest.mark.parametrize("preset", ["default", "strict", "ci"])
def test_presets_have_no_findings(preset: str) -> None:
    assert lint(load_policy(preset)) == []


def test_shadowed_rule_is_reported_with_its_line(write_policy: Callable[..., Path]) -> None:
    text = ("version = 1\n"
            + RULE.format(id="git", pattern='["git"]', decision="allow")          # line 2
            + RULE.format(id="git-push", pattern='["git", "push"]', decision="deny")  # line 7
            + RULE.format(id="any", pattern='["*", "**", "-x"]', decision="deny")  # line 12
            + RULE.format(id="ls-x", pattern='["ls", "-l", "-x"]', decision="deny")  # line 17
            + RULE.format(id="cat", pattern='[["cat", "tac"]]', decision="deny")  # line 22
            + RULE.format(id="cat2", pattern='["cat", "-n"]', decision="allow"))  # line 27
    assert _codes(write_policy(text), "shadowed-rule") == [
        ("shadowed-rule", "git-push", "7"),
        ("shadowed-rule", "ls-x", "17"),
        ("shadowed-rule", "cat2", "27"),
    ]


def test_not_shadowed_when_later_rule_is_broader(write_policy: Callable[..., Path]) -> None:
    text = ("version = 1\n"
            + RULE.format(id="git-push", pattern='["git", "push"]', decision="prompt")
            + RULE.format(id="git", pattern='["git"]', decision="allow")
            + RULE.format(id="find-del", pattern='["find", "**", "-delete"]', decision="prompt")
            + RULE.format(id="find", pattern='["find"]', decision="allow"))
    assert _codes(write_policy(text), "shadowed-rule") == []


@pytest.mark.parametrize(
    "pattern",
    ['["bash"]', '["python3", "-m"]', '["env"]', '["xargs"]', '["npx"]', '[["ls", "sh"]]',
     '["*"]', '["**"]', '["find", "**", "-exec"]'],
)
def test_escapable_allow(write_policy: Callable[..., Path], pattern: str) -> None:
    text = "version = 1\n" + RULE.format(id="r", pattern=pattern, decision="allow")
    assert _codes(write_policy(text), "escapable-allow") == [("escapable-allow", "r", "2")]


def test_prompting_for_an_interpreter_is_fine(write_policy: Callable[..., Path]) -> None:
    text = "version = 1\n" + RULE.format(id="r", pattern='["bash"]', decision="prompt")
    assert _codes(write_policy(text)) == []


def test_writable_git_open_network_and_timeouts(write_policy: Callable[..., Path]) -> None:
    text = ('version = 1\n[shell]\nnetwork = ["*"]\ndefault_timeout_ms = 900000\n'
            'max_timeout_ms = 1000\n[files]\nwritable = ["**"]\nread_only = []\n')
    assert _codes(write_policy(text)) == [
        ("writable-git", "files.writable", "8"),  # the read_only line: where '**/.git/**' goes
        ("open-network", "shell.network", "3"),
        ("timeout-above-max", "shell.default_timeout_ms", "4"),
    ]


def test_a_finding_in_a_shipped_preset_the_file_does_not_change_is_a_note(
        write_policy: Callable[..., Path]) -> None:
    """A policy that only extends default is not failed for default's own lines (the browser it
    leaves open is default's documented choice); the file that writes them is."""
    path = write_policy('version = 1\nextends = ["default"]\n[session]\nsnapshot = "on_stop"\n')
    (note,) = lint(load_policy(path))
    assert (note.code, note.severity) == ("browser-network-separate", NOTE)
    assert note.source.startswith("policies/presets/default.toml:")
    team = write_policy('version = 1\n[shell]\nnetwork = "none"\n[browser]\nallow_domains = ["*"]\n', "team.toml")
    path = write_policy(f'version = 1\nextends = ["{team.name}"]\n')
    (finding,) = lint(load_policy(path))
    assert (finding.code, finding.severity, finding.source) == ("browser-network-separate", ERROR, f"{team}:5")


def test_a_finding_the_users_file_causes_is_located_there_and_stays_an_error(
        write_policy: Callable[..., Path]) -> None:
    """Emptying default's read_only list leaves .git writable: the error is on that line, not on
    default's writable glob. A rule of the user's that hides a preset rule deciding otherwise is
    reported on the user's rule; one that hides a rule deciding the same is only a note."""
    path = write_policy('version = 1\nextends = ["default"]\n[files]\nread_only = []\n')
    assert [(f.code, f.severity, f.source) for f in lint(load_policy(path)) if f.severity == ERROR] == [
        ("writable-git", ERROR, f"{path}:4")]
    path = write_policy('version = 1\nextends = ["default"]\n'
                        + RULE.format(id="mine", pattern='["git", "push", "**"]', decision="allow"))
    shadowed = [f for f in lint(load_policy(path)) if f.code == "shadowed-rule"]
    assert [(f.rule_id, f.severity, f.source) for f in shadowed] == [("mine", ERROR, f"{path}:3")]
    assert "'git-push'" in shadowed[0].message and "prompt" in shadowed[0].message
    path = write_policy('version = 1\nextends = ["default"]\n'
                        + RULE.format(id="mine", pattern='["git", "push", "**"]', decision="prompt"))
    shadowed = [f for f in lint(load_policy(path)) if f.code == "shadowed-rule"]
    assert [(f.severity, f.rule_id) for f in shadowed] == [(NOTE, "git-push")]


def test_a_users_change_that_surfaces_at_a_presets_line_stays_an_error(
        write_policy: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a file that extends the preset and says nothing else would get is a note. A
    user's rule of the same id, a lower maximum, or a file of the user's own that bears a preset's
    name all change what the preset's lines mean: their findings stay errors."""
    narrowed = write_policy('version = 1\nextends = ["default"]\n'
                            + RULE.format(id="find-writes", pattern='["find", "**", "-delete"]', decision="prompt"))
    errors = [f.code for f in lint(load_policy(narrowed)) if f.severity == ERROR]
    assert "command-option-allow" in errors  # `find . -fprint /tmp/x` is now allowed by read-tools
    lower = write_policy('version = 1\nextends = ["default"]\n[shell]\nmax_timeout_ms = 1000\n')
    assert "timeout-above-max" in [f.code for f in lint(load_policy(lower)) if f.severity == ERROR]
    # A file of the user's own at policies/presets/default.toml, checked from its folder.
    own = tmp_path / "policies" / "presets" / "default.toml"
    own.parent.mkdir(parents=True)
    own.write_text('version = 1\n[files]\nread_only = []\n[shell]\nnetwork = ["*"]\n')
    top = write_policy('version = 1\nextends = ["default", "policies/presets/default.toml"]\n', "top.toml")
    monkeypatch.chdir(tmp_path)
    errors = [f.code for f in lint(load_policy(top)) if f.severity == ERROR]
    assert "writable-git" in errors and "open-network" in errors
