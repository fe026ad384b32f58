"""The per-request limits every model kind checks requests against: each a ``setting``
(a flag of ``mlx-grpc serve``), zeros sized to a model's context by ``Limits.for_context``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .settings import setting

# Text bytes allowed per token of context where a byte limit is left at 0.
BYTES_PER_TOKEN = 32
MAX_JSON_DEPTH = 64  # nesting of JSON a request carries as text (template_kwargs, structural tags, schemas)


@dataclass(frozen=True)
class Limits:
    """Per-request limits; zeros are sized to each model's context by ``for_context``."""

    max_tokens: int = setting(4096, "cap on generated tokens per request")
    max_prompt_tokens: int = setting(0, "cap on prompt tokens per request (0: the model's context length)")
    max_prompt_bytes: int = setting(0, f"cap on UTF-8 bytes of a text or chat prompt (roles and contents), and "
                                       f"of Tokenize's text (0: {BYTES_PER_TOKEN} per prompt token allowed)")
    max_chat_messages: int = setting(0, "cap on messages per chat prompt (0: one per prompt token allowed)")
    max_stop_strings: int = setting(16, "cap on stop strings per request")
    max_stop_length: int = 256  # characters per stop string
    max_logit_bias: int = setting(1024, "cap on logit_bias entries, and on stop_token_ids, per request")
    max_stop_token_ids: int = setting(1024, "", flag="--max-logit-bias")  # one flag with max_logit_bias
    max_top_logprobs: int = setting(20, "cap on top_logprobs")
    max_prompt_logprobs: int = setting(65536, "cap on the values prompt_logprobs returns per request: prompt "
                                              "tokens x (1 + alternatives)")
    max_choices: int = setting(16, "cap on n, the choices one Generate samples from one prompt prefill")
    max_prediction_tokens: int = setting(16384, "cap on the tokens of a request's prediction")
    max_request_id_length: int = 128  # characters, also for session ids and model names
    max_images: int = setting(16, "cap on images per request")
    max_image_bytes: int = setting(20 * 1024 * 1024, "cap on the encoded bytes of one image in a prompt")
    max_image_pixels: int = setting(4096 * 4096, "cap on the pixels (width x height) of one image, read from "
                                                 "its header before anything is decoded")
    max_audios: int = setting(4, "cap on audio files per request (a chat prompt's)")
    max_audio_bytes: int = setting(25 * 1024 * 1024, "cap on the encoded bytes of one audio file (Transcribe's, "
                                                     "or one in a prompt)")
    max_audio_seconds: float = setting(600.0, "cap on one audio file's duration (Transcribe's, or one in a "
                                              "prompt), read from its header before anything is decoded",
                                       metavar="SECONDS")
    max_videos: int = setting(4, "cap on videos per request")
    max_video_bytes: int = setting(64 * 1024 * 1024, "cap on the encoded bytes of one video in a prompt")
    max_video_seconds: float = setting(600.0, "cap on one video's duration (frames / frame rate), read from its "
                                              "header before any frame is decoded", metavar="SECONDS")
    max_video_pixels: int = setting(1920 * 1080, "cap on the pixels (width x height) of one video frame, read "
                                                 "from its header")
    max_video_frames: int = setting(32, "cap on the frames sampled from one video (the model's own cap applies "
                                        "too); each pair of frames costs one frame's tokens")
    video_fps: float = setting(0.0, "frames per second sampled from a video (0: the model's own, 2 for the "
                                    "Qwen-VL families), at most --max-video-frames", metavar="FPS")
    max_embed_inputs: int = setting(256, "cap on inputs per Embed, Classify and EmbedSparse, documents per Rerank")
    max_embed_input_bytes: int = setting(
        0, f"cap on UTF-8 bytes of each Embed, Classify and EmbedSparse input, Embed instruction, Rerank query "
           f"and document (0: {BYTES_PER_TOKEN} per token of the embedding model's input length)")
    max_tools: int = setting(256, "cap on tools per chat (chat.tools)")
    max_message_parts: int = setting(256, "cap on content parts per chat message")
    max_tool_calls: int = setting(128, "cap on tool calls per chat message")
    max_template_kwargs: int = setting(64, "cap on chat.template_kwargs entries")
    max_json_bytes: int = setting(64 << 10, f"cap on UTF-8 bytes of JSON a request carries as text, checked before "
                                            f"it is parsed (nesting is capped at {MAX_JSON_DEPTH}): "
                                            f"chat.template_kwargs' values together, a vLLM structural tag or "
                                            f"JSON schema")
    max_request_fields: int = setting(1 << 15, "cap on protobuf fields (messages, parts, tools, map entries, "
                                               "strings) in one request, counted on its wire bytes before it is "
                                               "parsed (requests over 64 KiB)")
    prep_threads: int = setting(4, "threads that tokenize and render chat templates (Generate's and Prefetch's "
                                   "prompts, Tokenize, Detokenize, Embed's, Rerank's, Classify's and EmbedSparse's "
                                   "inputs), apart from the event loop's default executor")
    prep_queue: int = setting(64, "preparation jobs that may wait for a --prep-threads thread; beyond it "
                                  "RESOURCE_EXHAUSTED (PREPARATION_FULL) with a retry delay")
    prep_tenant_share: int = setting(0, "preparation jobs one tenant may hold (running or waiting) at once; beyond "
                                        "it RESOURCE_EXHAUSTED (PREPARATION_FULL) (0: half of --prep-threads plus "
                                        "--prep-queue)")
    max_request_numbers: int = setting(1 << 20, "cap on numbers in one request's repeated number fields (token "
                                                "ids), counted on its wire bytes before it is parsed (requests "
                                                "over 64 KiB)")

    def for_context(self, context_length: int) -> Limits:
        prompt = min(self.max_prompt_tokens or context_length, context_length - 1)
        return replace(self, max_prompt_tokens=prompt,
                       max_prompt_bytes=self.max_prompt_bytes or prompt * BYTES_PER_TOKEN,
                       max_chat_messages=self.max_chat_messages or prompt,
                       max_embed_input_bytes=self.max_embed_input_bytes or context_length * BYTES_PER_TOKEN)
