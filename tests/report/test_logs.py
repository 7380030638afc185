"""Logs the report must read right even when they are odd: several runs in one log, a tampered
or truncated decision log, a run that never finished, a crafted screenshot reference, replayed
histories, a retried turn. Written with the real writers (RequestLog, AuditLog) where they can
make the case, by hand where a real run cannot (a crafted or damaged file)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from executor.audit import RequestLog
from executor.report import RunNotFound, latest_run, load_run, render, resolve, state_dir, write_report
from executor.report.files import report_for
from executor.report.model import ComputerView, GenericView, Note, PatchView, ShellView
from executor.report.render import LAZY_ROWS
from executor.testing import function_call, message
from executor.toolbox import Toolbox
from executor.tools import FunctionTool
from policies.audit import AuditLog
from tests.report.scenario import HOSTILE, run


def png_url(color: str = "red", size: tuple[int, int] = (64, 40)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def shell(call_id: str, *commands: str) -> dict[str, Any]:
    return {"type": "shell_call", "id": f"sh_{call_id}", "call_id": call_id, "status": "completed",
            "action": {"commands": list(commands)}, "environment": {"type": "local"}}


def shell_output(call_id: str, *chunks: tuple[str, int | None]) -> dict[str, Any]:
    return {"type": "shell_call_output", "call_id": call_id, "output": [
        {"stdout": out, "stderr": "", "outcome": {"type": "timeout"} if code is None
         else {"type": "exit", "exit_code": code}} for out, code in chunks]}


def response(turn_id: str, *items: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {"id": turn_id, "status": status, "model": "m", "output": list(items),
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}


def one_shell_run(folder: Path, *, finish: bool = True, run_id: str | None = None) -> RequestLog:
    """A two-turn run: `echo hi`, then an answer; its decision logged in audit.jsonl."""
    log = RequestLog(folder / "requests.jsonl", run_id=run_id)
    log.request(1, {"model": "m", "input": [{"role": "user", "content": "say hi"}]})
    log.response(1, response("resp_1", shell("call_1", "echo hi")))
    AuditLog(folder / "audit.jsonl").record(
        "decision", what="shell", subject="echo hi", call_id="call_1", decision="allow",
        policy_decision="allow", rule_id="echo", source="p.toml:3", justification="harmless",
        approval=None)
    log.request(2, {"model": "m", "input": [shell_output("call_1", ("hi\n", 0))]})
    log.response(2, response("resp_2", message("hi")))
    if finish:
        log.summary({"final_text": "hi", "reason": "answered", "exit_code": 0, "turns": [],
                     "usage": {"total_tokens": 4}, "tool_calls": 1, "wall_s": 0.5})
    return log


def test_a_run_folder(tmp_path: Path) -> None:
    one_shell_run(tmp_path)
    run = load_run(tmp_path)
    (call,) = run.calls
    assert isinstance(call.view, ShellView)
    assert [(c.command, c.stdout, c.exit_code) for c in call.view.commands] == [("echo hi", "hi\n", 0)]
    assert call.view.commands[0].decision is not None and call.view.commands[0].decision.rule_id == "echo"
    assert run.audit.verified and not run.audit.head_checked
    assert run.meta["task"] == "say hi" and run.result is not None
    assert write_report(tmp_path) == tmp_path / "report.html"


def test_a_run_that_never_finished(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    log.request(1, {"model": "m", "input": [{"role": "user", "content": "go"}]})
    log.response(1, response("resp_1", shell("call_1", "make")))
    run = load_run(tmp_path)
    assert run.result is None
    (call,) = run.calls
    assert (call.status, call.flags) == ("unanswered", ["error"])
    html = render(run)
    assert "the run did not finish" in html and "no output was sent for this call" in html


def test_summary_json_stands_in_for_a_missing_summary_record(tmp_path: Path) -> None:
    one_shell_run(tmp_path, finish=False)
    (tmp_path / "summary.json").write_text(json.dumps(
        {"kind": "summary", "result": {"reason": "max_turns", "exit_code": 3, "final_text": ""}}))
    run = load_run(tmp_path)
    assert run.result is not None and (run.result["reason"], run.result["exit_code"]) == ("max_turns", 3)


def test_a_tampered_decision_log_is_reported_broken(tmp_path: Path) -> None:
    one_shell_run(tmp_path)
    AuditLog(tmp_path / "audit.jsonl").record("decision", what="shell", subject="ls", call_id="x",
                                             decision="allow")
    audit = tmp_path / "audit.jsonl"
    audit.write_bytes(audit.read_bytes().replace(b'"harmless"', b'"harmles5"'))
    run = load_run(tmp_path)
    assert run.audit.verified is False
    assert any(p.startswith("line 1:") for p in run.audit.problems)
    html = render(run)
    assert ">broken</span>" in html and "line 1: the record was changed" in html


def test_the_head_in_the_summary_anchors_the_chain(tmp_path: Path) -> None:
    one_shell_run(tmp_path, finish=False)
    head: Any = AuditLog(tmp_path / "audit.jsonl").head
    head = head() if callable(head) else head  # a str attribute, or a method giving a Head
    digest = head if isinstance(head, str) else head.sha256
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"result": {"reason": "answered"}, "audit_head": {"sha256": digest}}))
    run = load_run(tmp_path)
    assert run.audit.verified and run.audit.head_checked
    AuditLog(tmp_path / "audit.jsonl").record("decision", what="shell", subject="x", call_id="y",
                                             decision="allow")  # a record the head does not cover
    run = load_run(tmp_path)
    assert not run.audit.verified or run.audit.after_head == 1  # refused, or shown as not covered
    html = render(run)
    assert ">broken</span>" in html or "1 later records" in html
    summary.write_text(json.dumps({"result": {"reason": "answered"}, "audit_head": "1" * 64}))
    assert not load_run(tmp_path).audit.verified  # a head the log does not reach
    audit = tmp_path / "audit.jsonl"
    audit.write_bytes(audit.read_bytes().replace(b'"harmless"', b'"harmles5"'))
    summary.write_text(json.dumps({"result": {"reason": "answered"}, "audit_head": {"sha256": digest}}))
    assert not load_run(tmp_path).audit.verified  # a record before the head was changed


def test_a_log_several_runs_share(tmp_path: Path) -> None:
    """Today's default: reports/live-requests.jsonl and reports/audit.jsonl hold every run, and
    a scripted model reuses call ids. The report shows one run, with its own decisions only."""
    lines = []
    audit = AuditLog(tmp_path / "audit.jsonl")
    for n, when in ((1, time.time() - 3600), (2, None)):
        if when is None:
            audit.record("decision", what="shell", subject="echo 2", call_id="call_1",
                         decision="deny", rule_id="second")
            when = time.time()
        base = {"run_id": f"run{n}", "time": when}
        lines += [{**base, "kind": "request", "turn": 1, "body": {"model": "m", "input": "go"}},
                  {**base, "kind": "response", "turn": 1, "body": response("r", shell("call_1", f"echo {n}"))}]
    (tmp_path / "live-requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    latest = load_run(tmp_path)
    assert latest.run_id == "run2" and latest.files.report == tmp_path / "live-requests.run2.report.html"
    assert [d.rule_id for d in latest.decisions] == ["second"]
    assert any("holds 2 runs" in p for p in latest.problems)
    first = load_run(tmp_path / "live-requests.jsonl", run_id="run1")
    assert first.run_id == "run1" and first.decisions == []  # the decision is the other run's
    assert first.files.report == tmp_path / "live-requests.run1.report.html"
    with pytest.raises(RunNotFound, match="no run 'run9'"):
        load_run(tmp_path, run_id="run9")


def test_screenshot_references_name_files_only_by_their_hash(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    calls = [{"type": "computer_call", "id": f"cu_{i}", "call_id": f"c{i}", "status": "completed",
              "actions": [{"type": "click", "button": "left", "x": 5, "y": 5}], "pending_safety_checks": []}
             for i in range(3)]
    log.request(1, {"model": "m", "input": "look"})
    log.response(1, response("r1", *calls))
    real = png_url()
    outputs = [{"type": "computer_call_output", "call_id": "c0", "output": {"type": "computer_screenshot",
                                                                         "image_url": real}},
               {"type": "computer_call_output", "call_id": "c1", "output": {
                   "type": "computer_screenshot", "image_url": "screenshot:sha256:../../../etc/passwd"}},
               {"type": "computer_call_output", "call_id": "c2", "output": {
                   "type": "computer_screenshot", "image_url": "screenshot:sha256:" + "a" * 64}}]
    log.request(2, {"model": "m", "input": outputs})
    run = load_run(tmp_path)
    views = [c.view for c in run.calls]
    assert all(isinstance(v, ComputerView) for v in views)
    first, crafted, missing = views
    assert isinstance(first, ComputerView) and isinstance(crafted, ComputerView)
    assert isinstance(missing, ComputerView)
    assert first.after is not None and (tmp_path / "screenshots" / f"{first.after}.png").is_file()
    assert crafted.after is None and crafted.before == first.after  # the crafted one is no image
    assert missing.after == "a" * 64 and missing.before == first.after
    html = render(run)
    assert html.count(f".t-{first.after}{{background-image:url(data:image/png;base64,") == 1
    assert html.count(f"t-{first.after}") == 4  # stored once, shown three times
    assert "screenshot aaaaaaaaaaaa… not found" in html and "passwd" not in html


def test_hostile_text_is_escaped_everywhere(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl", run_id=HOSTILE)
    log.request(1, {"model": HOSTILE, "input": HOSTILE, "instructions": HOSTILE})
    item = shell("call_1", HOSTILE)
    item["call_id"] = 'x" onmouseover="window.pwned=3'
    log.response(1, response("r1", message(HOSTILE + "\u202eevil\x1b[2J"), item))
    log.request(2, {"model": "m", "input": [
        {"type": "shell_call_output", "call_id": item["call_id"],
         "output": [{"stdout": HOSTILE, "stderr": HOSTILE, "outcome": {"type": "exit", "exit_code": 0}}]}]})
    AuditLog(tmp_path / "audit.jsonl").record(
        "decision", what="shell", subject=HOSTILE, call_id=item["call_id"], decision="deny",
        rule_id=HOSTILE, source=HOSTILE, justification=HOSTILE, approval=HOSTILE)
    run = load_run(tmp_path)
    html = render(run)
    assert "<script>window" not in html and "<img src=x" not in html
    assert 'onmouseover="window' not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert "\\u202eevil\\x1b[2J" in html  # a bidi override and an escape shown, not acted on
    shared = report_for(dataclasses.replace(run.files, own_audit=False), "../../" + HOSTILE)
    assert shared.parent == tmp_path and shared.name.startswith("requests._")


def test_secrets_in_the_decision_log_are_redacted_as_in_the_request_log(tmp_path: Path) -> None:
    one_shell_run(tmp_path)
    AuditLog(tmp_path / "audit.jsonl").record(
        "decision", what="shell", subject="curl -H 'Authorization: Bearer abcdefghijklmnop' "
        "--data sk-live1234567890", call_id="call_1", decision="deny")
    html = render(load_run(tmp_path))
    assert "abcdefghijklmnop" not in html and "sk-live1234567890" not in html
    assert "Bearer [REDACTED]" in html and "sk-[REDACTED]" in html


def test_a_retried_turn_an_api_error_notes_and_hosted_items(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    log.request(1, {"model": "m", "input": "go"})
    log.response(1, response("r1", shell("never", "rm -rf /"), status="incomplete"))
    log.response(1, response("r1b", shell("call_1", "true"),
                             {"type": "web_search_call", "id": "ws_1", "status": "completed"}))
    log.request(2, {"model": "m", "input": [
        shell_output("call_1", ("", 0)),
        {"type": "message", "role": "developer",
         "content": "sandloop notes about the tool calls just answered:\n- action 2 failed: gone"}]})
    log.event("error", 2, status=429, body={"error": {"message": "slow down"}})
    run = load_run(tmp_path)
    first, second = run.turns
    assert first.retried and [c.call_id for c in first.calls] == ["call_1"]
    notes = [(e.kind, e.text) for e in first.entries if isinstance(e, Note)]
    assert ("note", "- action 2 failed: gone") in notes
    assert any(kind == "hosted" and text.startswith("web_search_call") for kind, text in notes)
    assert [(e.kind, e.text.startswith("API error 429")) for e in second.entries if isinstance(e, Note)] \
        == [("error", True)] and len(second.entries) == 1


def test_a_stateless_run_through_the_python_api(tmp_path: Path) -> None:
    """store:false replays every output each turn: each call is shown once, with its output."""
    tools = Toolbox()
    tools.functions.add(FunctionTool("add", lambda a, b: a + b, parameters={
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}))
    script = [[function_call("add", {"a": 1, "b": 2})], [function_call("add", {"a": 3, "b": 4})],
              [message("7")]]
    result = asyncio.run(run(script, tools, RequestLog(tmp_path / "requests.jsonl"), stateless=True))
    loaded = load_run(tmp_path)
    assert [len(t.calls) for t in loaded.turns] == [1, 1, 0]
    outputs = [c.view.output for c in loaded.calls if isinstance(c.view, GenericView)]
    assert outputs == ["3", "7"] and loaded.meta["stateless"] is True
    assert loaded.result is not None and loaded.result["tool_calls"] == result.tool_calls == 2


def test_the_patch_envelope_of_the_custom_tool(tmp_path: Path) -> None:
    envelope = ("*** Begin Patch\n*** Add File: new.md\n+# New\n+line\n*** Update File: a.py\n"
                "*** Move to: b.py\n@@ def f():\n-    return 1\n+    return 2\n*** Delete File: gone.txt\n"
                "*** End Patch\n")
    log = RequestLog(tmp_path / "requests.jsonl")
    log.request(1, {"model": "m", "input": "go"})
    log.response(1, response("r1", {"type": "custom_tool_call", "id": "ctc_1", "call_id": "p1",
                                    "name": "apply_patch", "input": envelope, "status": "completed"}))
    log.request(2, {"model": "m", "input": [{"type": "custom_tool_call_output", "call_id": "p1",
                                             "output": "applied 3 operations"}]})
    (call,) = load_run(tmp_path).calls
    assert isinstance(call.view, PatchView)
    assert [(f.op, f.path, f.move_to, f.added, f.removed) for f in call.view.files] == [
        ("Add", "new.md", None, 2, 0), ("Update", "a.py", "b.py", 1, 1), ("Delete", "gone.txt", None, 0, 0)]
    assert call.view.message == "applied 3 operations" and call.status == "ok"


def test_where_runs_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert state_dir() == tmp_path / "state" / "sandloop" / "runs"
    assert latest_run() is None
    older, newer = state_dir() / "20250101-a", state_dir() / "20240101-b"
    for folder, age in ((older, 100), (newer, 10)):
        folder.mkdir(parents=True)
        one_shell_run(folder)
        stamp = time.time() - age
        os.utime(folder / "requests.jsonl", (stamp, stamp))
    assert latest_run() == newer  # the run that wrote last, whatever its name
    (state_dir() / "not-a-run").mkdir()
    assert latest_run() == newer
    assert resolve(None).requests == newer / "requests.jsonl"
    assert load_run(None).files.report == newer / "report.html"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunNotFound, match="no run found"):
        resolve(None, state=tmp_path / "empty")
    with pytest.raises(RunNotFound, match="not a run folder"):
        resolve(tmp_path / "state")
    other = tmp_path / "harness"
    other.mkdir()
    one_shell_run(other)
    (other / "requests.jsonl").rename(other / "wire.jsonl")
    assert resolve(other).requests == other / "wire.jsonl"  # its one log, whatever its name
    assert resolve(other).audit == other / "audit.jsonl"


def test_fields_a_run_may_also_log(tmp_path: Path) -> None:
    """What the report reads when the run logs it: per-command outcomes (duration), who answered
    a safety check, the page's URL after a computer call; a refused check when the run stops."""
    log = RequestLog(tmp_path / "requests.jsonl")
    audit = AuditLog(tmp_path / "audit.jsonl")
    checks = [{"id": "sc_1", "code": "irrelevant_domain", "message": "odd"}]
    computer = {"type": "computer_call", "id": "cu_1", "call_id": "c1", "status": "completed",
                "actions": [{"type": "screenshot"}], "pending_safety_checks": checks}
    log.request(1, {"model": "m", "input": "go"})
    log.response(1, response("r1", shell("s1", "make"), computer))
    audit.record("decision", what="shell", subject="make", call_id="s1", decision="allow", rule_id="make")
    audit.record("outcome", what="shell", subject="make", call_id="s1", exit_code=0, duration_s=1.25)
    audit.record("decision", what="safety_check", subject="sc_1", call_id="c1", decision="acknowledge",
                 policy_decision="prompt", approval="acknowledged at the terminal")
    log.request(2, {"model": "m", "input": [
        shell_output("s1", ("", 0)),
        {"type": "computer_call_output", "call_id": "c1", "acknowledged_safety_checks": checks,
         "output": {"type": "computer_screenshot", "image_url": png_url()}}]})
    log.response(2, response("r2", {**computer, "id": "cu_2", "call_id": "c2",
                                    "pending_safety_checks": [{**checks[0], "id": "sc_2"}]}))
    audit.record("outcome", action="computer", subject="https://example.test/b", call_id="c2",
                 outcome="ok", detail="")
    log.summary({"reason": "safety_check", "exit_code": 4, "detail": "safety check sc_2 refused: no",
                 "turns": [{"index": 1, "calls": [{"call_id": "c1", "url": "https://example.test/a"}]}]})
    run = load_run(tmp_path)
    make, first, second = run.calls
    assert isinstance(make.view, ShellView) and make.view.commands[0].duration_s == 1.25
    assert isinstance(first.view, ComputerView) and isinstance(second.view, ComputerView)
    assert [(c.answer, c.by) for c in first.view.safety] == [("acknowledged", "acknowledged at the terminal")]
    assert (first.view.url, first.view.url_known_from) == ("https://example.test/a", "the browser, after the actions")
    assert second.view.url == "https://example.test/b" and second.view.before == first.view.after
    assert [(c.answer, c.by) for c in second.view.safety] == [("refused", "safety check sc_2 refused: no")]
    assert second.status == "denied" and second.flags == ["denied"]
    html = render(run)
    assert "acknowledged at the terminal" in html and "1.2 s" in html


def test_images_a_log_kept_inline(tmp_path: Path) -> None:
    """A log not written by RequestLog may keep screenshots as data: URLs: they are shown too."""
    lines = [
        {"run_id": "r", "kind": "response", "turn": 1, "body": response("r1", {
            "type": "computer_call", "id": "cu_1", "call_id": "c1", "status": "completed",
            "actions": [{"type": "screenshot"}], "pending_safety_checks": []}, {
            "type": "function_call", "id": "fc_1", "call_id": "f1", "name": "shot", "arguments": "{}",
            "status": "completed"})},
        {"run_id": "r", "kind": "request", "turn": 2, "body": {"input": [
            {"type": "computer_call_output", "call_id": "c1",
             "output": {"type": "computer_screenshot", "image_url": png_url("blue", (30, 20))}},
            {"type": "function_call_output", "call_id": "f1", "output": [
                {"type": "input_text", "text": "here"},
                {"type": "input_image", "image_url": png_url("green", (10, 10))},
                {"type": "input_image", "image_url": "data:image/png;base64,not base64!"}]}]}}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = load_run(tmp_path / "log.jsonl")
    computer, function = (c.view for c in run.calls)
    assert isinstance(computer, ComputerView) and isinstance(function, GenericView)
    assert computer.after is not None and len(function.images) == 1
    assert set(run.images) == {computer.after, *function.images}
    html = render(run)
    assert html.count("{background-image:url(data:image/png;base64,") == 2
    assert 'data-width="30" data-height="20"' in html


def test_a_long_run_renders_its_rows_as_they_come_into_view(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    log.request(1, {"model": "m", "input": "go"})
    log.response(1, response("r1", *(shell(f"c{i}", "true") for i in range(LAZY_ROWS + 1))))
    assert '<body class="lazy">' in render(load_run(tmp_path))
    one_shell_run(tmp_path / "short")
    assert "<body>" in render(load_run(tmp_path / "short"))
