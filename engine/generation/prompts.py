"""Prompts to token ids (text, ids, chats through the template), off the event loop; a
chat's history is rendered only once the prompt limit passed."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidRequest, Unsupported
from ..loading.model import LoadedModel
from ..requests import ChatPrompt, GenerationRequest, TextPrompt, TokenPrompt
from ..validation import Limits, check_token_ids


@dataclass(frozen=True)
class EncodedPrompt:
    ids: list[int]
    snapshot_at: int | None = None  # end of a chat's history inside ``ids``


class PromptEncoder:
    def __init__(self, model: LoadedModel, limits: Limits):
        self._model = model
        self._limits = limits

    @property
    def max_prompt_tokens(self) -> int:
        context = self._model.context_length
        return min(self._limits.max_prompt_tokens or context, context - 1)

    def encode(self, request: GenerationRequest) -> EncodedPrompt:
        m, prompt = self._model, request.prompt
        snapshot_at = None
        if isinstance(prompt, TokenPrompt):
            ids, field_name = list(prompt.ids), "tokens.ids"
            check_token_ids(field_name, ids, m.vocab_size)
        elif isinstance(prompt, TextPrompt):
            ids = m.tokenizer.encode(prompt.text, add_special_tokens=m.traits.adds_bos(prompt.text))
            field_name = "text"
        elif isinstance(prompt, ChatPrompt):
            ids, field_name = self._chat(prompt), "chat.messages"
        else:
            raise InvalidRequest("prompt", "one of text, tokens or chat must be set")
        if not ids:
            raise InvalidRequest(field_name, "the prompt is empty")
        limit = self.max_prompt_tokens
        if len(ids) > limit:
            raise InvalidRequest(field_name, f"the prompt has {len(ids)} tokens; the limit is {limit}")
        if isinstance(prompt, ChatPrompt):
            snapshot_at = self._history(prompt, ids)
        return EncodedPrompt(ids, snapshot_at)

    def _chat(self, prompt: ChatPrompt) -> list[int]:
        m = self._model
        if not m.has_chat_template:
            raise Unsupported(f"model {m.name!r} has no chat template; send text or tokens")
        if not prompt.messages:
            raise InvalidRequest("chat.messages", "at least one message is required")
        return self._template(_messages(prompt), True)

    def _history(self, prompt: ChatPrompt, ids: list[int]) -> int | None:
        """Where the history (all but the last message) ends in ``ids``, if a prefix."""
        messages = _messages(prompt)
        history = self._template(messages[:-1], False) if len(messages) > 1 else []
        shared = 0 < len(history) < len(ids) and ids[: len(history)] == history
        return len(history) if shared else None

    def _template(self, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        tok = self._model.tokenizer
        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        except Exception as exc:  # template errors are the caller's input errors
            raise InvalidRequest("chat.messages", f"the chat template rejected the messages: {exc}") from exc
        return tok.encode(text, add_special_tokens=False)


def _messages(prompt: ChatPrompt) -> list[dict[str, str]]:
    return [{"role": x.role, "content": x.content} for x in prompt.messages]
