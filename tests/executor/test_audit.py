"""The request/response log: secrets redacted, screenshots stored as files, a run summary."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from executor.audit import REDACTED, RequestLog, redact
from executor.handlers.computer import error_screenshot_url
from executor.loop import Loop, LoopConfig
from executor.testing import ScriptedModel, function_call, message
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from tests.executor.conftest import run_loop, serve

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


#: Not shaped like ``sk-…``: only the configured value itself can keep it out of the log.
LOCAL_KEY = "local-test-key-4f9a"


async def test_configured_key_of_any_shape_never_reaches_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", LOCAL_KEY)  # restored when the test ends

    def fails(request: dict[str, Any], history: list[Any]) -> Any:
        raise RuntimeError(f"upstream refused key {LOCAL_KEY}")

    tools = FunctionTools()
    tools.add(FunctionTool("leak", lambda: f"the key is {LOCAL_KEY}", parameters=NO_ARGS))
    model = ScriptedModel([[message(f"I was given {LOCAL_KEY}"), function_call("leak")], fails])
    log = RequestLog(tmp_path / "reports" / "live-requests.jsonl")
    with serve(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, max_retries=0)  # key from the env
        try:
            result = await Loop(client, LoopConfig(model="scripted"), Toolbox(functions=tools),
                                log=log).run("do the task")
        finally:
            await client.close()

    # The key really travelled: in a response, in a request body, in an error, in the summary.
    assert LOCAL_KEY in json.dumps(server.requests[1]["input"])
    assert result.reason == "api_error" and LOCAL_KEY in result.detail
    records = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert [r["kind"] for r in records] == ["request", "response", "request", "error", "summary"]
    # ...and no file the log wrote holds it; each place it was is masked instead.
    written = [p for p in (tmp_path / "reports").rglob("*") if p.is_file()]
    assert log.path in written and log.summary_path in written
    for path in written:
        assert LOCAL_KEY.encode() not in path.read_bytes(), path
    for record in records[1:]:
        assert REDACTED in json.dumps(record), record["kind"]
    assert REDACTED in log.summary_path.read_text()


@pytest.mark.parametrize(("key", "word"), [("x", "exit"), ("EMPTY", "NONEMPTY")])
def test_short_configured_key_is_not_masked_inside_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, word: str) -> None:
    """Local servers take keys like ``EMPTY`` or ``x``: masking them inside every word would
    garble the log ("exit" → "e[REDACTED]it")."""
    monkeypatch.setenv("OPENAI_API_KEY", key)
    log = RequestLog(tmp_path / "live-requests.jsonl")
    log.event("note", 1, text=f"the model said {word}, then max_tokens ran out")
    text = json.loads(log.path.read_text())["text"]
    assert text == f"the model said {word}, then max_tokens ran out"
