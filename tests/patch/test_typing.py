"""The patch engine type-checks under ``mypy --strict``, third-party imports included."""

from __future__ import annotations

from pathlib import Path

from mypy import api

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox" / "patch"


def test_sandbox_patch_passes_mypy_strict() -> None:
    # The project's own cache directory keeps repeated runs fast; a cold run takes seconds.
    stdout, stderr, status = api.run(["--strict", "--no-error-summary", str(PACKAGE)])
    assert status == 0, stdout + stderr
