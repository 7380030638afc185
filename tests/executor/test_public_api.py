"""The curated public API: every name in ``__all__`` exists, and nothing private is exported."""

from __future__ import annotations

import subprocess
import sys
from typing import cast

import executor
import sandloop.errors
from executor.gate import Gate
from executor.toolbox import Toolbox
from sandbox.base import Session


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


def test_import_executor_needs_no_agents_sdk() -> None:
    # The Agents SDK adapters are an optional extra: the public API must not pull them in.
    code = "import sys, executor; executor.open_run; sys.exit('agents' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_a_toolbox_names_every_part_it_misses() -> None:
    text = Toolbox().unavailable("shell_call", "session", "gate")
    assert text is not None and text.startswith("shell_call is not enabled in this run: ")
    assert "no sandbox session" in text and "no policy gate" in text
    only_gate = Toolbox(session=cast(Session, object())).unavailable("shell_call", "session", "gate")
    assert only_gate is not None and "no policy gate" in only_gate and "session" not in only_gate
    assert Toolbox(session=cast(Session, object()), gate=cast(Gate, object())).unavailable(
        "shell_call", "session", "gate") is None
