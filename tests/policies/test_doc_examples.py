"""Every policy example in README.md and docs/*.md passes ``sandloop policy check``, so the docs
and the lints cannot drift apart: an example a user copies is never failed by the checker.

An example that is a part of a policy file (a ``[session]`` or ``[environment]`` table on its
own) is checked the way the README starts every policy: ``version = 1`` and ``extends =
["default"]`` before it. A ``toml`` block that is no sandloop policy (another program's
configuration) is listed in NOT_POLICIES, by its first line, with what it is.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from executor.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The README's opening of a policy file, which a fragment is a part of.
OPENING = 'version = 1\nextends = ["default"]\n'
#: toml blocks that are other programs' configuration: first line → what it is.
NOT_POLICIES = {"[mcp_servers.sandloop]": "Codex's ~/.codex/config.toml, starting sandloop's MCP server"}
_BLOCK = re.compile(r"^```toml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> dict[str, str]:
    """``file:line`` → the text of every toml block in the docs."""
    found = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _BLOCK.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            found[f"{doc.relative_to(ROOT)}:{line}"] = block.group(1)
    return found


def _first_line(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


BLOCKS = _blocks()
POLICIES = {where: text for where, text in BLOCKS.items() if _first_line(text) not in NOT_POLICIES}


def test_the_examples_are_found_and_the_exceptions_exist() -> None:
    assert len(POLICIES) >= 10, sorted(POLICIES)
    assert any('preset = "python"' in text for text in POLICIES.values())  # the README's first example
    assert {_first_line(text) for text in BLOCKS.values()} >= NOT_POLICIES.keys()  # no stale exception


@pytest.mark.parametrize("where", sorted(POLICIES))
def test_a_doc_policy_example_passes_policy_check(where: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = POLICIES[where]
    policy = tmp_path / "sandloop.toml"
    policy.write_text(text if "version" in tomllib.loads(text) else OPENING + text, encoding="utf-8")
    capsys.readouterr()
    code = main(["policy", "check", str(policy), "--json"])
    out = capsys.readouterr()
    assert code == 0, f"{where}: {out.out or out.err}"
    assert json.loads(out.out)["findings"] == [], where
