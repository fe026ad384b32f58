"""One in-process request of the speculation bench, timed from its first token to its last."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.events import Delta, Finished, Usage
from engine.generation.frontend.engine import GenerationEngine
from engine.requests import GenerationRequest


@dataclass
class Timed:
    tokens: list[int] = field(default_factory=list)
    first: float = 0.0
    last: float = 0.0
    usage: Usage | None = None

    @property
    def seconds(self) -> float:
        return self.last - self.first

    @property
    def rate(self) -> float:
        """Decode tokens per second (nan for fewer than two tokens)."""
        return (len(self.tokens) - 1) / self.seconds if len(self.tokens) > 1 and self.seconds > 0 else float("nan")


async def timed(engine: GenerationEngine, req: GenerationRequest) -> Timed:
    out = Timed()
    async for ev in engine.generate(req):
        if isinstance(ev, Delta) and ev.token_ids:
            out.last = time.perf_counter()
            out.first = out.first or out.last
            out.tokens += ev.token_ids
        elif isinstance(ev, Finished):
            out.usage = ev.usage
    return out
