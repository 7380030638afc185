"""Without the ``sandloop[mcp]`` extra, ``sandloop mcp`` is one line saying how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from executor.cli import main


def test_a_missing_sdk_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for name in list(sys.modules):
        # The server's modules go too, the package with them: an earlier test's import left each
        # as an attribute of executor.mcp, which `from executor.mcp import server` would take.
        if name in ("mcp", "executor.mcp") or name.startswith(("mcp.", "executor.mcp.")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an environment without the SDK imports
    assert main(["mcp", "--repo", str(tmp_path)]) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'sandloop[mcp]'" in lines[0]
