"""Fixtures for the fake server's own tests: real servers on 127.0.0.1, real openai clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from executor.testing import FakeResponsesServer, ScriptedModel


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeResponsesServer]]:
    """``serve(turns, **model_kw)`` starts a server for a scenario; all are closed afterwards."""
    servers: list[FakeResponsesServer] = []

    def start(turns: list[Any], *, server_kw: dict[str, Any] | None = None,
              **model_kw: Any) -> FakeResponsesServer:
        server = FakeResponsesServer(ScriptedModel(turns, **model_kw), **(server_kw or {}))
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.close()


def client_for(server: FakeResponsesServer) -> openai.OpenAI:
    # max_retries=0: a test must see the first answer, never a silent retry.
    return openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def async_client_for(server: FakeResponsesServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


# Bodies are plain dicts in these tests (that is what the server must judge), so the calls go
# through `**body` rather than the SDK's TypedDict-typed keyword arguments.
def create(client: openai.OpenAI, **body: Any) -> Response:
    return client.responses.create(**body)


async def acreate(client: openai.AsyncOpenAI, **body: Any) -> Response:
    return await client.responses.create(**body)
