"""The fake server rejects what the real API rejects, with the real text, to the real client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from executor.testing import FakeResponsesServer, message

from .cases import REJECTIONS, TOOLS, USER, Rejection
from .conftest import acreate, async_client_for, client_for, create

Serve = Callable[..., FakeResponsesServer]


def _assert_rejected(err: openai.BadRequestError, case: Rejection) -> None:
    assert isinstance(err.body, dict)
    assert err.body["message"] == case.expected
    assert err.body["type"] == "invalid_request_error"
    assert err.body["param"] == case.param
    assert err.status_code == 400


@pytest.mark.parametrize("case", REJECTIONS, ids=[c.name for c in REJECTIONS])
def test_rejected_sync(serve: Serve, case: Rejection) -> None:
    server = serve(case.turns, **case.model_kw)
    client = client_for(server)
    first: dict[str, Any] = {}
    if case.first is not None:
        first = create(client, **case.first).model_dump(mode="json", exclude_none=True)
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, **case.bad(first))
    _assert_rejected(caught.value, case)
    assert server.rejections[-1] == {"error": caught.value.body}


@pytest.mark.parametrize("case", REJECTIONS, ids=[c.name for c in REJECTIONS])
async def test_rejected_async(serve: Serve, case: Rejection) -> None:
    server = serve(case.turns, **case.model_kw)
    async with async_client_for(server) as client:
        first: dict[str, Any] = {}
        if case.first is not None:
            created = await acreate(client, **case.first)
            first = created.model_dump(mode="json", exclude_none=True)
        with pytest.raises(openai.BadRequestError) as caught:
            await acreate(client, **case.bad(first))
    _assert_rejected(caught.value, case)


def test_a_rejected_request_does_not_consume_a_turn(serve: Serve) -> None:
    server = serve([[message("only turn")]])
    client = client_for(server)
    with pytest.raises(openai.BadRequestError):
        create(client, model="gpt-test", input=[USER, {"type": "bogus"}])
    assert create(client, model="gpt-test", input=[USER]).output_text == "only turn"
    assert len(server.requests) == 2 and len(server.responses) == 1


def test_streaming_is_refused(serve: Serve) -> None:
    client = client_for(serve([[message("x")]]))
    with pytest.raises(openai.BadRequestError, match="streaming not supported by the fake server"):
        create(client, model="gpt-test", input="hi", stream=True)


def test_local_shell_call_id_switch_accepts_the_guide_shape(serve: Serve) -> None:
    from executor.testing import local_shell_call

    server = serve([[local_shell_call(["ls"], call_id="call_L")], [message("ok")]],
                   server_kw={"accept_local_shell_call_id": True})
    client = client_for(server)
    first = create(client, model="gpt-test", input=[USER], tools=TOOLS)
    final = create(
        client,
        model="gpt-test", tools=TOOLS, previous_response_id=first.id,
        input=[{"type": "local_shell_call_output", "call_id": "call_L", "output": "a.txt\n"}],
    )
    assert final.output_text == "ok"


def test_retrieve_unknown_and_unstored(serve: Serve) -> None:
    client = client_for(serve([[message("x")]]))
    unstored = create(client, model="gpt-test", input="hi", store=False)
    for response_id in ("resp_nope", unstored.id):
        with pytest.raises(openai.NotFoundError, match=f"Response with id '{response_id}'"):
            client.responses.retrieve(response_id)


def test_chaining_on_an_unstored_response_is_refused(serve: Serve) -> None:
    client = client_for(serve([[message("x")], [message("y")]]))
    unstored = create(client, model="gpt-test", input="hi", store=False)
    with pytest.raises(openai.BadRequestError, match=r"Previous response with id .* not found"):
        create(client, model="gpt-test", input="more",
               previous_response_id=unstored.id)
