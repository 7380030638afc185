from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a policy text to tmp_path/name and return its path."""

    def write(text: str, name: str = "policy.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
