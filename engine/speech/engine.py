"""The speech engine's asyncio facade: Transcribe on one speech model.

Invariants: all MLX work runs on the model's ``EngineThread`` (the one every model kind
shares), reached only by controls; a request is checked (its header: nothing decoded) before
it waits for admission, and decoded in the preparation pool once admitted; request ids and
tenant limits are the shared gate's (``Slots``), a transcription charging its tenant 50
tokens a second of audio (Whisper's encoder positions); a Cancel call or the caller leaving
ends the call at once, and a transcription already running on the thread stops at its next
encoder or decoder block (``Interrupted``), freeing the thread for the next; a stalled or
dead thread breaks the engine.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, TypeVar

from ..description import Capabilities, GraphDescriptor, ModelDescription, ModelKind
from ..embedding.admission_pool import AdmissionPool
from ..embedding.slots import Slots
from ..errors import NotReady
from ..hardware.device import backend_name, blas_name
from ..liveness import Breaker
from ..loading.tokenizer_files import folder_files
from ..preparation import Preparation
from ..serving.admission import TenantStats
from ..serving.controls_only import ControlsOnly, Run
from ..serving.protocol import Control
from ..serving.thread import EngineThread
from ..tenancy import Tenant
from ..validation import Limits, check_text_bytes
from .audio import SAMPLE_RATE, check_audio, decode
from .config import SpeechConfig
from .model import Interrupted, SpeechModel
from .types import Transcript, TranscriptionRequest, TranscriptionStarted

T = TypeVar("T")
R = TypeVar("R")
TOKENS_PER_SECOND = 50  # what a second of audio charges its tenant (the encoder's positions)


class SpeechEngine:
    def __init__(self, source: str | Path, *, name: str = "", limits: Limits = Limits(),
                 config: SpeechConfig = SpeechConfig()):
        self.source = str(source)
        self.config = config
        self.name = name or Path(self.source).name.lower()
        self.limits = limits
        self._thread: EngineThread[SpeechModel, Any, ControlsOnly[SpeechModel]] = EngineThread(
            f"speech-{self.name}", self._load, ControlsOnly)
        self._pool = AdmissionPool(config.max_active, config.max_queued, aging_s=config.priority_aging_s)
        self._model: SpeechModel | None = None
        self.weights_bytes = 0
        self._slots = Slots(self.name)
        self.preparation = Preparation.of(limits)  # a ModelSet shares one among its engines
        self.breaker = Breaker(lambda: self.name, self._thread.fault, self._thread.give_up)
        self.transcribed_seconds = 0.0  # audio transcribed since start
        self.interrupted = 0  # running transcriptions stopped because their caller left

    def _load(self) -> SpeechModel:
        model = SpeechModel(Path(self.source))
        self.weights_bytes = model.weights_bytes()
        return model

    async def start(self) -> None:
        self._model = await asyncio.wrap_future(self._thread.start())

    async def close(self) -> None:
        self._pool.close()
        await asyncio.to_thread(self._thread.stop)

    def control(self, control: Control[ControlsOnly[SpeechModel], T]) -> Future[T]:
        return self._thread.ask(control)

    @property
    def model(self) -> SpeechModel:
        if self._model is None:
            raise NotReady(f"speech model {self.name!r} is still loading")
        return self._model

    @property
    def ready(self) -> bool:
        return self._model is not None and not self._pool.closed and not self.breaker.broken

    @property
    def idle(self) -> bool:
        return self._slots.idle

    @property
    def queued(self) -> int:
        return self._pool.queued

    @property
    def active(self) -> int:
        return self._pool.active

    @property
    def max_prompt_tokens(self) -> int:
        return self.model.max_length

    def holds(self, request_id: str, tenant: str = "") -> bool:
        return self._slots.holds(request_id, tenant)

    def tenant_stats(self) -> tuple[TenantStats, ...]:
        return self._slots.tenants.snapshot()

    def cancel(self, request_id: str, tenant: str = "") -> bool:
        return self._slots.cancel(request_id, tenant)

    def describe(self) -> ModelDescription:
        m = self.model
        return ModelDescription(
            name=self.name, kind=ModelKind.SPEECH,
            descriptor=GraphDescriptor("mlx-audio/whisper", backend_name(), "whisper-encoder-decoder-v1",
                                       "stateless", self.source),
            capabilities=Capabilities(generation=False, transcription=True),
            context_length=m.max_length, vocab_size=m.vocab_size,
            eos_token_ids=(int(m.tokenizer.eos_token_id),), has_chat_template=False, dtype=m.dtype,
            blas=blas_name(), embedding_dimensions=0, source=self.source)

    async def transcribe(self, request: TranscriptionRequest
                         ) -> AsyncIterator[TranscriptionStarted | Transcript]:
        """``TranscriptionStarted`` once admitted and decoded, then the ``Transcript``."""
        model = self.model
        check_text_bytes("prompt", (request.prompt,), self.limits.for_context(model.max_length).max_prompt_bytes)
        model.check(request)
        header = await self.preparation.run(request.tenant, check_audio, "audio", request.audio, self.limits)
        async with self._admitted(request.request_id, request.tenant, request.priority) as seat:
            began = time.monotonic()
            seat.charge(math.ceil(header.seconds * TOKENS_PER_SECOND))
            samples = await self.preparation.run(request.tenant, decode, "audio", request.audio, self.limits, header)
            yield TranscriptionStarted(request.request_id, len(samples) / SAMPLE_RATE)
            stop = threading.Event()
            running = self._on_thread(lambda: self._transcribe(samples, request, stop))
            try:
                transcript = await running
            except BaseException:  # the caller left or was cancelled: the thread stops at its next block
                stop.set()
                raise
        self.transcribed_seconds += transcript.audio_seconds
        yield replace(transcript, seconds=time.monotonic() - began)

    def _admitted(self, request_id: str, tenant: Tenant, priority: int):
        return self._slots.admitted(self._pool, request_id, tenant, priority, "transcription")

    def _on_thread(self, fn: Callable[[], R]) -> asyncio.Future[R]:
        self.breaker.refuse()
        return asyncio.wrap_future(self._thread.ask(Run(fn)))

    def _transcribe(self, samples, request: TranscriptionRequest, stop: threading.Event) -> Transcript:
        """On the thread: the transcript, or ``Interrupted`` (counted) once ``stop`` is set."""
        try:
            return self.model.transcribe(samples, request, stop)
        except Interrupted:
            self.interrupted += 1
            raise

    def tokenizer_files(self) -> dict[str, bytes]:
        """What a router needs to tokenize as this model does, by file name; blocking."""
        self.model
        return folder_files(Path(self.source))

    async def tokenize_for(self, tenant: Tenant, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        with self._slots.counted(tenant):
            return await self.preparation.run(tenant, self.model.tokenize, text, add_special_tokens)

    async def detokenize_for(self, tenant: Tenant, ids: list[int], skip_special_tokens: bool) -> str:
        from ..errors import InvalidRequest

        vocab = self.model.vocab_size
        for i in ids:
            if not 0 <= i < vocab:
                raise InvalidRequest("token_ids", f"token id {i} is outside the vocabulary [0, {vocab})")
        with self._slots.counted(tenant):
            return await self.preparation.run(tenant, self.model.detokenize, ids, skip_special_tokens)
