"""Fixtures for ``sandloop mcp``'s tests (helpers: tests/mcp_server/harness.py).

The MCP SDK comes with the ``mcp`` extra, which scripts/bootstrap installs: without it these
tests fail at import, unless SANDLOOP_TESTS_ALLOW_SKIP=1 asks to leave them out.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from tests.api.scenario import make_repo
from tests.conftest import ALLOW_SKIP

if importlib.util.find_spec("mcp") is None and os.environ.get(ALLOW_SKIP) == "1":
    collect_ignore_glob = ["test_*.py"]

#: a policy on the default preset with one deny rule (prompts come from the preset's rm rule)
POLICY = """\
version = 1
extends = ["default"]

[[shell.rules]]
id = "no-curl"
pattern = ["curl"]
decision = "deny"
justification = "no network tools in these tests"
match = ["curl http://example.test"]
not_match = ["echo curl"]
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run folders under the test's tmp_path, for the servers and the CLI alike."""
    path = tmp_path / "state"
    path.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(path))
    return path


@pytest.fixture
def repo(docker_client: Any, user_workspace: Path) -> Path:
    return make_repo(user_workspace)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path
