from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import load_policy
from policies.lint import lint

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
        ("writable-git", "files.writable", "7"),
        ("open-network", "shell.network", "3"),
        ("timeout-above-max", "shell.default_timeout_ms", "4"),
    ]
