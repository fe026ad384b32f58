"""An agent loop with the mlx-grpc Python client: the model calls a tool, the tool runs
here, and its result goes back for the answer.

    MLXGRPC_ADDRESS=localhost:50052 MLXGRPC_MODEL=tools python examples/agent.py

MLXGRPC_MODEL (default "tools", the fixture server's tool-capable model) must have tool
calling; MLXGRPC_TOKEN, when set, is the bearer token of every call. The first turn must
call a tool (tool choice REQUIRED); the second may not (NONE) and answers. Exits 1 if the
first turn did not end with a tool call.
"""

from __future__ import annotations

import json
import os
import sys

from mlxgrpc_client import connect, pb

GET_WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 16}}},
}


def get_weather(city: str) -> dict:
    """The tool, run locally: a fake forecast."""
    return {"city": city, "temperature_c": 21, "conditions": "sunny"}


def main() -> int:
    address = os.environ.get("MLXGRPC_ADDRESS", "localhost:50051")
    model = os.environ.get("MLXGRPC_MODEL", "tools")
    with connect(address, token=os.environ.get("MLXGRPC_TOKEN") or None, timeout=60) as client:
        chat = client.model_info(model).capabilities.chat
        print(f"model {model}: tool calling={chat.tool_calling} (parser {chat.tool_parser or '-'}), "
              f"enforced tool choice={chat.tool_choice_enforced}, thinking={bool(chat.reasoning_start)}")

        conversation = [("system", "You answer questions about the weather."),
                        ("user", "What is the weather in Paris?")]
        # Turn 1: the model must call a tool (the grammar enforces the call and its arguments);
        # one call, so that it fits in max_tokens.
        first = client.generate(conversation, model=model, tools=[GET_WEATHER], tool_choice="required",
                                parallel_tool_calls=False, enable_thinking=False, max_tokens=96).collect()
        print(f"\n--- turn 1 [{pb.FinishReason.Name(first.finish_reason)}] ---")
        for call in first.tool_calls:
            print(f"call {call.id}: {call.name}({call.arguments_json})")
        if first.finish_reason != pb.FINISH_REASON_TOOL_CALLS or not first.tool_calls:
            print(f"expected a tool call, got {first.text!r}", file=sys.stderr)
            return 1

        # Run each call here; send the assistant's message and one "tool" message per call.
        conversation.append(first.assistant_message())
        for call in first.tool_calls:
            output = get_weather(**json.loads(call.arguments_json))
            print(f"result {call.id}: {json.dumps(output)}")
            conversation.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(output)})

        # Turn 2: no more calls; the model answers from the results.
        answer = client.generate(conversation, model=model, tools=[GET_WEATHER], tool_choice="none",
                                 enable_thinking=False, max_tokens=48).collect()
        print(f"\n--- turn 2 [{pb.FinishReason.Name(answer.finish_reason)}] ---")
        print(answer.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
