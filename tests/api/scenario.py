"""What the API, adapter and example tests share: a checkout whose test suite fails until
calc.py is fixed, and the scripted model that fixes it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from executor.testing import ScriptedModel, apply_patch_call, message, shell_call, update_file

CALC = "def add(a, b):\n    return a - b\n"
TESTS = ("import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
FIX = "@@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n"
TEST_COMMAND = "python3 -m unittest -q"


def make_repo(root: Path, uid: int = 1000) -> Path:
    """calc.py (broken), its test, a file to protect (victim) and a .git/config."""
    files = {"calc.py": CALC, "test_calc.py": TESTS, "victim": "keep me\n", ".git/config": GIT_CONFIG}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in _tree(root):
        os.chown(path, uid, uid, follow_symlinks=False)
    return root


def _tree(root: Path) -> Iterator[Path]:
    yield root
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            yield Path(dirpath) / name


def fixing_turns() -> list[Any]:
    """Run the tests (they fail), fix calc.py, run them again (they pass), answer."""
    return [
        [shell_call([TEST_COMMAND])],
        [apply_patch_call(update_file("calc.py", FIX))],
        [shell_call([TEST_COMMAND])],
        [message("calc.add subtracted; it adds now and the tests pass.")],
    ]


def fixing_model() -> ScriptedModel:
    return ScriptedModel(fixing_turns())


def outputs(requests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Every tool output of type ``kind`` the client sent, each call once (the Agents SDK
    re-sends the whole history every turn)."""
    seen: dict[str, dict[str, Any]] = {}
    for body in requests:
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type") == kind:
                seen.setdefault(str(item.get("call_id")), item)
    return list(seen.values())


def exit_codes(output: dict[str, Any]) -> list[Any]:
    return [(entry.get("outcome") or {}).get("exit_code", "timeout") for entry in output["output"]]
