"""Test kit for code that drives the OpenAI Responses API: a strict fake server and a scripted model.

The fake server speaks real HTTP on 127.0.0.1, so the real ``openai`` client (sync or
async) talks to it unchanged, and it rejects what the real API rejects, with the real error
text: unanswered calls, orphaned outputs, unknown ``previous_response_id``, stateless
replays that lose reasoning items, and any input item that does not match the SDK's types.

Example::

    import openai
    from executor.testing import FakeResponsesServer, ScriptedModel, function_call, message

    model = ScriptedModel([
        [function_call("get_weather", {"city": "Paris"})],
        [message("It is 22 °C in Paris.")],
    ])
    with FakeResponsesServer(model) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        first = client.responses.create(model="gpt-test", input="Weather in Paris?")
        call = first.output[0]
        final = client.responses.create(
            model="gpt-test", previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": '{"temp_c": 22}'}],
        )
        assert final.output_text == "It is 22 °C in Paris."

Cassettes (:class:`Cassette`) record real sessions as JSONL and replay the model side
offline with :meth:`ScriptedModel.from_cassette`; :func:`compare_tool_outputs` reports where
the tool outputs of a replay differ from the recording.
"""

from .cassette import Cassette, CassetteRecorder, Difference, Exchange, compare_tool_outputs
from .errors import ApiError
from .model import (
    ScenarioExhausted,
    ScriptedModel,
    Turn,
    TurnFunction,
    TurnSpec,
    Usage,
    apply_patch_call,
    computer_call,
    create_file,
    custom_tool_call,
    delete_file,
    failed,
    function_call,
    incomplete,
    local_shell_call,
    mcp_approval_request,
    message,
    program,
    reasoning,
    shell_call,
    tool_search_call,
    update_file,
)
from .schema import TOLERATED_EXTRAS, validate_input_items, validate_tools
from .server import FakeResponsesServer

__all__ = [
    "TOLERATED_EXTRAS",
    "ApiError",
    "Cassette",
    "CassetteRecorder",
    "Difference",
    "Exchange",
    "FakeResponsesServer",
    "ScenarioExhausted",
    "ScriptedModel",
    "Turn",
    "TurnFunction",
    "TurnSpec",
    "Usage",
    "apply_patch_call",
    "compare_tool_outputs",
    "computer_call",
    "create_file",
    "custom_tool_call",
    "delete_file",
    "failed",
    "function_call",
    "incomplete",
    "local_shell_call",
    "mcp_approval_request",
    "message",
    "program",
    "reasoning",
    "shell_call",
    "tool_search_call",
    "update_file",
    "validate_input_items",
    "validate_tools",
]
