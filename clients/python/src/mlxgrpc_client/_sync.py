"""The blocking client (grpc sync API)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar, overload

import grpc

from . import _retry, pb
from ._common import (DEFAULT, GenerationResult, PrefetchPrompt, Prompt, auth_metadata, channel_credentials,
                      classify_request, default_priority, embed_request, generate_request, load_model_request,
                      loaded_model, prefetch_request, rerank_request)
from ._embeddings import Embeddings
from ._sparse import SparseEmbeddings, embed_sparse_request
from ._speech import AudioSource, Task, Transcript, transcribe_request
from ._embeddings import gather as gather_embeddings
from ._retry import Attempts, OnRetry


EventT = TypeVar("EventT")
ResultT = TypeVar("ResultT")
StreamT = TypeVar("StreamT", bound="_EventStream[Any, Any]")


class _EventStream(Generic[EventT, ResultT]):
    """A running server-streaming call whose events gather into :attr:`result` (its ``_add``):
    retried before its first event, cancelled client-side without an error."""

    def __init__(self, start: Callable[[], Any], attempts: Attempts, result: ResultT):
        self._start = start
        self._attempts = attempts
        self._call = start()
        self._cancelled = False
        self.result = result
        self._events = self._iterate()

    @property
    def request_id(self) -> str:
        """The request id, usable with :meth:`Client.cancel` at any time."""
        return self.result.request_id  # type: ignore[attr-defined]

    def _iterate(self) -> Iterator[EventT]:
        received = False
        while True:
            try:
                for event in self._call:
                    received = True
                    self.result._add(event)  # type: ignore[attr-defined]
                    yield event
                return
            except grpc.RpcError as err:
                if self._cancelled and err.code() == grpc.StatusCode.CANCELLED:
                    return
                delay = None if received else self._attempts.delay_after(err)
                if delay is None:
                    raise
            time.sleep(delay)
            if self._cancelled:
                return
            self._call = self._start()

    def __iter__(self) -> Iterator[EventT]:
        return self._events

    def __next__(self) -> EventT:
        return next(self._events)

    def collect(self) -> ResultT:
        """Reads the rest of the stream and returns everything it produced."""
        for _ in self._events:
            pass
        return self.result

    def cancel(self) -> bool:
        """Cancels the call client-side (the server stops the work too)."""
        self._cancelled = True
        return self._call.cancel()

    def code(self) -> grpc.StatusCode:
        """The call's final status code (blocks until the call ends)."""
        return self._call.code()

    def __enter__(self: StreamT) -> StreamT:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._call.done():
            self.cancel()


class GenerateStream(_EventStream[pb.GenerateResponse, GenerationResult]):
    """A running Generate call: iterate it for ``pb.GenerateResponse`` events.

    ``started``/``delta``/``finished`` events arrive as the server sends them; the
    stream also gathers them into :attr:`result`. Errors raise ``grpc.RpcError``
    (pass it to :func:`mlxgrpc_client.error_details`) once retries are spent: a
    refusal with RetryInfo before the first event is retried after the server's delay.
    :meth:`cancel` cancels the call client-side: iteration then just stops and
    :meth:`code` is CANCELLED. Used as a context manager, leaving the block cancels the
    call if it is still running.
    """

    def __init__(self, start: Callable[[], Any], attempts: Attempts, request_id: str):
        super().__init__(start, attempts, GenerationResult(request_id=request_id))


class TranscribeStream(_EventStream[pb.TranscribeResponse, Transcript]):
    """A running Transcribe call: iterate it for ``pb.TranscribeResponse`` events.

    ``started`` (once the audio is decoded and admitted), a ``segment`` per piece of the
    transcript in time order, then ``finished``; the stream also gathers them into
    :attr:`result` (a :class:`mlxgrpc_client.Transcript`). Errors, retries, :meth:`cancel`,
    :meth:`code` and the context manager are those of :class:`GenerateStream`.
    """

    def __init__(self, start: Callable[[], Any], attempts: Attempts, request_id: str):
        super().__init__(start, attempts, Transcript(request_id=request_id))


class Client:
    """A blocking InferenceService client. Create it with :func:`connect`.

    Every call carries the bearer token (if any) and the default deadline unless
    ``timeout=`` overrides it (``None``: no deadline); the deadline covers retries.
    Refusals with RetryInfo are retried up to ``max_attempts`` attempts in all.
    Messages are the generated protobuf classes in :mod:`mlxgrpc_client.pb`;
    :attr:`stub` is the raw stub.
    """

    def __init__(self, channel: grpc.Channel, *, token: str | None = None, timeout: float | None = None,
                 max_attempts: int = 3, on_retry: OnRetry | None = None, priority: int = 0):
        self.channel = channel
        self.stub = pb.InferenceServiceStub(channel)
        self.metadata = auth_metadata(token)
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.on_retry = on_retry
        #: The priority of Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests that leave
        #: theirs at 0.
        self.priority = default_priority(priority)

    def _attempts(self, timeout: Any) -> Attempts:
        return Attempts(self.max_attempts, self.timeout if timeout is DEFAULT else timeout, self.on_retry)

    def _unary(self, method: Callable[..., Any], request: Any, timeout: Any) -> Any:
        return _retry.call(lambda t: method(request, timeout=t, metadata=self.metadata), self._attempts(timeout))

    def generate(self, prompt: Prompt, *, timeout: Any = DEFAULT, **kwargs: Any) -> GenerateStream:
        """Starts a Generate call; see :func:`mlxgrpc_client.generate_request` for the
        arguments (``model``, ``request_id``, ``max_tokens``, ``sampling``, ``stopping``, ...).
        ``.collect()`` on the stream gives the whole result at once."""
        req = generate_request(prompt, **kwargs)
        req.priority = req.priority or self.priority
        attempts = self._attempts(timeout)
        start = lambda: self.stub.Generate(req, timeout=attempts.timeout(), metadata=self.metadata)  # noqa: E731
        return GenerateStream(start, attempts, req.request_id)

    def cancel(self, request_id: str, *, timeout: Any = DEFAULT) -> bool:
        """Cancels a running Generate, Embed, Rerank, Classify, EmbedSparse or Transcribe by id (the
        Cancel RPC). True if one was found (a cancelled Rerank, Classify, EmbedSparse or Transcribe
        then raises CANCELLED)."""
        return self._unary(self.stub.Cancel, pb.CancelRequest(request_id=request_id), timeout).cancelled

    @overload
    def embed(self, inputs: str | Sequence[str], *, packed: Literal[True], timeout: Any = DEFAULT,
              **kwargs: Any) -> Embeddings: ...

    @overload
    def embed(self, inputs: str | Sequence[str], *, packed: Literal[False] = False, timeout: Any = DEFAULT,
              **kwargs: Any) -> list[pb.EmbedResponse]: ...

    def embed(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT,
              **kwargs: Any) -> list[pb.EmbedResponse] | Embeddings:
        """Embeds ``inputs``; one response per input, ordered by ``index``.
        Keywords: ``model``, ``instruction``, ``normalize``, ``dimensions``, ``request_id``,
        ``priority``, ``keep_alive`` (seconds an on-demand model stays loaded once idle),
        ``truncate`` (``"end"``: cut an over-long input, the default; ``"none"``: refuse it
        with INVALID_ARGUMENT).

        ``packed=True`` returns :class:`mlxgrpc_client.Embeddings` instead: the vectors in
        input order, sent up to 64 a message, of ``embedding_type`` ``"float32"`` (the
        default: ``array('f')`` each), ``"float16"`` (``array('f')``), ``"int8"``
        (``array('b')`` and a scale each) or ``"ubinary"`` (``bytes`` of packed bits)."""
        req = embed_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        responses = self._unary(lambda r, **kw: list(self.stub.Embed(r, **kw)), req, timeout)
        return gather_embeddings(req, responses)

    def rerank(self, query: str, documents: str | Sequence[str], *, timeout: Any = DEFAULT,
               **kwargs: Any) -> pb.RerankResponse:
        """Scores ``documents`` against ``query`` with a reranking model (a cross-encoder).
        The response has the ``model`` and its ``results`` (``pb.RerankResult``: ``index``
        in ``documents``, ``score``, a logit where higher is more relevant, and ``tokens``),
        most relevant first. Keywords: ``model``, ``top_n`` (0: every document),
        ``truncate`` (``"end"`` or ``"none"``), ``request_id``, ``priority``; see
        :func:`mlxgrpc_client.rerank_request`."""
        req = rerank_request(query, documents, **kwargs)
        req.priority = req.priority or self.priority
        return self._unary(self.stub.Rerank, req, timeout)

    def classify(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT, **kwargs: Any) -> pb.ClassifyResponse:
        """Classifies each of ``inputs`` with a sequence classifier. The response has the
        ``model`` and one ``pb.Classification`` per input, in input order: its ``index``,
        ``tokens`` and ``labels`` (``pb.LabelScore``: ``label``, ``score``), highest first;
        scores are softmax probabilities (single-label models) or each label's sigmoid
        (multi-label, and a reranker's one label). Keywords: ``model``, ``top_k`` (0: every
        label), ``truncate`` (``"end"`` or ``"none"``), ``request_id``, ``priority``; see
        :func:`mlxgrpc_client.classify_request`."""
        req = classify_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        return self._unary(self.stub.Classify, req, timeout)

    def embed_sparse(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT, **kwargs: Any) -> SparseEmbeddings:
        """Embeds each of ``inputs`` as a sparse vector with a SPLADE model
        (``capabilities.sparse_embeddings``). Returns the ``model`` and a ``SparseVector`` per
        input, in input order: its ``index``, ``tokens``, ``token_ids`` (vocabulary ids,
        ascending) and their ``weights``. Keywords: ``model``, ``top_k`` (0: every nonzero
        weight), ``truncate`` (``"end"`` or ``"none"``), ``request_id``, ``priority``; see
        :func:`mlxgrpc_client.embed_sparse_request`."""
        req = embed_sparse_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        return SparseEmbeddings.of(self._unary(self.stub.EmbedSparse, req, timeout))

    def transcribe_stream(self, source: AudioSource | pb.Audio, *, model: str = "", language: str = "",
                          task: Task | None = None, prompt: str = "", request_id: str = "", priority: int = 0,
                          timeout: Any = DEFAULT) -> TranscribeStream:
        """Starts a Transcribe call: iterate the stream for its ``pb.TranscribeResponse`` events
        (``started``, ``segment``s, ``finished``) as the server sends them; ``.collect()`` gives
        the :class:`mlxgrpc_client.Transcript`. The arguments are those of :meth:`transcribe`."""
        req = transcribe_request(source, model=model, language=language, task=task, prompt=prompt,
                                 request_id=request_id, priority=priority)
        req.priority = req.priority or self.priority
        attempts = self._attempts(timeout)
        start = lambda: self.stub.Transcribe(req, timeout=attempts.timeout(), metadata=self.metadata)  # noqa: E731
        return TranscribeStream(start, attempts, req.request_id)

    def transcribe(self, source: AudioSource | pb.Audio, *, model: str = "", language: str = "",
                   task: Task | None = None, prompt: str = "", request_id: str = "", priority: int = 0,
                   timeout: Any = DEFAULT) -> Transcript:
        """Transcribes speech with a speech model (``capabilities.transcription``: a Whisper-class
        model). ``source`` is an audio file's path or bytes (WAV, MP3, FLAC or Ogg Vorbis, its
        media type read from its signature) or a ``pb.Audio`` from
        :func:`mlxgrpc_client.audio`. Returns a :class:`mlxgrpc_client.Transcript`: the
        ``request_id``, ``model`` and ``audio_seconds``, the ``segments`` in time order (each
        ``index``, ``start_seconds``, ``end_seconds``, ``text``, ``token_ids``, ``avg_logprob``,
        ``no_speech_prob``, ``compression_ratio``), the whole ``text``, the ``language``,
        ``segment_count`` and ``seconds``. Keywords: ``model`` (empty: the server's first speech
        model), ``language`` (ISO 639-1; empty: detected), ``task`` (``"transcribe"`` or
        ``"translate"`` into English), ``prompt``, ``request_id`` (for :meth:`cancel`; empty: a
        random one), ``priority``; see :func:`mlxgrpc_client.transcribe_request`. Audio the server
        will not take is INVALID_ARGUMENT naming ``audio.media_type`` or ``audio.data``, a language
        the model does not know INVALID_ARGUMENT naming ``language``, a model that is not a speech
        model FAILED_PRECONDITION. A refusal with RetryInfo before the first event is retried."""
        return self.transcribe_stream(source, model=model, language=language, task=task, prompt=prompt,
                                      request_id=request_id, priority=priority, timeout=timeout).collect()

    def model_info(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.ModelInfo:
        """Describes ``model`` (empty: the default generation model)."""
        return self._unary(self.stub.GetModelInfo, pb.GetModelInfoRequest(model=model), timeout).info

    def list_models(self, *, timeout: Any = DEFAULT) -> list[pb.ModelInfo]:
        """Every ready model, the default generation model first."""
        return list(self._unary(self.stub.ListModels, pb.ListModelsRequest(), timeout).models)

    def model_statuses(self, *, timeout: Any = DEFAULT) -> list[pb.ModelStatus]:
        """Every model this caller may use and where it stands (ListModels' ``statuses``): its
        ``name``, ``kind``, ``state`` (``pb.MODEL_STATE_LOADING``, ``READY``, ``UNLOADING``, or
        ``UNLOADED``: a catalog model its first request loads), ``on_demand``, ``pinned``,
        ``keep_alive_seconds``, ``aliases``; for the admin role also ``resident_bytes``,
        ``idle_seconds``, ``requests`` and ``load_seconds``. Ready models first, in
        :meth:`list_models`' order."""
        return list(self._unary(self.stub.ListModels, pb.ListModelsRequest(), timeout).statuses)

    def load_model_progress(self, name: str, source: str = "", *, timeout: Any = DEFAULT,
                            **kwargs: Any) -> Iterator[pb.LoadModelResponse]:
        """Starts loading a model (the LoadModel RPC; admin role) and yields its steps as they
        come: ``pb.LoadModelResponse`` with the ``stage`` (``pb.LOAD_STAGE_RESOLVING``,
        ``PLANNING`` with the models ``evicted`` to make room, ``READING`` and ``CONVERTING``
        with ``done`` of ``total``, ``WARMING``, and last ``SERVING`` with the ``model``) and
        ``elapsed_seconds``. The keywords are those of :func:`mlxgrpc_client.load_model_request`.
        A refusal with RetryInfo before the first step is retried; closing the iterator early
        cancels the call, which abandons the load."""
        req = load_model_request(name, source, **kwargs)
        return _retry.stream(lambda t: self.stub.LoadModel(req, timeout=t, metadata=self.metadata),
                             self._attempts(timeout))

    def load_model(self, name: str, source: str = "", *, kind: str | int = "generation", dtype: str = "",
                   kv_bits: int = 0, draft_model: str = "", context_length: int = 0,
                   keep_alive: float | None = None,
                   on_progress: Callable[[pb.LoadModelResponse], Any] | None = None,
                   timeout: Any = DEFAULT) -> pb.ModelInfo:
        """Loads the model at ``source`` (relative to the server's ``--model-root``; empty: the
        catalog entry ``name``) as ``name`` and returns its ``pb.ModelInfo`` once it serves.
        ``on_progress`` is called with each step (see :meth:`load_model_progress`); the other
        keywords are those of :func:`mlxgrpc_client.load_model_request`. Needs the admin role
        (PERMISSION_DENIED ``ADMIN_ROLE_REQUIRED``); a source outside the root is
        INVALID_ARGUMENT, a name in use ALREADY_EXISTS, a model that can never fit OUT_OF_RANGE.
        A stream that ends without SERVING raises ``RuntimeError``."""
        last = None
        steps = self.load_model_progress(name, source, kind=kind, dtype=dtype, kv_bits=kv_bits,
                                         draft_model=draft_model, context_length=context_length,
                                         keep_alive=keep_alive, timeout=timeout)
        try:
            for last in steps:
                if on_progress is not None:
                    on_progress(last)
        finally:
            steps.close()  # on_progress raised: the call is cancelled
        return loaded_model(last, name)

    def unload_model(self, name: str, cancel_requests: bool = False, *,
                     timeout: Any = DEFAULT) -> pb.UnloadModelResponse:
        """Unloads model ``name`` (admin role): new requests for it are UNAVAILABLE, its running
        requests finish (``cancel_requests=True``: are cancelled, their streams ending with
        ``FINISH_REASON_CANCELLED``), then its memory is freed.
        The response has the ``name``, ``freed_bytes`` and its ``state`` now (a catalog model
        stays listed, ``pb.MODEL_STATE_UNLOADED``)."""
        req = pb.UnloadModelRequest(name=name, cancel_requests=cancel_requests)
        return self._unary(self.stub.UnloadModel, req, timeout)

    def tokenize(self, text: str, *, model: str = "", add_special_tokens: bool = False,
                 timeout: Any = DEFAULT) -> pb.TokenizeResponse:
        req = pb.TokenizeRequest(model=model, text=text, add_special_tokens=add_special_tokens)
        return self._unary(self.stub.Tokenize, req, timeout)

    def detokenize(self, token_ids: Sequence[int], *, model: str = "", skip_special_tokens: bool = False,
                   timeout: Any = DEFAULT) -> str:
        req = pb.DetokenizeRequest(model=model, token_ids=token_ids, skip_special_tokens=skip_special_tokens)
        return self._unary(self.stub.Detokenize, req, timeout).text

    def plan_memory(self, model: str = "", *, context_tokens: int = 0, max_generation_tokens: int = 0,
                    timeout: Any = DEFAULT) -> pb.MemoryPlan:
        req = pb.PlanMemoryRequest(model=model, context_tokens=context_tokens,
                                   max_generation_tokens=max_generation_tokens)
        return self._unary(self.stub.PlanMemory, req, timeout).plan

    def get_load(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.GetLoadResponse:
        """How busy each generation model is (``model`` empty: all of them): running and
        waiting requests, KV memory, the prefix cache, recent tokens per second, and
        each model's ``tenants`` (``pb.TenantLoad``: one per tenant with requests; a
        caller without the admin role sees only its own)."""
        return self._unary(self.stub.GetLoad, pb.GetLoadRequest(model=model), timeout)

    def prefetch(self, prompt: PrefetchPrompt, *, model: str = "", session_id: str = "",
                 adapter: str = "", timeout: Any = DEFAULT) -> pb.PrefetchResponse:
        """Brings the longest stored prefix of ``prompt`` into the prefix cache's memory tier
        (from the disk tier if need be) ahead of a Generate; never generates. ``prompt`` is
        text, token ids or chat messages as for :meth:`generate` (or a ``pb.PrefetchRequest``);
        ``session_id`` gives the entry that session's affinity, ``adapter`` is the one the
        Generate will name. The response has ``prompt_tokens``, ``cached_tokens`` (at most
        ``prompt_tokens - 1``) and ``tier`` (``pb.CACHE_TIER_MEMORY``, ``pb.CACHE_TIER_DISK``,
        or ``pb.CACHE_TIER_UNSPECIFIED``: nothing stored). The prefix cache switched off is
        FAILED_PRECONDITION."""
        req = prefetch_request(prompt, model=model, session_id=session_id, adapter=adapter)
        return self._unary(self.stub.Prefetch, req, timeout)

    def close_session(self, session_id: str, *, model: str = "", timeout: Any = DEFAULT) -> int:
        """Ends session ``session_id`` (the ``session_id`` of its Generate requests): the
        prefix-cache entries its requests stored lose their eviction affinity; nothing is
        deleted. Returns how many entries (0: no such open session)."""
        req = pb.CloseSessionRequest(model=model, session_id=session_id)
        return self._unary(self.stub.CloseSession, req, timeout).entries

    def load_adapter(self, name: str, path: str, *, model: str = "",
                     timeout: Any = DEFAULT) -> pb.LoadAdapterResponse:
        """Loads the adapter directory ``path`` (on the server) as ``name``; the response
        has its ``adapter`` info and the names ``evicted`` to stay within the limit."""
        req = pb.LoadAdapterRequest(model=model, name=name, path=path)
        return self._unary(self.stub.LoadAdapter, req, timeout)

    def unload_adapter(self, name: str, *, model: str = "", timeout: Any = DEFAULT) -> pb.AdapterInfo:
        """Unloads adapter ``name``; returns once the requests using it have finished."""
        req = pb.UnloadAdapterRequest(model=model, name=name)
        return self._unary(self.stub.UnloadAdapter, req, timeout).adapter

    def list_adapters(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.ListAdaptersResponse:
        """The adapters loaded on ``model`` (empty: the default generation model)."""
        return self._unary(self.stub.ListAdapters, pb.ListAdaptersRequest(model=model), timeout)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(
    address: str,
    *,
    tls: bool = False,
    root_certificates: bytes | str | os.PathLike | None = None,
    token: str | None = None,
    timeout: float | None = None,
    max_attempts: int = 3,
    on_retry: OnRetry | None = None,
    priority: int = 0,
    options: Sequence[tuple[str, Any]] = (),
) -> Client:
    """Opens a blocking client to ``address`` ("host:port").

    ``tls=True`` uses TLS with the system roots; ``root_certificates`` (PEM bytes or a
    CA file path) uses TLS with that CA. ``token`` sends ``authorization: Bearer
    <token>`` on every call. ``timeout`` is the default deadline in seconds of every
    call (``None``: none). A call refused with RESOURCE_EXHAUSTED or UNAVAILABLE and a
    RetryInfo is tried again after the server's delay, ``max_attempts`` times in all
    (1: never), within its deadline; ``on_retry(details, delay)`` hears of each retry.
    ``priority`` (-100 to 100) is that of every Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe
    request that leaves its own at 0 (e.g. a batch job's low priority).
    ``options`` are grpc channel options.
    """
    creds = channel_credentials(tls, root_certificates)
    if creds is None:
        channel = grpc.insecure_channel(address, options=list(options))
    else:
        channel = grpc.secure_channel(address, creds, options=list(options))
    return Client(channel, token=token, timeout=timeout, max_attempts=max_attempts, on_retry=on_retry,
                  priority=priority)
