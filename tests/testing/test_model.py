"""The scripted model's responses are valid SDK Responses and follow the script's options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from executor.testing import (
    FakeResponsesServer,
    ScenarioExhausted,
    ScriptedModel,
    Turn,
    Usage,
    failed,
    incomplete,
    message,
    shell_call,
)

from .cases import TOOLS, USER
from .conftest import create
from .test_accepts import every_call_turn

Serve = Callable[..., FakeResponsesServer]
REQUEST: dict[str, Any] = {"model": "gpt-test", "input": [USER], "tools": TOOLS,
                           "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                           "tools": [{"type": "shell"}]}}


def test_every_helper_item_yields_a_valid_response() -> None:
    model = ScriptedModel([every_call_turn(), incomplete(shell_call(["ls"])), failed()])
    for _ in range(3):
        response = Response.model_validate(model.respond(REQUEST, [USER]))
        assert response.tools and not isinstance(response.tool_choice, str)
        assert response.tool_choice.type == "allowed_tools"  # echoed from the request
    assert model.turns_left == 0
    with pytest.raises(ScenarioExhausted, match="scenario exhausted"):
        model.respond(REQUEST, [USER])


def test_ids_call_ids_and_status_are_filled() -> None:
    raw = ScriptedModel([[shell_call(["ls"]), message("hi")]]).respond(REQUEST, [USER])
    call, text = raw["output"]
    assert call["id"].startswith("sh_") and call["call_id"].startswith("call_")
    assert call["status"] == text["status"] == "completed"
    assert raw["id"].startswith("resp_") and raw["model"] == "gpt-test"
    assert raw["usage"]["total_tokens"] == raw["usage"]["input_tokens"] + raw["usage"][
        "output_tokens"]


def test_incomplete_failed_and_usage_through_the_client(serve: Serve) -> None:
    server = serve([incomplete(shell_call(["ls"]), usage=Usage(100, 50)),
                    Turn([message("fine")], usage=Usage(7, 3, total_tokens=11)),
                    failed("boom", code="rate_limit_exceeded")])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    cut = create(client, model="gpt-test", input="hi", max_output_tokens=16)
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    call = cut.output[0]
    assert call.type == "shell_call"
    assert call.status == "incomplete"  # a cut-off call is not to be executed
    assert cut.usage is not None and cut.usage.total_tokens == 150
    # The incomplete call needs no answer: a retry on the same base is fine.
    fine = create(client, model="gpt-test", input="hi", max_output_tokens=64)
    assert fine.usage is not None and fine.usage.total_tokens == 11
    broken = create(client, model="gpt-test", input="hi")
    assert broken.status == "failed"
    assert broken.error is not None and broken.error.code == "rate_limit_exceeded"


def test_dynamic_turn_sees_the_request_and_may_return_a_response_dict(serve: Serve) -> None:
    def echo(request: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"output": [{"type": "message", "id": "msg_custom", "role": "assistant",
                            "status": "completed", "content": [
                                {"type": "output_text", "annotations": [],
                                 "text": f"{request['instructions']}/{len(history)}"}]}]}

    client = openai.OpenAI(base_url=serve([echo]).base_url, api_key="test", max_retries=0)
    response = create(client, model="gpt-test", input="hi", instructions="be brief")
    assert response.output_text == "be brief/1"
    assert response.output[0].id == "msg_custom"


def test_exhausted_scenario_is_a_clear_500_without_retries(serve: Serve) -> None:
    server = serve([[message("one")]])
    client = openai.OpenAI(base_url=server.base_url, api_key="test")  # default retries
    create(client, model="gpt-test", input="hi")
    with pytest.raises(openai.InternalServerError, match="scenario exhausted"):
        create(client, model="gpt-test", input="again")
    assert len(server.requests) == 2  # x-should-retry: false stopped the client's retries


def test_an_invalid_scripted_item_is_reported_as_the_scenario_s_fault(serve: Serve) -> None:
    client = openai.OpenAI(base_url=serve([[{"type": "shell_call", "action": "ls"}]]).base_url,
                           api_key="test", max_retries=0)
    with pytest.raises(openai.InternalServerError, match="scripted model produced an invalid"):
        create(client, model="gpt-test", input="hi")


def test_every_output_item_replays_as_valid_input_once_unset_fields_are_dropped() -> None:
    """What the server issues, the client can send back (`model_dump(exclude_unset=True)`)."""
    from executor.testing import validate_input_items

    response = Response.model_validate(ScriptedModel([every_call_turn()]).respond(REQUEST, []))
    replay = [item.model_dump(mode="json", exclude_unset=True) for item in response.output]
    assert validate_input_items(replay) == replay


def test_a_scripted_turn_that_raises_is_a_500_naming_the_error(serve: Serve) -> None:
    def strict_turn(request: dict[str, Any], history: list[dict[str, Any]]) -> list[Any]:
        assert request.get("instructions"), "instructions must be resent every turn"
        return [message("ok")]

    client = openai.OpenAI(base_url=serve([strict_turn]).base_url, api_key="test",
                           max_retries=0)
    with pytest.raises(openai.InternalServerError,
                       match="AssertionError: instructions must be resent every turn"):
        create(client, model="gpt-test", input="hi")
