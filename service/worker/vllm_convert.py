"""The vLLM worker contract's requests -> engine requests; what it carries that we refuse.

Invariant: every field is honoured or refused with INVALID_ARGUMENT naming it; nothing is ignored.
"""

from __future__ import annotations

import dataclasses
import json

from smg_grpc_proto import vllm_engine_pb2 as vllm_pb
from smg_grpc_proto.generated import common_pb2

from engine.caches.blocks import BlocksRemoved, BlocksStored, EventBatch
from engine.errors import InvalidRequest
from engine.requests import EmbeddingRequest, FormatKind, GenerationRequest, ResponseFormat
from engine.tenancy import Tenant
from engine.validation import Limits, parse_json

from . import convert
from .structural_tag import structural_tag_grammar

JSON_SCHEMA_FIELD = "sampling_params.json_schema"
_FORMATS = {"json_schema": FormatKind.JSON_SCHEMA, "regex": FormatKind.REGEX, "grammar": FormatKind.GRAMMAR}
# Set, these ask for what one replica of ours does not do (disaggregation, data parallelism, media).
_REFUSED_REQUEST = {
    "kv_transfer_params": "prefill/decode disaggregation is not supported",
    "kv_transfer_params_json": "prefill/decode disaggregation is not supported",
    "data_parallel_rank": "this worker has no data-parallel ranks",
    "mm_inputs": "multimodal inputs are not supported",
    "media_refs": "multimodal inputs are not supported",
}
_REFUSED_SAMPLING = {
    "truncate_prompt_tokens": "prompt truncation is not supported; send a prompt that fits",
}


def generation_request(msg: vllm_pb.GenerateRequest, tenant: Tenant, adapter: str = "",
                       max_json_bytes: int = Limits.max_json_bytes) -> GenerationRequest:
    """The engine request, its ``n`` samples the engine's choices (one prefill; sample i of a seeded
    request seeded ``seed + i``); a JSON schema or structural tag is parsed only within ``max_json_bytes``."""
    _refuse_unsupported(msg)
    sp = msg.sampling_params
    base = convert.generation_request(msg)
    return dataclasses.replace(
        base, tenant=tenant, adapter=adapter, response_format=_response_format(sp, max_json_bytes), n=sp.n or 1,
        stopping=dataclasses.replace(base.stopping, stop=tuple(sp.stop), min_tokens=sp.min_tokens))


def _refuse_unsupported(msg: vllm_pb.GenerateRequest) -> None:
    for field, why in _REFUSED_REQUEST.items():
        if msg.HasField(field):
            raise InvalidRequest(field, why)
    if msg.extra_mm_inputs:
        raise InvalidRequest("extra_mm_inputs", "multimodal inputs are not supported")
    sp = msg.sampling_params
    for field, why in _REFUSED_SAMPLING.items():
        if sp.HasField(field):
            raise InvalidRequest(f"sampling_params.{field}", why)
    # skip_special_tokens, spaces_between_special_tokens and include_stop_str_in_output shape
    # text, which the gateway makes from our token ids; grammar_from_first_token is what our
    # constraints always do.


def _response_format(sp: vllm_pb.SamplingParams, max_json_bytes: int) -> ResponseFormat | None:
    which = sp.WhichOneof("constraint")
    if which is None:
        return None
    if which == "json_object":
        return ResponseFormat(FormatKind.JSON_OBJECT) if sp.json_object else None
    if which == "choice":
        return ResponseFormat(FormatKind.CHOICE, options=tuple(sp.choice.choices))
    if which == "json_schema":
        return ResponseFormat(FormatKind.JSON_SCHEMA, closed_objects(sp.json_schema, max_json_bytes))
    if which == "structural_tag":
        return ResponseFormat(FormatKind.GRAMMAR, structural_tag_grammar(sp.structural_tag, close_schema,
                                                                         max_json_bytes))
    return ResponseFormat(_FORMATS[which], getattr(sp, which))


def closed_objects(schema_text: str, max_bytes: int = Limits.max_json_bytes) -> str:
    """The schema with ``additionalProperties: false`` wherever an object lists its properties and
    says nothing of others: what vLLM's default backend enforces, and what gateways' tool schemas
    count on. Text that is not JSON is left for the grammar compiler to refuse; text over
    ``max_bytes`` or nested too deep is refused before anything walks it."""
    try:
        schema = parse_json(JSON_SCHEMA_FIELD, schema_text, max_bytes)
    except InvalidRequest as exc:
        if exc.description.startswith("is not JSON"):
            return schema_text
        raise
    return json.dumps(close_schema(schema))


def close_schema(schema):
    """``closed_objects`` on a parsed schema (changed in place, and returned)."""

    def close(node) -> None:  # a schema: walks only the keywords that hold subschemas
        if not isinstance(node, dict):
            return
        if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for key in ("properties", "$defs", "definitions", "patternProperties"):
            for sub in (node.get(key) or {}).values() if isinstance(node.get(key), dict) else ():
                close(sub)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for sub in node.get(key) or () if isinstance(node.get(key), list) else ():
                close(sub)
        for key in ("items", "additionalProperties", "not", "if", "then", "else"):
            close(node.get(key))

    close(schema)
    return schema


def embedding_request(msg: vllm_pb.EmbedRequest, tenant: Tenant) -> EmbeddingRequest:
    ids = tuple(msg.tokenized.input_ids)
    if not ids:
        raise InvalidRequest("tokenized.input_ids", "must hold the input's token ids")
    return EmbeddingRequest(inputs=(), token_ids=(ids,), request_id=msg.request_id, tenant=tenant)


def kv_event_batch(batch: EventBatch, block_size: int, load: common_pb2.EngineLoad) -> common_pb2.KvEventBatch:
    events = []
    for event in batch.events:
        if isinstance(event, BlocksStored):
            stored = common_pb2.KvBlocksStored(
                blocks=[common_pb2.KvBlock(block_hash=h, token_ids=tokens, block_size=block_size)
                        for h, tokens in zip(event.hashes, event.tokens)],
                locality=common_pb2.KV_CACHE_LOCALITY_LOCAL)  # the tier left unset: the engine's own memory
            if event.parent is not None:
                stored.parent_block_hash = event.parent
            events.append(common_pb2.KvCacheEvent(stored=stored))
        elif isinstance(event, BlocksRemoved):
            events.append(common_pb2.KvCacheEvent(removed=common_pb2.KvBlocksRemoved(block_hashes=event.hashes)))
        else:
            events.append(common_pb2.KvCacheEvent(cleared=common_pb2.KvCacheCleared()))
    return common_pb2.KvEventBatch(sequence_number=batch.sequence, timestamp=batch.timestamp, events=events,
                                   load=load)


def in_contract_terms(error: BaseException) -> BaseException:
    """Our field paths renamed to the vLLM contract's (constraints live in sampling_params)."""
    if isinstance(error, InvalidRequest) and error.field.startswith("response_format."):
        return InvalidRequest("sampling_params." + error.field[len("response_format."):], error.description)
    if isinstance(error, InvalidRequest) and error.field == "n":
        return InvalidRequest("sampling_params.n", error.description)
    return convert.in_contract_terms(error)
