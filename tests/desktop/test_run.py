"""The whole loop: ``sandloop run --desktop`` against the fake Responses server, a scripted
model driving a real desktop, the tool declared as the placement that runs, the report drawing
the clicks over the desktop's screenshots — and docs/desktop.png, taken from that real session."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from executor.cli import main
from executor.report import load_run
from executor.report.marks import Circle, overlay
from executor.report.model import ComputerView
from executor.testing import FakeResponsesServer, ScriptedModel, computer_call, message, shell_call

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "desktop.png"
POLICY = """
version = 1
extends = ["ci"]
[files]
writable = ["**"]
[browser]
safety_checks = "acknowledge"   # the desktop's pending safety checks are answered as the browser's
[computer]
environment = "desktop"
settle_ms = 1500
"""
CLICK = (300, 200)
CHECK = {"id": "sc_1", "code": "malicious_instructions", "message": "The screen may contain instructions."}


def _turns() -> list[Any]:
    return [
        [computer_call([{"type": "screenshot"}])],
        [computer_call([
            {"type": "click", "x": CLICK[0], "y": CLICK[1], "button": "left"},
            {"type": "type", "text": "echo from the desktop > loop.txt; ls"},
            {"type": "keypress", "keys": ["ENTER"]},
        ], pending_safety_checks=[CHECK])],
        [shell_call(["cat loop.txt"])],
        [message("The terminal wrote loop.txt.")],
    ]


@pytest.mark.docker
def test_sandloop_run_desktop_end_to_end(tmp_path: Path, workspace: Path, desktop_image_name: str,
                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-desktop-0000")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    policy = tmp_path / "desktop.toml"
    policy.write_text(POLICY)
    log = tmp_path / "run" / "requests.jsonl"
    with FakeResponsesServer(ScriptedModel(_turns())) as server:
        code = main(["run", "use the terminal on the desktop", "--desktop", "--repo", str(workspace),
                     "--base-url", server.base_url, "--model", "scripted", "--policy", str(policy),
                     "--log", str(log), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert not server.rejections, server.rejections
    assert (workspace / "loop.txt").read_text() == "from the desktop\n"
    result = json.loads(out.out)
    assert result["final_text"] == "The terminal wrote loop.txt."
    assert "Linux desktop" in server.requests[0]["instructions"]  # the GA tool cannot say it
    tools = server.requests[0]["tools"]
    assert {"type": "computer"} in tools
    inputs = [i for r in server.requests for i in r["input"] if isinstance(i, dict)]
    shell_outputs = [i for i in inputs if i.get("type") == "shell_call_output"]
    acknowledged = [i["acknowledged_safety_checks"] for i in inputs
                    if i.get("type") == "computer_call_output" and "acknowledged_safety_checks" in i]
    assert acknowledged == [[CHECK]]
    assert "from the desktop" in json.dumps(shell_outputs)

    # The report: the click drawn where it happened, over the desktop's screenshot before it.
    run = load_run(log.parent)
    (clicking,) = [c for c in run.calls if c.type == "computer_call" and c.summary.startswith("click")]
    assert isinstance(clicking.view, ComputerView) and clicking.view.before is not None
    marks = overlay(clicking.view.actions, 1280, 800)
    assert any(isinstance(s, Circle) and "click" in s.cls and (s.cx, s.cy) == CLICK for s in marks.shapes)
    page = tmp_path / "report.html"
    assert main(["report", str(log.parent), "-o", str(page)]) == 0
    html = page.read_text()
    assert f'data-sha="{clicking.view.before}"' in html and 'class="click' in html and "svg" in html
    after = log.parent / "screenshots" / f"{clicking.view.after}.png"
    shot = Image.open(io.BytesIO(after.read_bytes())).convert("RGB")
    assert shot.size == (1280, 800) and len(shot.getcolors(1 << 20) or []) > 20
    target = DOCS_SHOT if os.environ.get("SANDLOOP_UPDATE_DOCS") == "1" or not DOCS_SHOT.exists() \
        else tmp_path / "desktop.png"
    shot.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
    assert target.stat().st_size < 300_000


@pytest.mark.docker
def test_the_preview_tool_declares_linux(tmp_path: Path, workspace: Path, desktop_image_name: str,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-desktop-0000")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    turns = [[{"type": "computer_call", "call_id": "c1", "id": "cu_1", "status": "completed",
               "pending_safety_checks": [], "action": {"type": "keypress", "keys": ["ESC"]}}],
             [message("looked")]]
    with FakeResponsesServer(ScriptedModel(turns)) as server:
        code = main(["run", "look", "--desktop", "--repo", str(workspace), "--base-url", server.base_url,
                     "--model", "computer-use-preview", "--policy", "ci", "--log", str(tmp_path / "r" / "l.jsonl")])
    out = capsys.readouterr()
    assert code == 0, out.err
    (tool,) = [t for t in server.requests[0]["tools"] if t["type"] == "computer_use_preview"]
    assert tool == {"type": "computer_use_preview", "display_width": 1280, "display_height": 800,
                    "environment": "linux"}
