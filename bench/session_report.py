"""Benchmark: the session report of a large run — 500 calls, 50 screenshots.

The run is written with the real writers (``RequestLog``: redaction, screenshots stored by
sha256; ``AuditLog``: the hash chain) in the shape the loop logs: 50 turns of 10 calls (six
shell calls, two patches, a function call and a computer call each), every shell command and
patched file with its decision, a summary record. Screenshots are 1280×800 pages of text and
boxes, distinct from each other.

Figures: the time ``write_report`` takes (target ≤ 2 s), and the time Chromium takes to open the
file from the file system to its load event (target ≤ 1 s), with the HTML size. Baselines from
the same run: reading the run's files alone (parse every log line, read every screenshot), and
Chromium opening a plain page.

    .venv/bin/python bench/session_report.py [--quick]
"""

from __future__ import annotations

import base64
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, median, rounds
from executor.audit import RequestLog
from executor.report import write_report
from policies.audit import AuditLog

TURNS, SHOTS_EVERY = 50, 1  # one computer call per turn: 50 screenshots
CHROMIUM = "/usr/bin/chromium"


def screenshot(n: int) -> str:
    """A page-like 1280×800 PNG (text lines, boxes), as the data URL the loop logs."""
    rng = random.Random(n)
    image = Image.new("RGB", (1280, 800), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 1280, 56), fill=(rng.randrange(256), 60, 120))
    draw.text((20, 20), f"page {n} — search results", fill="white")
    for row in range(44):
        words = " ".join(rng.choice(["alpha", "beta", "report", "sandbox", "policy", "click",
                                     "result", "the", "of", "and", "search"]) for _ in range(14))
        draw.text((40 + (row % 3) * 4, 70 + row * 16), f"{row:02d} {words}", fill=(40, 40, 40))
    for _ in range(6):
        x, y = rng.randrange(900), rng.randrange(100, 700)
        draw.rectangle((x, y, x + rng.randrange(80, 300), y + rng.randrange(20, 90)),
                       outline=(30, 90, 200), width=2, fill=(rng.randrange(200, 256), 240, 250))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def shell_output(rng: random.Random) -> tuple[str, int]:
    lines = rng.choice([1, 3, 12, 200])
    return "".join(f"line {i} of some command output\n" for i in range(lines)), rng.choice([0, 0, 0, 1])


def write_run(folder: Path) -> int:
    """The 500-call run; returns the number of calls."""
    rng = random.Random(7)
    log, audit = RequestLog(folder / "requests.jsonl"), AuditLog(folder / "audit.jsonl")
    pending: list[dict[str, Any]] = [{"role": "user", "content": "a long task"}]
    turns, calls = [], 0
    for turn in range(1, TURNS + 1):
        log.request(turn, {"model": "bench", "input": pending, "tools": [{"type": "shell"}]})
        items: list[dict[str, Any]] = [{"type": "reasoning", "id": f"rs_{turn}",
                                        "summary": [{"type": "summary_text", "text": "thinking " * 20}]}]
        outputs: list[dict[str, Any]] = []
        records = []
        for k in range(10):
            call_id = f"call_{turn}_{k}"
            if k < 6:
                commands = [f"grep -rn pattern{k} src/", "make test"][: rng.choice([1, 2])]
                items.append({"type": "shell_call", "id": f"sh_{call_id}", "call_id": call_id,
                              "status": "completed", "action": {"commands": commands},
                              "environment": {"type": "local"}})
                chunks = []
                for command in commands:
                    out, code = shell_output(rng)
                    audit.record("decision", what="shell", subject=command, call_id=call_id,
                                 decision="allow", policy_decision="allow", rule_id="tests",
                                 source="policy.toml:12", justification="test runners are allowed")
                    chunks.append({"stdout": out, "stderr": "" if code == 0 else "failed\n",
                                   "outcome": {"type": "exit", "exit_code": code}})
                outputs.append({"type": "shell_call_output", "call_id": call_id, "output": chunks})
            elif k < 8:
                path = f"src/module_{turn}_{k}.py"
                diff = "@@ def f():\n" + "".join(f"-    old {i}\n+    new {i}\n    same {i}\n" for i in range(7))
                items.append({"type": "apply_patch_call", "id": f"apc_{call_id}", "call_id": call_id,
                              "status": "completed",
                              "operation": {"type": "update_file", "path": path, "diff": diff}})
                audit.record("decision", what="patch", subject=f"update {path}", call_id=call_id,
                             decision="allow", policy_decision="allow", rule_id="files.writable",
                             source="policy.toml:30", justification="writable")
                outputs.append({"type": "apply_patch_call_output", "call_id": call_id,
                                "status": "completed", "output": f"updated {path}: 1 hunk, +7 -7"})
            elif k == 8:
                items.append({"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
                              "name": "lookup", "arguments": json.dumps({"query": "x" * 40}),
                              "status": "completed"})
                outputs.append({"type": "function_call_output", "call_id": call_id,
                                "output": json.dumps({"hits": list(range(30))})})
            else:
                items.append({"type": "computer_call", "id": f"cu_{call_id}", "call_id": call_id,
                              "status": "completed", "pending_safety_checks": [],
                              "actions": [{"type": "click", "button": "left", "x": 300, "y": 200},
                                          {"type": "type", "text": "hello"}]})
                outputs.append({"type": "computer_call_output", "call_id": call_id,
                                "output": {"type": "computer_screenshot", "image_url": screenshot(turn)}})
            records.append({"call_id": call_id, "type": items[-1]["type"], "summary": "", "ok": True,
                            "outcome": "", "duration_s": 0.05})
            calls += 1
        log.response(turn, {"id": f"resp_{turn}", "status": "completed", "model": "bench", "output": items,
                            "usage": {"input_tokens": 900, "output_tokens": 90, "total_tokens": 990}})
        turns.append({"index": turn, "response_id": f"resp_{turn}", "status": "completed",
                      "usage": {"total_tokens": 990}, "request_s": 1.0, "tools_s": 0.5, "total_s": 1.5,
                      "retried": False, "calls": records})
        pending = outputs
    log.request(TURNS + 1, {"model": "bench", "input": pending})
    log.summary({"final_text": "done", "reason": "answered", "exit_code": 0, "turns": turns,
                 "usage": {"total_tokens": 990 * TURNS}, "tool_calls": calls, "wall_s": 90.0})
    return calls


def read_only(folder: Path) -> None:
    """The baseline: what any report must do at least — parse every line, read every image."""
    for name in ("requests.jsonl", "audit.jsonl"):
        for line in (folder / name).read_bytes().splitlines():
            json.loads(line)
    for png in (folder / "screenshots").iterdir():
        png.read_bytes()


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def load_times(paths: list[Path], n: int) -> list[list[float]]:
    """Navigation start to load event end, ms, per path, alternating to share the noise."""
    from playwright.sync_api import sync_playwright

    out: list[list[float]] = [[] for _ in paths]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        for _ in range(n):
            for i, path in enumerate(paths):
                page = browser.new_page()
                page.goto(path.resolve().as_uri(), wait_until="load")
                out[i].append(page.evaluate(
                    "() => { const t = performance.getEntriesByType('navigation')[0];"
                    " return t.loadEventEnd - t.startTime; }") / 1000)
                page.close()
        browser.close()
    return out


def main() -> None:
    n = rounds(7, quick=1)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        folder = Path(tmp) / "run"
        calls = write_run(folder)
        shots = sorted((folder / "screenshots").iterdir())
        write_report(folder)  # warm: imports, the template compiled once
        renders, reads = [], []
        for _ in range(n):
            reads.append(timed(lambda: read_only(folder)))
            renders.append(timed(lambda: write_report(folder)))
        report = folder / "report.html"
        plain = Path(tmp) / "plain.html"
        plain.write_text("<!doctype html><title>plain</title><p>baseline</p>")
        opened, blank = load_times([report, plain], n)
        size = report.stat().st_size
        print(f"session report: {calls} calls, {len(shots)} screenshots "
              f"({sum(p.stat().st_size for p in shots) / 1e6:.1f} MB of PNG)")
        print(f"  HTML: {size / 1e6:.2f} MB")
        judge("render (write_report)", f"{median(renders):.3f} s, {median(renders) / median(reads):.1f}× "
              f"reading the files ({median(reads) * 1000:.0f} ms)", "≤ 2 s", median(renders) <= 2.0)
        judge("open in Chromium (load event)", f"{median(opened):.3f} s, plain page {median(blank) * 1000:.0f} ms",
              "≤ 1 s", median(opened) <= 1.0)


if __name__ == "__main__":
    main()
