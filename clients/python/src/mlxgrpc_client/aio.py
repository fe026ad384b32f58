"""The asyncio client (grpc.aio). Same surface as the blocking :class:`mlxgrpc_client.Client`,
with ``await`` on unary calls and ``async for`` over streams."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Callable, Sequence
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


def _task_cancelled() -> bool:
    """The current task itself is being cancelled (not just the gRPC call)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python >= 3.11
    return bool(cancelling and cancelling())


EventT = TypeVar("EventT")
ResultT = TypeVar("ResultT")
StreamT = TypeVar("StreamT", bound="_EventStream[Any, Any]")


class _EventStream(Generic[EventT, ResultT]):
    """A running server-streaming call whose events gather into :attr:`result` (its ``_add``):
    retried before its first event, cancelled client-side without an error."""

    def __init__(self, start: Callable[[], grpc.aio.UnaryStreamCall], attempts: Attempts, result: ResultT):
        self._start = start
        self._attempts = attempts
        self._call = start()
        self._cancelled = False
        self.result = result
        self._events = self._iterate()

    @property
    def request_id(self) -> str:
        """The request id, usable with :meth:`AsyncClient.cancel` at any time."""
        return self.result.request_id  # type: ignore[attr-defined]

    async def _iterate(self) -> AsyncIterator[EventT]:
        received = False
        while True:
            try:
                async for event in self._call:
                    received = True
                    self.result._add(event)  # type: ignore[attr-defined]
                    yield event
                return
            except asyncio.CancelledError:
                if self._cancelled and not _task_cancelled():
                    return
                raise
            except grpc.aio.AioRpcError as err:
                if self._cancelled and err.code() == grpc.StatusCode.CANCELLED:
                    return
                delay = None if received else self._attempts.delay_after(err)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            if self._cancelled:
                return
            self._call = self._start()

    def __aiter__(self) -> AsyncIterator[EventT]:
        return self._events

    async def __anext__(self) -> EventT:
        return await self._events.__anext__()

    async def collect(self) -> ResultT:
        """Reads the rest of the stream and returns everything it produced."""
        async for _ in self._events:
            pass
        return self.result

    def cancel(self) -> bool:
        """Cancels the call client-side (the server stops the work too)."""
        self._cancelled = True
        return self._call.cancel()

    async def code(self) -> grpc.StatusCode:
        """The call's final status code (waits until the call ends)."""
        return await self._call.code()

    async def __aenter__(self: StreamT) -> StreamT:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._call.done():
            self.cancel()


class GenerateStream(_EventStream[pb.GenerateResponse, GenerationResult]):
    """A running Generate call: ``async for`` it for ``pb.GenerateResponse`` events.

    The stream gathers the events into :attr:`result`. Errors raise
    ``grpc.aio.AioRpcError`` (pass it to :func:`mlxgrpc_client.error_details`) once
    retries are spent, as in the blocking client. :meth:`cancel` cancels the call
    client-side: iteration then just stops (grpc.aio would raise
    ``asyncio.CancelledError``) and ``await code()`` is CANCELLED. Used as an async
    context manager, leaving the block cancels the call if still running.
    """

    def __init__(self, start: Callable[[], grpc.aio.UnaryStreamCall], attempts: Attempts, request_id: str):
        super().__init__(start, attempts, GenerationResult(request_id=request_id))


class TranscribeStream(_EventStream[pb.TranscribeResponse, Transcript]):
    """A running Transcribe call: ``async for`` it for ``pb.TranscribeResponse`` events
    (``started``, ``segment``s, ``finished``), gathered into :attr:`result` (a
    :class:`mlxgrpc_client.Transcript`). Errors, retries, :meth:`cancel`, ``await code()``
    and the async context manager are those of :class:`GenerateStream`.
    """

    def __init__(self, start: Callable[[], grpc.aio.UnaryStreamCall], attempts: Attempts, request_id: str):
        super().__init__(start, attempts, Transcript(request_id=request_id))


class AsyncClient:
    """An asyncio InferenceService client. Create it with :func:`connect`.

    Every call carries the bearer token (if any) and the default deadline unless
    ``timeout=`` overrides it (``None``: no deadline); refusals with RetryInfo are
    retried as in the blocking client. :attr:`stub` is the raw stub.
    """

    def __init__(self, channel: grpc.aio.Channel, *, token: str | None = None, timeout: float | None = None,
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

    async def _unary(self, method: Callable[..., Any], request: Any, timeout: Any) -> Any:
        return await _retry.acall(lambda t: method(request, timeout=t, metadata=self.metadata),
                                  self._attempts(timeout))

    def generate(self, prompt: Prompt, *, timeout: Any = DEFAULT, **kwargs: Any) -> GenerateStream:
        """Starts a Generate call (not awaited: iterate the stream, or ``await
        .collect()``); see :func:`mlxgrpc_client.generate_request` for the arguments."""
        req = generate_request(prompt, **kwargs)
        req.priority = req.priority or self.priority
        attempts = self._attempts(timeout)
        start = lambda: self.stub.Generate(req, timeout=attempts.timeout(), metadata=self.metadata)  # noqa: E731
        return GenerateStream(start, attempts, req.request_id)

    async def cancel(self, request_id: str, *, timeout: Any = DEFAULT) -> bool:
        """Cancels a running Generate, Embed, Rerank, Classify, EmbedSparse or Transcribe by id (the
        Cancel RPC). True if one was found."""
        return (await self._unary(self.stub.Cancel, pb.CancelRequest(request_id=request_id), timeout)).cancelled

    @overload
    async def embed(self, inputs: str | Sequence[str], *, packed: Literal[True], timeout: Any = DEFAULT,
                    **kwargs: Any) -> Embeddings: ...

    @overload
    async def embed(self, inputs: str | Sequence[str], *, packed: Literal[False] = False, timeout: Any = DEFAULT,
                    **kwargs: Any) -> list[pb.EmbedResponse]: ...

    async def embed(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT,
                    **kwargs: Any) -> list[pb.EmbedResponse] | Embeddings:
        """Embeds ``inputs``; one response per input, ordered by ``index`` (keywords as in
        :meth:`mlxgrpc_client.Client.embed`, ``truncate`` among them); ``packed=True``
        returns :class:`mlxgrpc_client.Embeddings`, in input order, of ``embedding_type``."""
        async def embed_all(request: pb.EmbedRequest, **kw: Any) -> list[pb.EmbedResponse]:
            return [r async for r in self.stub.Embed(request, **kw)]

        req = embed_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        responses = await self._unary(embed_all, req, timeout)
        return gather_embeddings(req, responses)

    async def rerank(self, query: str, documents: str | Sequence[str], *, timeout: Any = DEFAULT,
                     **kwargs: Any) -> pb.RerankResponse:
        """Scores ``documents`` against ``query``; results most relevant first (see
        :meth:`mlxgrpc_client.Client.rerank` for the keywords)."""
        req = rerank_request(query, documents, **kwargs)
        req.priority = req.priority or self.priority
        return await self._unary(self.stub.Rerank, req, timeout)

    async def classify(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT,
                       **kwargs: Any) -> pb.ClassifyResponse:
        """Classifies each of ``inputs``; results in input order, labels highest first (see
        :meth:`mlxgrpc_client.Client.classify` for the keywords)."""
        req = classify_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        return await self._unary(self.stub.Classify, req, timeout)

    async def embed_sparse(self, inputs: str | Sequence[str], *, timeout: Any = DEFAULT,
                           **kwargs: Any) -> SparseEmbeddings:
        """Embeds each of ``inputs`` as a sparse vector; one ``SparseVector`` per input, in input
        order (see :meth:`mlxgrpc_client.Client.embed_sparse` for the keywords)."""
        req = embed_sparse_request(inputs, **kwargs)
        req.priority = req.priority or self.priority
        return SparseEmbeddings.of(await self._unary(self.stub.EmbedSparse, req, timeout))

    def transcribe_stream(self, source: AudioSource | pb.Audio, *, model: str = "", language: str = "",
                          task: Task | None = None, prompt: str = "", request_id: str = "", priority: int = 0,
                          timeout: Any = DEFAULT) -> TranscribeStream:
        """Starts a Transcribe call (not awaited: ``async for`` the stream, or ``await
        .collect()``); the arguments are those of :meth:`mlxgrpc_client.Client.transcribe`."""
        req = transcribe_request(source, model=model, language=language, task=task, prompt=prompt,
                                 request_id=request_id, priority=priority)
        req.priority = req.priority or self.priority
        attempts = self._attempts(timeout)
        start = lambda: self.stub.Transcribe(req, timeout=attempts.timeout(), metadata=self.metadata)  # noqa: E731
        return TranscribeStream(start, attempts, req.request_id)

    async def transcribe(self, source: AudioSource | pb.Audio, *, model: str = "", language: str = "",
                         task: Task | None = None, prompt: str = "", request_id: str = "", priority: int = 0,
                         timeout: Any = DEFAULT) -> Transcript:
        """Transcribes speech with a speech model and returns the
        :class:`mlxgrpc_client.Transcript` (see :meth:`mlxgrpc_client.Client.transcribe`)."""
        return await self.transcribe_stream(source, model=model, language=language, task=task, prompt=prompt,
                                            request_id=request_id, priority=priority, timeout=timeout).collect()

    async def model_info(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.ModelInfo:
        return (await self._unary(self.stub.GetModelInfo, pb.GetModelInfoRequest(model=model), timeout)).info

    async def list_models(self, *, timeout: Any = DEFAULT) -> list[pb.ModelInfo]:
        return list((await self._unary(self.stub.ListModels, pb.ListModelsRequest(), timeout)).models)

    async def model_statuses(self, *, timeout: Any = DEFAULT) -> list[pb.ModelStatus]:
        """Every model this caller may use and its ``state`` (see
        :meth:`mlxgrpc_client.Client.model_statuses`)."""
        return list((await self._unary(self.stub.ListModels, pb.ListModelsRequest(), timeout)).statuses)

    def load_model_progress(self, name: str, source: str = "", *, timeout: Any = DEFAULT,
                            **kwargs: Any) -> AsyncIterator[pb.LoadModelResponse]:
        """Starts loading a model; ``async for`` the ``pb.LoadModelResponse`` steps, the last
        SERVING with the model (see :meth:`mlxgrpc_client.Client.load_model_progress`)."""
        req = load_model_request(name, source, **kwargs)
        return _retry.astream(lambda t: self.stub.LoadModel(req, timeout=t, metadata=self.metadata),
                              self._attempts(timeout))

    async def load_model(self, name: str, source: str = "", *, kind: str | int = "generation", dtype: str = "",
                         kv_bits: int = 0, draft_model: str = "", context_length: int = 0,
                         keep_alive: float | None = None,
                         on_progress: Callable[[pb.LoadModelResponse], Any] | None = None,
                         timeout: Any = DEFAULT) -> pb.ModelInfo:
        """Loads the model at ``source`` as ``name`` and returns its ``pb.ModelInfo`` once it
        serves; ``on_progress`` (a function or a coroutine function) hears of each step (see
        :meth:`mlxgrpc_client.Client.load_model`)."""
        last = None
        steps = self.load_model_progress(name, source, kind=kind, dtype=dtype, kv_bits=kv_bits,
                                         draft_model=draft_model, context_length=context_length,
                                         keep_alive=keep_alive, timeout=timeout)
        try:
            async for last in steps:
                if on_progress is not None:
                    heard = on_progress(last)
                    if inspect.isawaitable(heard):
                        await heard
        finally:
            await steps.aclose()
        return loaded_model(last, name)

    async def unload_model(self, name: str, cancel_requests: bool = False, *,
                           timeout: Any = DEFAULT) -> pb.UnloadModelResponse:
        """Unloads model ``name`` (see :meth:`mlxgrpc_client.Client.unload_model`)."""
        req = pb.UnloadModelRequest(name=name, cancel_requests=cancel_requests)
        return await self._unary(self.stub.UnloadModel, req, timeout)

    async def tokenize(self, text: str, *, model: str = "", add_special_tokens: bool = False,
                       timeout: Any = DEFAULT) -> pb.TokenizeResponse:
        req = pb.TokenizeRequest(model=model, text=text, add_special_tokens=add_special_tokens)
        return await self._unary(self.stub.Tokenize, req, timeout)

    async def detokenize(self, token_ids: Sequence[int], *, model: str = "", skip_special_tokens: bool = False,
                         timeout: Any = DEFAULT) -> str:
        req = pb.DetokenizeRequest(model=model, token_ids=token_ids, skip_special_tokens=skip_special_tokens)
        return (await self._unary(self.stub.Detokenize, req, timeout)).text

    async def plan_memory(self, model: str = "", *, context_tokens: int = 0, max_generation_tokens: int = 0,
                          timeout: Any = DEFAULT) -> pb.MemoryPlan:
        req = pb.PlanMemoryRequest(model=model, context_tokens=context_tokens,
                                   max_generation_tokens=max_generation_tokens)
        return (await self._unary(self.stub.PlanMemory, req, timeout)).plan

    async def get_load(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.GetLoadResponse:
        """How busy each generation model is (``model`` empty: all of them): running and
        waiting requests, KV memory, the prefix cache, recent tokens per second, and
        each model's ``tenants`` (``pb.TenantLoad``: one per tenant with requests; a
        caller without the admin role sees only its own)."""
        return await self._unary(self.stub.GetLoad, pb.GetLoadRequest(model=model), timeout)

    async def prefetch(self, prompt: PrefetchPrompt, *, model: str = "", session_id: str = "",
                       adapter: str = "", timeout: Any = DEFAULT) -> pb.PrefetchResponse:
        """Brings the longest stored prefix of ``prompt`` into the prefix cache's memory
        tier (see :meth:`mlxgrpc_client.Client.prefetch`)."""
        req = prefetch_request(prompt, model=model, session_id=session_id, adapter=adapter)
        return await self._unary(self.stub.Prefetch, req, timeout)

    async def close_session(self, session_id: str, *, model: str = "", timeout: Any = DEFAULT) -> int:
        """Ends session ``session_id``'s prefix-cache affinity; returns how many entries lost it."""
        req = pb.CloseSessionRequest(model=model, session_id=session_id)
        return (await self._unary(self.stub.CloseSession, req, timeout)).entries

    async def load_adapter(self, name: str, path: str, *, model: str = "",
                           timeout: Any = DEFAULT) -> pb.LoadAdapterResponse:
        """Loads the adapter directory ``path`` (on the server) as ``name``."""
        req = pb.LoadAdapterRequest(model=model, name=name, path=path)
        return await self._unary(self.stub.LoadAdapter, req, timeout)

    async def unload_adapter(self, name: str, *, model: str = "", timeout: Any = DEFAULT) -> pb.AdapterInfo:
        """Unloads adapter ``name``; returns once the requests using it have finished."""
        req = pb.UnloadAdapterRequest(model=model, name=name)
        return (await self._unary(self.stub.UnloadAdapter, req, timeout)).adapter

    async def list_adapters(self, model: str = "", *, timeout: Any = DEFAULT) -> pb.ListAdaptersResponse:
        """The adapters loaded on ``model`` (empty: the default generation model)."""
        return await self._unary(self.stub.ListAdapters, pb.ListAdaptersRequest(model=model), timeout)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


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
) -> AsyncClient:
    """Opens an asyncio client to ``address``; the options are those of
    :func:`mlxgrpc_client.connect`. Call it inside the event loop that uses it."""
    creds = channel_credentials(tls, root_certificates)
    if creds is None:
        channel = grpc.aio.insecure_channel(address, options=list(options))
    else:
        channel = grpc.aio.secure_channel(address, creds, options=list(options))
    return AsyncClient(channel, token=token, timeout=timeout, max_attempts=max_attempts, on_retry=on_retry,
                       priority=priority)
