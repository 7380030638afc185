"""The curated public API: every name in ``__all__`` exists, and nothing private is exported."""

from __future__ import annotations

import executor
import sandbox.errors


def test_executor_all_is_importable_and_public() -> None:
    for name in executor.__all__:
        assert hasattr(executor, name), name
        assert not name.startswith("_")
    assert sorted(executor.__all__) == executor.__all__


def test_every_error_describes_itself() -> None:
    for name in sandbox.errors.__all__:
        obj = getattr(sandbox.errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            text = sandbox.errors.describe(obj("detail"))
            assert text.endswith("detail") and not text.startswith("internal error"), name
