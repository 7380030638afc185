"""apply_patch_call / custom apply_patch → output items valid against the SDK's param types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openai.types.responses import ResponseApplyPatchToolCall, ResponseCustomToolCall
from openai.types.responses.response_custom_tool_call_output_param import (
    ResponseCustomToolCallOutputParam,
)
from openai.types.responses.response_input_item_param import ApplyPatchCallOutput
from pydantic import TypeAdapter

from executor.handlers.apply_patch import (
    APPLY_PATCH_CUSTOM_TOOL,
    handle_apply_patch_call,
    handle_apply_patch_custom_call,
)
from sandbox.local import LocalSession
from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict
from tests.patch.conftest import allow_all, tree

PATCH_OUT = TypeAdapter(ApplyPatchCallOutput)
CUSTOM_OUT = TypeAdapter(ResponseCustomToolCallOutputParam)


def _call(operation: dict[str, Any], **extra: Any) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall.model_validate(
        {"type": "apply_patch_call", "id": "apc_1", "call_id": "call_1", "status": "completed",
         "operation": operation, **extra}
    )


async def test_completed_output_echoes_caller_and_never_sets_id(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("def main():\n    return 1\n")
    item = _call(
        {"type": "update_file", "path": "app.py", "diff": "@@ def main():\n-    return 1\n+    return 2\n"},
        caller={"type": "program", "caller_id": "prog_7"},
    )
    async with await LocalSession.create(tmp_path) as session:
        out = await handle_apply_patch_call(item, session, allow=allow_all)
    PATCH_OUT.validate_python(out)
    assert out == {
        "type": "apply_patch_call_output",
        "call_id": "call_1",
        "status": "completed",
        "caller": {"type": "program", "caller_id": "prog_7"},
        "output": "updated app.py: 1 hunk, +1 \u22121",
    }
    assert (tmp_path / "app.py").read_text() == "def main():\n    return 2\n"


async def test_failure_is_status_failed_with_describe_text(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    item = _call({"type": "update_file", "path": "a.txt", "diff": "@@\n-zzz\n+b\n"},
                 caller={"type": "direct"})
    async with await LocalSession.create(tmp_path) as session:
        out = await handle_apply_patch_call(item, session, allow=allow_all)
    PATCH_OUT.validate_python(out)
    assert out["status"] == "failed" and out["caller"] == {"type": "direct"}
    assert (out.get("output") or "").startswith("patch does not apply: update_file a.txt: hunk 1")
    assert "id" not in out
    assert (tmp_path / "a.txt").read_text() == "a\n"


async def test_parse_error_and_denial_and_incomplete_call_fail(tmp_path: Path) -> None:
    async def deny(path: str, kind: PatchKind) -> Verdict:
        return Verdict(Decision.DENY, "no new files today")

    async with await LocalSession.create(tmp_path) as session:
        bad = await handle_apply_patch_call(
            _call({"type": "create_file", "path": "n.txt", "diff": "oops\n"}), session, allow=allow_all
        )
        denied = await handle_apply_patch_call(
            _call({"type": "create_file", "path": "n.txt", "diff": "+x\n"}), session, allow=deny
        )
        partial = await handle_apply_patch_call(
            _call({"type": "create_file", "path": "n.txt", "diff": "+x\n"}, status="in_progress"),
            session, allow=allow_all,
        )
    for out in (bad, denied, partial):
        PATCH_OUT.validate_python(out)
        assert out["status"] == "failed"
    assert (bad.get("output") or "").startswith("invalid patch: create_file n.txt: diff line 1")
    assert "denied by policy" in (denied.get("output") or "")
    assert "no new files today" in (denied.get("output") or "")
    assert "in_progress" in (partial.get("output") or "")
    assert tree(tmp_path) == {}


async def test_dry_run_reports_without_writing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    item = _call({"type": "delete_file", "path": "a.txt"})
    async with await LocalSession.create(tmp_path) as session:
        out = await handle_apply_patch_call(item, session, allow=allow_all, dry_run=True)
    assert out["status"] == "completed"
    assert (out.get("output") or "").startswith("would delete a.txt\ndry run: no file was changed")
    assert (tmp_path / "a.txt").exists()


async def test_custom_tool_call_applies_an_envelope(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    item = ResponseCustomToolCall.model_validate(
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_9", "name": "apply_patch",
         "input": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Delete File: a.txt\n*** End Patch\n"}
    )
    async with await LocalSession.create(tmp_path) as session:
        out = await handle_apply_patch_custom_call(item, session, allow=allow_all)
    CUSTOM_OUT.validate_python(out)
    assert out == {"type": "custom_tool_call_output", "call_id": "call_9",
                   "output": "created b.txt (1 line)\ndeleted a.txt"}
    assert tree(tmp_path) == {"b.txt": b"b\n"}


async def test_custom_tool_call_failures_are_text(tmp_path: Path) -> None:
    bad = ResponseCustomToolCall.model_validate(
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch",
         "input": "*** Begin Patch\n*** Update File: missing.txt\n@@\n-a\n+b\n*** End Patch\n",
         "caller": {"type": "direct"}}
    )
    other = bad.model_copy(update={"name": "something_else"})
    async with await LocalSession.create(tmp_path) as session:
        out = await handle_apply_patch_custom_call(bad, session, allow=allow_all)
        wrong = await handle_apply_patch_custom_call(other, session, allow=allow_all)
    CUSTOM_OUT.validate_python(out)
    assert out["caller"] == {"type": "direct"}
    assert out["output"] == (
        "file not found: update_file missing.txt: missing.txt does not exist; use create_file "
        "to make a new file\nNo file was changed."
    )
    assert "not calls to 'something_else'" in str(wrong["output"])


def test_custom_tool_definition_is_a_valid_custom_tool_param() -> None:
    from openai.types.responses.custom_tool_param import CustomToolParam

    TypeAdapter(CustomToolParam).validate_python(APPLY_PATCH_CUSTOM_TOOL)
    assert APPLY_PATCH_CUSTOM_TOOL["name"] == "apply_patch"
    assert APPLY_PATCH_CUSTOM_TOOL["format"]["syntax"] == "lark"
