"""Tools and reasoning against a live server's model named "tools" (the fixture server
serves one: random weights, a Qwen3-style template). Random weights never call a tool on
their own, so the calls come from tool choice (the grammar); thinking is off so the answer
is not all reasoning. Without a "tools" model these skip, also with MLXGRPC_REQUIRE_LIVE=1:
the default server never has one."""

from __future__ import annotations

import json

import grpc
import pytest

from mlxgrpc_client import error_details, pb

WEATHER = {"name": "get_weather", "description": "The current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                          "required": ["city"], "additionalProperties": False}}
TIME = {"name": "get_time", "description": "The current time in a timezone.",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 16}},
                       "required": ["timezone"], "additionalProperties": False}}
TOOLS = [WEATHER, TIME]
REQUIRED_KEY = {t["name"]: t["parameters"]["required"][0] for t in TOOLS}
ASK = [("user", "What is the weather in Paris, and the time there?")]
#: One call of either tool fits (string arguments are at most 16 characters); with parallel
#: calls allowed, random weights go on calling until max_tokens cuts a call short.
CALL_TURN = dict(max_tokens=96, enable_thinking=False, parallel_tool_calls=False)


@pytest.fixture(scope="module")
def tools_model(models) -> pb.ModelInfo:
    found = [m for m in models if m.name == "tools"]
    if not found:  # a plain skip: the default server never has this model
        pytest.skip("the server has no model named 'tools' (the fixture server serves one; the default never does)")
    return found[0]


def check_calls(result, names=REQUIRED_KEY) -> None:
    """The turn ended with at least one call of the given tools, arguments as they require."""
    assert result.finish_reason == pb.FINISH_REASON_TOOL_CALLS, (result.text, result.tool_calls)
    assert len(result.tool_calls) >= 1
    for call in result.tool_calls:
        assert call.name in names and call.id
        arguments = json.loads(call.arguments_json)
        assert isinstance(arguments, dict) and names[call.name] in arguments, call


def test_model_info_reports_tool_calling(client, tools_model):
    chat = client.model_info("tools").capabilities.chat
    assert chat.tool_calling is True and chat.tool_choice_enforced is True
    assert chat.tool_parser and chat.tool_call_start
    assert tools_model.capabilities.chat == chat


def test_required_calls_a_tool(client, tools_model):
    result = client.generate(ASK, model="tools", tools=TOOLS, tool_choice="required", **CALL_TURN).collect()
    check_calls(result)
    assert len(result.tool_calls) == 1
    marker = tools_model.capabilities.chat.tool_call_start
    assert marker not in result.text  # the call's markup is not part of the answer
    # The streamed pieces join to the same calls.
    def calls(calls):
        return [(c.id, c.name, json.loads(c.arguments_json)) for c in calls]
    assert calls(result.streamed_tool_calls) == calls(result.tool_calls)


def test_function_calls_that_function(client, tools_model):
    result = client.generate(ASK, model="tools", tools=TOOLS, tool_choice={"function_name": "get_time"},
                             **CALL_TURN).collect()
    check_calls(result, {"get_time": "timezone"})
    assert len(result.tool_calls) == 1  # parallel_tool_calls=False


def test_none_calls_no_tool(client, tools_model):
    result = client.generate(ASK, model="tools", tools=TOOLS, tool_choice="none", max_tokens=16,
                             enable_thinking=False).collect()
    assert result.tool_calls == [] and result.streamed_tool_calls == []
    assert result.finish_reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH)


def test_thinking_is_kept_out_of_the_text(client, tools_model):
    if not tools_model.capabilities.chat.reasoning_start:
        pytest.skip("the 'tools' model has no thinking markers")
    # The template opens thinking unless enable_thinking is false; random weights never close it.
    thinking = client.generate(ASK, model="tools", max_tokens=8).collect()
    assert thinking.reasoning and thinking.text == ""
    assert len(thinking.token_ids) == 8


def test_tools_need_a_model_with_tool_calling(client, models, tools_model):
    plain = [m for m in models if m.kind == pb.MODEL_KIND_GENERATION and not m.capabilities.chat.tool_calling]
    if not plain:
        pytest.skip("every generation model of the server has tool calling")
    with pytest.raises(grpc.RpcError) as info:
        client.generate(ASK, model=plain[0].name, tools=TOOLS, max_tokens=4).collect()
    assert error_details(info.value).code == grpc.StatusCode.FAILED_PRECONDITION


async def test_agent_loop_in_asyncio(aclient, tools_model):
    conversation = list(ASK)
    first = await aclient.generate(conversation, model="tools", tools=TOOLS, tool_choice="required",
                                   **CALL_TURN).collect()
    check_calls(first)
    conversation.append(first.assistant_message())
    for call in first.tool_calls:
        conversation.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"ok": True})})
    answer = await aclient.generate(conversation, model="tools", tools=TOOLS, tool_choice="none",
                                    max_tokens=16, enable_thinking=False).collect()
    assert answer.tool_calls == []
    assert answer.finish_reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH)
    assert answer.prompt_tokens > first.prompt_tokens  # the call and its results are in the prompt
