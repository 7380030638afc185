"""The bounds of :mod:`executor.mcp.limits` that the stdio and HTTP tests do not reach: the
computer tool's, a patch's file count, and the message limit a policy's patch size raises."""

from __future__ import annotations

import pytest

from executor.mcp import calls
from executor.mcp.limits import MAX_ACTIONS, MAX_PATCH_FILES, MAX_TYPED_CHARS, MIN_MESSAGE_BYTES, message_limit
from executor.mcp.server import Checked
from executor.mcp.tools import offered
from policies.engine import load_policy
from sandloop.errors import SandloopError


def _computer() -> Checked:
    policy = load_policy("default").policy
    (spec,) = [s for s in offered("auto", policy) if s.name == "computer"]
    return Checked(spec, policy.files.max_patch_bytes)


def test_a_computer_call_is_bounded_in_actions_and_typed_characters() -> None:
    computer = _computer()
    assert computer.problem({"actions": [{"type": "type", "text": "x" * MAX_TYPED_CHARS}]}) is None
    waits = {"actions": [{"type": "wait"}] * (MAX_ACTIONS + 1)}
    assert computer.problem(waits) == f"invalid arguments for computer: actions: 101 items; at most {MAX_ACTIONS}"
    typed = {"actions": [{"type": "type", "text": "x" * 6000}, {"type": "type", "text": "y" * 6000}]}
    assert computer.problem(typed) == (f"computer: the type actions total 12000 characters; a call may type "
                                       f"{MAX_TYPED_CHARS} (each is a key event)")


def test_a_patch_touching_too_many_files_is_refused_before_any_is_decided() -> None:
    files = "".join(f"*** Add File: f{i}.txt\n+x\n" for i in range(MAX_PATCH_FILES + 1))
    with pytest.raises(SandloopError, match=f"touches {MAX_PATCH_FILES + 1} files; one patch may touch "):
        calls._patch_operations({"patch": f"*** Begin Patch\n{files}*** End Patch\n"})
    files = "".join(f"*** Add File: f{i}.txt\n+x\n" for i in range(MAX_PATCH_FILES))
    assert len(calls._patch_operations({"patch": f"*** Begin Patch\n{files}*** End Patch\n"})) == MAX_PATCH_FILES


@pytest.mark.parametrize(("max_patch_bytes", "limit"), [(1 << 20, MIN_MESSAGE_BYTES), (4 << 20, 16 << 20)])
def test_a_message_may_carry_the_largest_patch_the_policy_allows(max_patch_bytes: int, limit: int) -> None:
    assert message_limit(max_patch_bytes) == limit
