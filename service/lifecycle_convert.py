"""LoadModel, UnloadModel and ListModels' statuses: wire messages to residency calls and back.

Invariant: memory, use and timing figures go only to admin callers (they tell one tenant
about another's activity); a non-admin sees only the models its tenant may use.
"""

from __future__ import annotations

import math
import time

from engine.errors import InvalidRequest
from engine.residency.catalog import ModelOptions, check_options
from engine.residency.slot import LoadProgress, Slot

from . import convert
from .gen.mlxgrpc.v1 import lifecycle_pb2 as lpb
from .gen.mlxgrpc.v1 import model_pb2 as mpb

STATES = {"loading": lpb.MODEL_STATE_LOADING, "ready": lpb.MODEL_STATE_READY,
          "unloading": lpb.MODEL_STATE_UNLOADING, "unloaded": lpb.MODEL_STATE_UNLOADED}
STAGES = {"resolving": lpb.LOAD_STAGE_RESOLVING, "planning": lpb.LOAD_STAGE_PLANNING,
          "reading": lpb.LOAD_STAGE_READING, "converting": lpb.LOAD_STAGE_CONVERTING,
          "warming": lpb.LOAD_STAGE_WARMING, "serving": lpb.LOAD_STAGE_SERVING}
KINDS = {mpb.MODEL_KIND_UNSPECIFIED: "generation", mpb.MODEL_KIND_GENERATION: "generation",
         mpb.MODEL_KIND_EMBEDDING: "embedding", mpb.MODEL_KIND_SPEECH: "speech"}
_MAX_KEEP_ALIVE = 10 * 365 * 86400.0


def keep_alive(seconds: float, field: str = "keep_alive_seconds") -> float:
    if not math.isfinite(seconds) or abs(seconds) > _MAX_KEEP_ALIVE:
        raise InvalidRequest(field, f"must be a finite number of seconds, at most {_MAX_KEEP_ALIVE:.0f} either way")
    return seconds


def request_keep_alive(msg, most: float) -> float | None:
    """A request's keep_alive_seconds within ``most`` (negative, "keep", is the most); None when unset."""
    if not msg.HasField("keep_alive_seconds"):
        return None
    seconds = keep_alive(msg.keep_alive_seconds)
    return most if seconds < 0 or seconds > most else seconds


def load_options(msg: lpb.LoadModelRequest) -> tuple[str, ModelOptions]:
    """(kind, options) of a LoadModel request; INVALID_ARGUMENT naming the field."""
    if msg.kind not in KINDS:
        raise InvalidRequest("kind", "must be MODEL_KIND_GENERATION, MODEL_KIND_EMBEDDING or MODEL_KIND_SPEECH")
    o = msg.options
    options = ModelOptions(o.dtype, o.kv_bits, o.draft_model, o.context_length)
    try:
        check_options(options, "options")
    except ValueError as error:
        raise InvalidRequest("options", str(error).removeprefix("options: ")) from None
    if KINDS[msg.kind] == "embedding" and (o.kv_bits or o.draft_model):
        raise InvalidRequest("options", "kv_bits and draft_model are for generation models")
    if KINDS[msg.kind] == "speech" and (o.dtype or o.kv_bits or o.draft_model or o.context_length):
        raise InvalidRequest("options", "a speech model takes no options")
    return KINDS[msg.kind], options


def progress(event: LoadProgress, admin: bool) -> lpb.LoadModelResponse:
    out = lpb.LoadModelResponse(stage=STAGES[event.stage], done=event.done, total=event.total,
                                evicted=event.evicted, elapsed_seconds=event.elapsed_s)
    if event.engine is not None:
        out.model.CopyFrom(convert.model_info(event.engine.describe(), admin))
    return out


_STATUS_KINDS = {"generation": mpb.MODEL_KIND_GENERATION, "embedding": mpb.MODEL_KIND_EMBEDDING,
                 "speech": mpb.MODEL_KIND_SPEECH}


def status(slot: Slot, aliases: list[str], admin: bool) -> lpb.ModelStatus:
    out = lpb.ModelStatus(name=slot.name, state=STATES[slot.state], on_demand=slot.spec.on_demand,
                          pinned=slot.spec.pinned, aliases=aliases,
                          kind=_STATUS_KINDS[slot.spec.kind])
    if slot.keep_alive_s is not None:
        out.keep_alive_seconds = slot.keep_alive_s
    if admin:
        out.resident_bytes = slot.resident_bytes or slot.planned_bytes
        out.requests = slot.leases
        out.load_seconds = slot.load_seconds
        if slot.state == "ready" and not slot.leases:
            out.idle_seconds = time.monotonic() - slot.last_used
    return out
