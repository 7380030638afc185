"""Helpers for the loop's end-to-end tests: the strict fake server and the REAL openai client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from executor.loop import Loop, LoopConfig, RunResult
from executor.testing import FakeResponsesServer, ScriptedModel
from executor.toolbox import Toolbox


@dataclass
class Run:
    result: RunResult
    server: FakeResponsesServer
    events: list[tuple[str, dict[str, Any]]]

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.server.requests

    def outputs(self, request_index: int) -> list[dict[str, Any]]:
        """The tool outputs a request carried (its input items that answer calls)."""
        items = self.requests[request_index]["input"]
        return [i for i in items if isinstance(i, dict) and (
            str(i.get("type", "")).endswith("_output") or i.get("type") == "mcp_approval_response")]


@contextlib.contextmanager
def serve(model: ScriptedModel) -> Iterator[FakeResponsesServer]:
    with FakeResponsesServer(model) as server:
        yield server


async def run_loop(
    turns: Sequence[Any],
    toolbox: Toolbox,
    *,
    task: str = "do the task",
    sync_client: bool = False,
    required_tools: Sequence[str] = (),
    log: Any = None,
    **config: Any,
) -> Run:
    """Serve a scripted scenario and run the loop against it with the real openai client."""
    model = ScriptedModel(turns, required_tools=required_tools)
    events: list[tuple[str, dict[str, Any]]] = []
    with serve(model) as server:
        client: openai.AsyncOpenAI | openai.OpenAI
        if sync_client:
            client = openai.OpenAI(base_url=server.base_url, api_key="sk-test-abcdefgh12345",
                                   max_retries=0)
        else:
            client = openai.AsyncOpenAI(base_url=server.base_url,
                                        api_key="sk-test-abcdefgh12345", max_retries=0)
        cfg = LoopConfig(model="scripted", **config)
        loop = Loop(client, cfg, toolbox, on_event=lambda k, d: events.append((k, d)), log=log)
        try:
            result = await loop.run(task)
        finally:
            if isinstance(client, openai.AsyncOpenAI):
                await client.close()
            else:
                client.close()
        assert not server.rejections, server.rejections  # the strict server accepted everything
        return Run(result, server, events)


@pytest.fixture
def run() -> Any:
    return run_loop
