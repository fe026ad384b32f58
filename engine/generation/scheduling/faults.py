"""One row's own failure ends that sequence alone with ERROR; the other rows go on,
and it is released once, as any other."""

from __future__ import annotations

import logging

from ...events import FinishReason
from ..sequence.state import SequenceState, Status

log = logging.getLogger("engine.generation.scheduling.faults")


def failure_message(exc: BaseException) -> str:
    """What the request's Finished event says (the client sees a generic INTERNAL)."""
    return f"engine failure: {type(exc).__name__}"


def end_row(seq: SequenceState, exc: BaseException, during: str) -> None:
    log.error("request %s failed during %s; ending it alone", seq.request_id, during, exc_info=exc)
    try:
        seq.finish(FinishReason.ERROR, error=failure_message(exc))
    except Exception:  # noqa: BLE001 - its delivery is what broke; it still leaves the batch
        log.exception("request %s: its Finished event could not be sent", seq.request_id)
        seq.status, seq.finish_reason = Status.FINISHED, FinishReason.ERROR
