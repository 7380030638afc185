"""Fixture scenarios (see scenarios/README.md), each applied to a temp copy through a real
LocalSession and compared byte for byte with expected/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from openai.types.responses import ResponseApplyPatchToolCall

from executor.handlers.apply_patch import handle_apply_patch_call
from sandbox.base import Session
from sandbox.local import LocalSession
from sandbox.patch import envelope, unified
from sandbox.patch.apply import apply_operations
from sandloop.errors import SandloopError, describe
from tests.patch.conftest import allow_all, tree

SCENARIOS_DIR = Path(__file__).with_name("scenarios")
SCENARIOS = sorted(p for p in SCENARIOS_DIR.iterdir() if p.is_dir())
_PLACEHOLDER = ".keep"  # marks an empty tree (git stores no empty directories)


def _real_name(rel: str) -> str:
    # git cannot store a ".git" path component, so fixtures spell it "dot.git".
    return "/".join(".git" if part == "dot.git" else part for part in rel.split("/"))


def fixture_tree(root: Path) -> dict[str, bytes]:
    return {
        _real_name(rel): data for rel, data in tree(root).items() if rel != _PLACEHOLDER
    }


def materialize(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for rel, data in fixture_tree(src).items():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


async def run_scenario(scenario: Path, session: Session) -> tuple[bool, str]:
    """(succeeded, output text) of the scenario's patch applied to ``session``."""
    op_file = scenario / "op.json"
    if op_file.exists():
        item = ResponseApplyPatchToolCall.model_validate(
            {
                "type": "apply_patch_call",
                "id": "apc_1",
                "call_id": f"call_{scenario.name}",
                "status": "completed",
                "operation": json.loads(op_file.read_text(encoding="utf-8")),
            }
        )
        out = await handle_apply_patch_call(item, session, allow=allow_all)
        return out["status"] == "completed", out.get("output") or ""
    try:
        if (scenario / "patch").exists():
            ops = envelope.parse((scenario / "patch").read_bytes().decode("utf-8"))
        else:
            ops = unified.parse((scenario / "patch.diff").read_bytes().decode("utf-8"))
        result = await apply_operations(session, ops, allow=allow_all)
    except SandloopError as exc:
        return False, describe(exc)
    return True, result.text


def test_there_are_enough_scenarios_and_failures_leave_input_unchanged() -> None:
    assert len(SCENARIOS) >= 40
    for scenario in SCENARIOS:
        sources = [n for n in ("op.json", "patch", "patch.diff") if (scenario / n).exists()]
        assert len(sources) == 1, scenario.name
        if (scenario / "fails").exists():
            assert fixture_tree(scenario / "input") == fixture_tree(scenario / "expected")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
async def test_scenario(scenario: Path, tmp_path: Path) -> None:
    work = tmp_path / "workspace"
    materialize(scenario / "input", work)
    session = await LocalSession.create(work)
    async with session:
        ok, text = await run_scenario(scenario, session)
    assert tree(work) == fixture_tree(scenario / "expected"), text
    fails = scenario / "fails"
    if fails.exists():
        assert not ok, f"expected a failure, got: {text}"
        wanted = fails.read_text(encoding="utf-8").splitlines()
    else:
        assert ok, text
        output = scenario / "output"
        wanted = output.read_text(encoding="utf-8").splitlines() if output.exists() else []
    for needle in filter(None, wanted):
        assert needle in text, f"{needle!r} not in:\n{text}"
    shutil.rmtree(work)
