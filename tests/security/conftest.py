"""The two checkouts every container test of this folder runs for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(params=["uid1000", "uid0"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The usual laptop user's checkout (uid 1000), and a root-owned one (the container then runs
    as uid 0 with every capability dropped)."""
    ws = tmp_path / "repo"
    ws.mkdir()
    if request.param == "uid1000":
        os.chown(ws, 1000, 1000)
    return ws
