"""The curated public API: every name in ``__all__`` exists, and nothing private is exported."""

from __future__ import annotations

import executor
import sandloop.errors


def test_executor_all_is_importable_and_public() -> None:
    for name in executor.__all__:
        assert hasattr(executor, name), name
        assert not name.startswith("_")
    assert sorted(executor.__all__) == executor.__all__


def test_every_error_describes_itself() -> None:
    for name in sandloop.errors.__all__:
        obj = getattr(sandloop.errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            exc = obj("c1", None, None, "detail") if obj is sandloop.errors.SafetyCheckRefused else obj("detail")
            text = sandloop.errors.describe(exc)
            assert text.endswith("detail") and not text.startswith("internal error"), name
            # each class has a prefix of its own, so the model can tell them apart
            assert text.split(":")[0] != sandloop.errors.describe(obj.__mro__[1]("x")).split(":")[0] \
                or obj.__mro__[1] is Exception or obj is sandloop.errors.NotAnAddress, name
