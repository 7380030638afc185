"""The real ``Runner`` and ``OpenAIResponsesModel``, the real openai client, sandloop's strict
fake Responses server: one agent over sandloop's tools, as the adapter tests drive it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import openai

from executor.testing import FakeResponsesServer, ScriptedModel


class NeverAsked:
    """The run's own approvals: the SDK's approval flow must answer every prompt instead."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request: Any) -> bool:
        self.asked.append(request.subject)
        return False


@dataclass
class Sdk:
    """One agent over sandloop tools, talking to the fake server."""

    agent: Any  # agents.Agent
    server: FakeResponsesServer

    async def run(self, task: Any) -> Any:
        """``Runner.run`` with tracing off; ``task`` is a string or a RunState."""
        from agents import RunConfig, Runner

        return await Runner.run(self.agent, task, run_config=RunConfig(tracing_disabled=True))

    async def round_trip(self, result: Any) -> Any:
        """The result's state through its JSON form, as a resumed process would see it."""
        from agents import RunState

        return await RunState.from_string(self.agent, result.to_state().to_string())


@asynccontextmanager
async def sdk(tools: Any, turns: Sequence[Any]) -> AsyncIterator[Sdk]:
    """An agent with ``tools`` (a SandloopTools) whose model plays ``turns``."""
    from agents import Agent
    from agents.models.openai_responses import OpenAIResponsesModel

    with FakeResponsesServer(ScriptedModel(turns)) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test-agents-000000",
                                    max_retries=0)
        model = OpenAIResponsesModel(model="gpt-5.4", openai_client=client)
        try:
            yield Sdk(Agent(name="coder", instructions="fix it", model=model, tools=tools.all), server)
        finally:
            await client.close()
        assert not server.rejections, server.rejections  # the strict server took every request
