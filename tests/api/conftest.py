"""Fixtures for the public API's tests: a state directory of the test's own, a checkout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.scenario import make_repo


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run folders go under the test's tmp_path, never the real ~/.local/state."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "sandloop"


@pytest.fixture
def repo(docker_client: Any, user_workspace: Path) -> Path:
    return make_repo(user_workspace)
