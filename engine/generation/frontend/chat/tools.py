"""A chat prompt's tools, checked once: names, schemas, tool choice; what the template is
given; and whether a call the model wrote is one of them with valid arguments."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import jsonschema

from ....errors import InvalidRequest, Unsupported
from ....requests import ChatPrompt, Tool, ToolChoiceMode
from ...grammar.formats import nesting_depth
from .syntax import ChatSyntax

MAX_TOOLS = 128
MAX_DEPTH = 32  # nesting of a parameters schema
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
NO_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSet:
    tools: tuple[Tool, ...]
    schemas: dict[str, dict]  # the parsed parameters schema per name

    def template_tools(self) -> list[dict]:
        """The OpenAI-style list HF chat templates iterate over."""
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": self.schemas[t.name]}} for t in self.tools]

    def valid(self, name: str, arguments: object) -> bool:
        """``name`` is one of the tools and ``arguments`` validate against its schema."""
        schema = self.schemas.get(name)
        if schema is None or not isinstance(arguments, dict):
            return False
        return jsonschema.Draft202012Validator(schema).is_valid(arguments)


def tool_set(prompt: ChatPrompt, syntax: ChatSyntax, model: str) -> ToolSet | None:
    """The prompt's tools, or None without tools; InvalidRequest naming the field for bad
    input, Unsupported when the model cannot call tools."""
    check_history(prompt)
    choice = prompt.tool_choice
    if not prompt.tools:
        if choice in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION):
            raise InvalidRequest("chat.tool_choice.mode", f"{choice.value} needs at least one tool in chat.tools")
        return None
    if not syntax.tool_calling:
        raise Unsupported(f"model {model!r} has no tool calling (its chat template and tokenizer define no "
                          "tool-call syntax); send the chat without tools")
    if len(prompt.tools) > MAX_TOOLS:
        raise InvalidRequest("chat.tools", f"at most {MAX_TOOLS} tools, got {len(prompt.tools)}")
    schemas: dict[str, dict] = {}
    for i, tool in enumerate(prompt.tools):
        if not _NAME.fullmatch(tool.name):
            raise InvalidRequest(f"chat.tools[{i}].name",
                                 "must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '-' and '.'")
        if tool.name in schemas:
            raise InvalidRequest(f"chat.tools[{i}].name", f"{tool.name!r} is given twice")
        schemas[tool.name] = _schema(tool.parameters, f"chat.tools[{i}].parameters_json_schema")
    if choice is ToolChoiceMode.FUNCTION and prompt.function not in schemas:
        raise InvalidRequest("chat.tool_choice.function_name", f"{prompt.function!r} is not one of chat.tools")
    if choice is not ToolChoiceMode.FUNCTION and prompt.function:
        raise InvalidRequest("chat.tool_choice.function_name", "is set only with mode TOOL_CHOICE_MODE_FUNCTION")
    return ToolSet(tuple(prompt.tools), schemas)


def check_history(prompt: ChatPrompt) -> None:
    """Earlier calls carry JSON-object arguments; tool results name a call."""
    for i, message in enumerate(prompt.messages):
        for j, call in enumerate(message.tool_calls):
            field = f"chat.messages[{i}].tool_calls[{j}]"
            if message.role != "assistant":
                raise InvalidRequest(field, "only assistant messages carry tool calls")
            if not call.name:
                raise InvalidRequest(f"{field}.name", "must not be empty")
            arguments = _json(call.arguments or "{}", f"{field}.arguments_json")
            if not isinstance(arguments, dict):
                raise InvalidRequest(f"{field}.arguments_json", "must be a JSON object")
        if message.tool_call_id and message.role != "tool":
            raise InvalidRequest(f"chat.messages[{i}].tool_call_id", "is set only on role \"tool\" messages")


def _schema(text: str, field: str) -> dict:
    if not text.strip():
        return dict(NO_PARAMETERS)
    schema = _json(text, field)
    if not isinstance(schema, dict):
        raise InvalidRequest(field, "must be a JSON Schema object")
    if nesting_depth(schema) > MAX_DEPTH:
        raise InvalidRequest(field, f"nests deeper than {MAX_DEPTH} levels")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidRequest(field, f"is not a valid JSON Schema: {exc.message}") from None
    return schema


def _json(text: str, field: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(field, f"is not JSON: {exc}") from None
