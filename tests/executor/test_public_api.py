"""The curated public API: every name in ``__all__`` exists, and nothing private is exported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


_LAZY = textwrap.dedent("""
    import sys, executor
    assert "openai" not in sys.modules and "executor.api" not in sys.modules, "imported eagerly"
    from executor import open_run
    assert executor.open_run is open_run is sys.modules["executor.api"].open_run
    assert set(executor.__all__) <= set(dir(executor))
    try:
        executor.nonexistent
    except AttributeError as exc:
        assert "nonexistent" in str(exc)
    else:
        raise AssertionError("no AttributeError")
""")


def test_public_names_are_imported_when_first_used() -> None:
    # `import executor.cli` runs executor/__init__: it must not import the loop and the openai client.
    done = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


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
