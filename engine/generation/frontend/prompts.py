"""Prompts to token ids (text, ids, chats through the template with their tools and
template options), off the event loop; a chat's history is rendered only once the
prompt limit passed."""

from __future__ import annotations

import json

from ...errors import InvalidRequest, Unsupported
from ...loading.model import LoadedModel
from ...requests import AudioPart, ChatPrompt, GenerationRequest, ImagePart, TextPrompt, TokenPrompt, VideoPart
from ...validation import Limits, check_token_ids
from ...vision.prompt import PromptImage, expand_images
from ..core.request import EncodedPrompt
from .chat.syntax import ChatSyntax
from .chat.tools import ToolSet


class PromptEncoder:
    def __init__(self, model: LoadedModel, limits: Limits, syntax: ChatSyntax):
        self._model = model
        self._limits = limits
        self._syntax = syntax

    @property
    def max_prompt_tokens(self) -> int:
        context = self._model.context_length
        return min(self._limits.max_prompt_tokens or context, context - 1)

    def encode(self, request: GenerationRequest, tools: ToolSet | None = None) -> EncodedPrompt:
        m, prompt = self._model, request.prompt
        snapshot_at, opens_reasoning = None, False
        images: tuple[PromptImage, ...] = ()
        if isinstance(prompt, TokenPrompt):
            ids, field_name = list(prompt.ids), "tokens.ids"
            check_token_ids(field_name, ids, m.vocab_size)
        elif isinstance(prompt, TextPrompt):
            ids = m.tokenizer.encode(prompt.text, add_special_tokens=m.traits.adds_bos(prompt.text))
            field_name = "text"
        elif isinstance(prompt, ChatPrompt):
            text, field_name = self._chat(prompt, tools), "chat.messages"
            opens_reasoning = self._opens_reasoning(text)
            if prompt.has_media:
                assert m.vision is not None  # checked for a vision model by the facade
                ids, images = expand_images(text, m.tokenizer, prompt, m.vision, self._limits)
            else:
                ids = m.tokenizer.encode(text, add_special_tokens=False)
        else:
            raise InvalidRequest("prompt", "one of text, tokens or chat must be set")
        if not ids:
            raise InvalidRequest(field_name, "the prompt is empty")
        limit = self.max_prompt_tokens
        if len(ids) > limit:
            raise InvalidRequest(field_name, f"the prompt has {len(ids)} tokens; the limit is {limit}")
        if isinstance(prompt, ChatPrompt) and not images:
            snapshot_at = self._history(prompt, tools, ids)
        return EncodedPrompt(ids, snapshot_at, opens_reasoning, images)

    def _chat(self, prompt: ChatPrompt, tools: ToolSet | None) -> str:
        m = self._model
        if not m.has_chat_template:
            raise Unsupported(f"model {m.name!r} has no chat template; send text or tokens")
        if not prompt.messages:
            raise InvalidRequest("chat.messages", "at least one message is required")
        return self._template(prompt, tools, _messages(prompt, self._as_parts), True)

    def _history(self, prompt: ChatPrompt, tools: ToolSet | None, ids: list[int]) -> int | None:
        """Where the history (all but the last message) ends in ``ids``, if a prefix."""
        messages = _messages(prompt, self._as_parts)
        if len(messages) < 2:
            return None
        tok = self._model.tokenizer
        history = tok.encode(self._template(prompt, tools, messages[:-1], False), add_special_tokens=False)
        shared = 0 < len(history) < len(ids) and ids[: len(history)] == history
        return len(history) if shared else None

    @property
    def _as_parts(self) -> bool:
        vision = self._model.vision
        return vision is not None and vision.content_as_parts

    def _template(self, prompt: ChatPrompt, tools: ToolSet | None, messages: list[dict],
                  generation_prompt: bool) -> str:
        options = dict(prompt.template_kwargs)
        if prompt.enable_thinking is not None:
            options["enable_thinking"] = prompt.enable_thinking
        try:
            return self._model.tokenizer.apply_chat_template(
                messages, tools=tools.template_tools() if tools is not None else None,
                add_generation_prompt=generation_prompt, tokenize=False, **options)
        except Exception as exc:  # template errors are the caller's input errors
            raise InvalidRequest("chat.messages", f"the chat template rejected the messages: {exc}") from exc

    def _opens_reasoning(self, text: str) -> bool:
        if not self._syntax.thinking:
            return False
        start, end = self._syntax.think_markers()
        return text.rfind(start.text) > text.rfind(end.text)


def _messages(prompt: ChatPrompt, as_parts: bool = False) -> list[dict]:
    """Messages as HF templates read them (OpenAI's shape); ``as_parts``: every content as
    a list of parts, for templates that read nothing else."""
    return [_message(x, as_parts) for x in prompt.messages]


def _message(x, as_parts: bool = False) -> dict:
    message: dict = {"role": x.role, "content": x.content}
    if x.media:  # parts in order, as multimodal templates read them
        message["content"] = [{"type": "image"} if isinstance(p, ImagePart) else
                              {"type": "video"} if isinstance(p, VideoPart) else
                              {"type": "audio"} if isinstance(p, AudioPart) else {"type": "text", "text": p.text}
                              for p in x.parts]
    elif as_parts:
        message["content"] = [{"type": "text", "text": x.content}]
    if x.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": json.loads(c.arguments or "{}")}}
                                 for c in x.tool_calls]
    if x.tool_call_id:
        message["tool_call_id"] = x.tool_call_id
    if x.reasoning:
        message["reasoning_content"] = x.reasoning
    return message
