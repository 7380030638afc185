"""The request/response log: secrets redacted, screenshots stored as files, a run summary."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from executor.audit import REDACTED, RequestLog, redact
from executor.handlers.computer import error_screenshot_url
from executor.testing import function_call, message
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from tests.executor.conftest import run_loop

NO_ARGS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def test_redact_secrets_and_keys() -> None:
    value = {"headers": {"Authorization": "Bearer abcdefghijklmnop"},
             "api_key": "whatever", "text": "use sk-proj-ABCDEF1234567890 or Bearer zzzzzzzzzzzz",
             "list": ["the literal hunter2-secret-value"]}
    clean = redact(value, literal="hunter2-secret-value")
    assert clean["headers"]["Authorization"] == REDACTED and clean["api_key"] == REDACTED
    assert "ABCDEF1234567890" not in clean["text"] and "zzzzzzzzzzzz" not in clean["text"]
    assert clean["list"] == [f"the literal {REDACTED}"]


async def test_log_redacts_and_externalizes_screenshots(tmp_path: Path,
                                                        monkeypatch: object) -> None:
    image_url = error_screenshot_url("chart")
    png = base64.b64decode(image_url.split(",", 1)[1])
    digest = hashlib.sha256(png).hexdigest()

    tools = FunctionTools()
    tools.add(FunctionTool("leak", lambda: "the key is sk-live-0123456789abcdef",
                           parameters=NO_ARGS))
    tools.add(FunctionTool("chart", lambda: [
        {"type": "input_text", "text": "chart attached"},
        {"type": "input_image", "image_url": image_url, "detail": "auto"}], parameters=NO_ARGS))
    log = RequestLog(tmp_path / "reports" / "live-requests.jsonl")
    run = await run_loop([[function_call("leak"), function_call("chart")], [message("done")]],
                         Toolbox(functions=tools), log=log)
    # the model really received the secret and the inline image; only the log is cleaned
    assert "sk-live-0123456789abcdef" in run.outputs(1)[0]["output"]
    assert run.outputs(1)[1]["output"][1]["image_url"] == image_url

    text = log.path.read_text()
    assert "0123456789abcdef" not in text and "sk-test-abcdefgh" not in text
    assert "base64," not in text
    assert f"screenshot:sha256:{digest}" in text
    assert (tmp_path / "reports" / "screenshots" / f"{digest}.png").read_bytes() == png
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["kind"] for r in records] == ["request", "response", "request", "response",
                                            "summary"]
    summary = json.loads(log.summary_path.read_text())
    assert summary["result"]["reason"] == "answered" and summary["result"]["exit_code"] == 0
    assert len(summary["result"]["turns"]) == 2
