"""What a chat request needs beyond its prompt ids: its tools, the constraint its tool
choice implies, and the splitter its output passes through."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from ....errors import InvalidRequest
from ....events import Delta, Event, Finished, FinishReason
from ....requests import ChatPrompt, GenerationRequest, ToolChoiceMode
from .choice import banned_tokens, needs_none_grammar, none_grammar, tool_grammar
from .output import OutputSplitter, Split
from .syntax import ChatSyntax
from .tools import ToolSet, tool_set

RESERVED_KWARGS = frozenset({"messages", "conversation", "tools", "documents", "add_generation_prompt", "tokenize",
                             "return_dict", "chat_template", "continue_final_message", "tokenizer_kwargs",
                             "return_tensors", "padding", "truncation", "max_length", "return_assistant_tokens_mask"})


def chat_tools(request: GenerationRequest, syntax: ChatSyntax, model: str) -> ToolSet | None:
    """The request's tools, checked; None for other prompts or no tools."""
    prompt = request.prompt
    if not isinstance(prompt, ChatPrompt):
        return None
    for key in prompt.template_kwargs:
        if key in RESERVED_KWARGS:
            raise InvalidRequest(f"chat.template_kwargs[{key}]", "is a template argument the server sets itself")
    tools = tool_set(prompt, syntax, model)
    forced = prompt.tool_choice in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION)
    if tools is not None and forced and request.response_format is not None:
        raise InvalidRequest("response_format", f"cannot be combined with tool_choice {prompt.tool_choice.value}: "
                                                "the call is the output")
    none = tools is not None and prompt.tool_choice is ToolChoiceMode.NONE and needs_none_grammar(syntax)
    if none and request.response_format is not None:  # a row has one grammar
        marker = syntax.call_markers()[0].text
        raise InvalidRequest("response_format", f"cannot be combined with tool_choice NONE on model {model!r}: its "
                                                f"call marker {marker!r} is several tokens, kept out "
                                                "of the output by a grammar of its own")
    return tools


@dataclass(frozen=True)
class ChatPlan:
    grammar: str | None  # Lark text forcing a call (REQUIRED, FUNCTION) or keeping one out (NONE)
    splitter: OutputSplitter | None

    def relay(self, event: Event) -> Iterator[Event]:
        """``event`` with its text split (a Delta), or after what was held back (Finished)."""
        splitter = self.splitter
        if splitter is None:
            yield event
        elif isinstance(event, Delta):
            yield _with(event, splitter.feed(event.text))
        elif isinstance(event, Finished):
            rest = splitter.finish()
            if rest:
                yield _with(Delta((), "", choice=event.choice), rest)
            called = splitter.calls and event.reason in (FinishReason.EOS, FinishReason.STOP)
            if called and not event.stop_sequence and event.stop_token_id is None:
                event = dataclasses.replace(event, reason=FinishReason.TOOL_CALLS)
            yield event
        else:
            yield event


def plan_chat(request: GenerationRequest, tools: ToolSet | None, syntax: ChatSyntax, opens_reasoning: bool,
              model: str) -> tuple[GenerationRequest, ChatPlan]:
    """The request as it runs (NONE bans the call marker's token) and its plan."""
    prompt = request.prompt
    if not isinstance(prompt, ChatPrompt):
        return request, ChatPlan(None, None)
    banned = banned_tokens(prompt, syntax) if tools is not None else {}
    if banned:
        sampling = dataclasses.replace(request.sampling, logit_bias={**request.sampling.logit_bias, **banned})
        request = dataclasses.replace(request, sampling=sampling)
    grammar = (tool_grammar(prompt, tools, syntax, opens_reasoning, model) or none_grammar(prompt, syntax)
               if tools is not None else None)
    calls = tools if prompt.tool_choice is not ToolChoiceMode.NONE else None
    splits = syntax.thinking or calls is not None
    return request, ChatPlan(grammar, OutputSplitter(syntax, calls, in_reasoning=opens_reasoning) if splits else None)


def _with(delta: Delta, split: Split) -> Delta:
    return dataclasses.replace(delta, text=split.text, reasoning=split.reasoning,
                               tool_call_deltas=tuple(split.deltas), tool_calls=tuple(split.calls))
