"""Fixtures for the Agents SDK adapters' tests (helpers: tests/agents/harness.py).

The SDK comes with the ``agents`` extra, which scripts/bootstrap installs: without it these
tests fail at import, unless SANDLOOP_TESTS_ALLOW_SKIP=1 asks to leave them out.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.harness import NeverAsked
from tests.api.scenario import make_repo
from tests.conftest import ALLOW_SKIP

if importlib.util.find_spec("agents") is None and os.environ.get(ALLOW_SKIP) == "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def no_tracing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Tracing off three ways (it would export to OpenAI), a dummy key, no base URL from the
    environment, and run folders under the test's tmp_path."""
    from agents import set_tracing_disabled

    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-agents-000000")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    set_tracing_disabled(True)
    yield


@pytest.fixture
def repo(docker_client: Any, user_workspace: Path) -> Path:
    return make_repo(user_workspace)


@pytest.fixture
def never_asked() -> NeverAsked:
    return NeverAsked()
