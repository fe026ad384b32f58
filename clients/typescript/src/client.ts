// A thin wrapper over the generated Connect client for mlxgrpc.v1.InferenceService.
//
// Everything the generated client can do stays reachable through `client.raw`;
// the wrapper adds connection setup (TLS, bearer token, default deadline), retries
// of calls the server refused for now (RetryInfo), Generate and Transcribe handles that
// can be collected or cancelled either way, and error-detail helpers.

import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type CallOptions, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  InferenceService,
  type ClassifyRequestSchema,
  type ClassifyResponse,
  type EmbedRequestSchema,
  type EmbedRequest,
  type EmbedResponse,
  type EmbeddingType,
  type GenerateRequestSchema,
  type ListAdaptersResponse,
  type LoadAdapterResponse,
  type ModelLoad,
  type PrefetchRequestSchema,
  type PrefetchResponse,
  type RerankRequestSchema,
  type RerankResponse,
} from "./gen/mlxgrpc/v1/inference_service_pb.js";
import type {
  LoadModelRequestSchema,
  LoadModelResponse,
  ModelStatus,
  UnloadModelResponse,
} from "./gen/mlxgrpc/v1/lifecycle_pb.js";
import { LoadStage } from "./gen/mlxgrpc/v1/lifecycle_pb.js";
import type { AdapterInfo, MemoryPlan, ModelInfo } from "./gen/mlxgrpc/v1/model_pb.js";
import { decodeEmbeddings, embeddingType, type Embeddings, type EmbeddingTypeName } from "./embeddings.js";
import { GenerateCall, type GenerateResult } from "./generate.js";
import { sparseEmbeddings, type EmbedSparseRequestInit, type SparseEmbeddings } from "./sparse.js";
import { TranscribeCall, transcriptionTask, type TranscribeInit, type Transcript } from "./speech.js";
import { Attempts, withRetry, withStreamRetry, type OnRetry } from "./retry.js";

export type GenerateRequestInit = MessageInitShape<typeof GenerateRequestSchema>;
export type EmbedRequestInit = MessageInitShape<typeof EmbedRequestSchema>;
/** An EmbedRequest for embedPacked: `embeddingType` by name or EmbeddingType; `packed` is set for you. */
export type PackedEmbedRequestInit = Omit<Exclude<EmbedRequestInit, EmbedRequest>, "$typeName" | "embeddingType" | "packed"> & {
  embeddingType?: EmbeddingType | EmbeddingTypeName;
};
export type RerankRequestInit = MessageInitShape<typeof RerankRequestSchema>;
export type ClassifyRequestInit = MessageInitShape<typeof ClassifyRequestSchema>;
export type PrefetchRequestInit = MessageInitShape<typeof PrefetchRequestSchema>;
export type LoadModelRequestInit = MessageInitShape<typeof LoadModelRequestSchema>;
/** Hears of each step of a model load (loadModel); a returned promise is awaited before the next. */
export type OnLoadProgress = (step: LoadModelResponse) => void | Promise<void>;

export interface ConnectOptions {
  /**
   * Use TLS. `true` verifies the server against the system roots; `{ caFile }`
   * (or `{ ca }` with PEM contents) against the given CA instead. An address
   * starting with "https://" implies TLS with the system roots.
   */
  tls?: boolean | { caFile?: string; ca?: string | Buffer; serverName?: string };
  /** Sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** Deadline of every call that does not pass its own `timeoutMs`; it covers retries. */
  timeoutMs?: number;
  /**
   * Attempts in all for a call the server refuses with RESOURCE_EXHAUSTED or
   * UNAVAILABLE and a RetryInfo (retried after the server's delay, before the first
   * response, within the deadline). Default 3; 1 turns retrying off.
   */
  maxAttempts?: number;
  /** Hears of each retry: the refusal's details and the delay. */
  onRetry?: OnRetry;
  /**
   * The priority (-100 to 100) of every Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe request that leaves its own
   * `priority` at 0, e.g. a batch job's low one. Higher starts first among waiting
   * requests; waiting raises a request's priority, so none starves.
   */
  priority?: number;
  /** Extra interceptors, run after the bearer-token one. */
  interceptors?: Interceptor[];
}

/** The range of the priority of Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests: -MAX_PRIORITY to MAX_PRIORITY. */
export const MAX_PRIORITY = 100;

/** Connects to an mlx-grpc server at "host:port" (or an http:// / https:// URL). */
export function connect(address: string, options: ConnectOptions = {}): MlxClient {
  const priority = options.priority ?? 0;
  if (!Number.isInteger(priority) || Math.abs(priority) > MAX_PRIORITY) {
    throw new RangeError(`priority must be an integer from ${-MAX_PRIORITY} to ${MAX_PRIORITY}, not ${priority}`);
  }
  const hasScheme = /^[a-z]+:\/\//i.test(address);
  const useTls = options.tls !== undefined ? options.tls !== false : address.startsWith("https://");
  const hostPort = hasScheme ? address.replace(/^[a-z]+:\/\//i, "") : address;
  const baseUrl = `${useTls ? "https" : "http"}://${hostPort}`;

  const nodeOptions: { ca?: string | Buffer; servername?: string } = {};
  if (typeof options.tls === "object") {
    if (options.tls.caFile !== undefined) nodeOptions.ca = readFileSync(options.tls.caFile);
    if (options.tls.ca !== undefined) nodeOptions.ca = options.tls.ca;
    if (options.tls.serverName !== undefined) nodeOptions.servername = options.tls.serverName;
  }
  const sessionManager = new Http2SessionManager(baseUrl, undefined, nodeOptions);

  const interceptors: Interceptor[] = [];
  if (options.token !== undefined) {
    const value = `Bearer ${options.token}`;
    interceptors.push((next) => (req) => {
      req.header.set("authorization", value);
      return next(req);
    });
  }
  interceptors.push(...(options.interceptors ?? []));

  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    interceptors,
    defaultTimeoutMs: options.timeoutMs,
  });
  const retry = { maxAttempts: options.maxAttempts ?? 3, timeoutMs: options.timeoutMs, onRetry: options.onRetry };
  return new MlxClient(createClient(InferenceService, transport), sessionManager, retry, priority);
}

/** How a client retries: see ConnectOptions. */
export interface RetrySettings {
  maxAttempts: number;
  timeoutMs?: number;
  onRetry?: OnRetry;
}

export class MlxClient {
  constructor(
    /** The generated Connect client: every RPC with its plain request/response types (no retries). */
    readonly raw: Client<typeof InferenceService>,
    private readonly sessionManager?: Http2SessionManager,
    readonly retry: RetrySettings = { maxAttempts: 3 },
    /** The priority of Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests that leave theirs at 0 (ConnectOptions.priority). */
    readonly priority = 0,
  ) {}

  private attempts(options: CallOptions): Attempts {
    return new Attempts(this.retry.maxAttempts, options.timeoutMs ?? this.retry.timeoutMs, this.retry.onRetry);
  }

  private unary<T>(call: (options: CallOptions) => Promise<T>, options: CallOptions = {}): Promise<T> {
    return withRetry((timeoutMs) => call({ ...options, timeoutMs }), this.attempts(options), options.signal);
  }

  /**
   * Starts a Generate stream. Iterate the returned call for events (`started`,
   * then `delta`s, then `finished`), or `await call.collect()`. A request id is
   * assigned client-side when none is given, so `call.cancel()` (the Cancel RPC)
   * works at once, from any caller that knows `call.requestId`.
   */
  generate(request: GenerateRequestInit, options: CallOptions = {}): GenerateCall {
    const requestId = request.requestId || randomUUID();
    const priority = request.priority || this.priority;
    const controller = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    const start = (timeoutMs: number | undefined) =>
      this.raw.generate({ ...request, requestId, priority }, { ...options, signal, timeoutMs });
    return new GenerateCall(requestId, start, this.attempts(options), controller, (id, o) => this.cancel(id, o));
  }

  /** Runs a Generate to the end: its text, reasoning, tool calls, token ids, logprobs and first/last events. */
  generateText(request: GenerateRequestInit, options?: CallOptions): Promise<GenerateResult> {
    return this.generate(request, options).collect();
  }

  /** Cancels a queued or running Generate, Embed, Rerank, Classify, EmbedSparse or Transcribe by request id; false if none was running. */
  async cancel(requestId: string, options?: CallOptions): Promise<boolean> {
    return (await this.unary((o) => this.raw.cancel({ requestId }, o), options)).cancelled;
  }

  /**
   * Embeds texts; the responses come back ordered by input index. An input longer than
   * the model's limit is cut (`truncate: Truncation.END`, the default; `tokens` says how
   * many were used) or, with `truncate: Truncation.NONE`, refused: INVALID_ARGUMENT
   * naming the input. With `packed: true` the responses are the server's packed
   * messages as they came: embedPacked decodes them.
   */
  async embed(request: string[] | EmbedRequestInit, options?: CallOptions): Promise<EmbedResponse[]> {
    const given: EmbedRequestInit = Array.isArray(request) ? { inputs: request } : request;
    const req = { ...given, priority: given.priority || this.priority };
    const out = await this.unary(async (o) => {
      const responses: EmbedResponse[] = [];
      for await (const res of this.raw.embed(req, o)) responses.push(res);
      return responses;
    }, options);
    return out.sort((a, b) => a.index - b.index);
  }

  /**
   * Embeds texts packed: the server sends up to 64 inputs' vectors a message as bytes of
   * `embeddingType` ("float32", the default, "float16", "int8" or "ubinary", or an
   * EmbeddingType), and they come back decoded in input order (`Embeddings`:
   * `Float32Array`s, `Int8Array`s with `scales`, or `Uint8Array`s of bits). The rest as
   * for embed; a type other than float32 without packed is INVALID_ARGUMENT naming
   * `embedding_type`, which embed lets you see.
   */
  async embedPacked(request: string[] | PackedEmbedRequestInit, options?: CallOptions): Promise<Embeddings> {
    const given: PackedEmbedRequestInit = Array.isArray(request) ? { inputs: request } : request;
    const { embeddingType: type, ...rest } = given;
    const req: EmbedRequestInit = { ...rest, packed: true, ...(type === undefined ? {} : { embeddingType: embeddingType(type) }) };
    return decodeEmbeddings(await this.embed(req, options), req.inputs?.length ?? 0);
  }

  /**
   * Scores `documents` against `query` with a reranking model (a cross-encoder; empty
   * `model`: the server's first one): `results` most relevant first, each the document's
   * `index` in `documents`, its `score` (a relevance logit: higher is more relevant) and
   * the `tokens` query and document used together. `topN` keeps only the highest scored
   * (0: all); `truncate` as for embed (Truncation.NONE refuses a pair over the model's
   * limit with INVALID_ARGUMENT). A model that reranks has `capabilities.rerank`.
   */
  async rerank(request: RerankRequestInit, options?: CallOptions): Promise<RerankResponse> {
    const req = { ...request, priority: request.priority || this.priority };
    return this.unary((o) => this.raw.rerank(req, o), options);
  }

  /**
   * Classifies texts with a sequence classifier (`capabilities.classify`; empty `model`: the
   * server's first classifier, else its first reranker): one result per input, in input
   * order, each the input's `index`, its `tokens` and its `labels` (`label`, `score`),
   * highest first. Scores are softmax probabilities for a single-label classifier (an
   * input's sum to 1) and each label's sigmoid for a multi-label one or a reranker.
   * `topK` keeps only each input's highest scored labels (0: all); `truncate` as for embed.
   */
  async classify(request: string[] | ClassifyRequestInit, options?: CallOptions): Promise<ClassifyResponse> {
    const given: ClassifyRequestInit = Array.isArray(request) ? { inputs: request } : request;
    const req = { ...given, priority: given.priority || this.priority };
    return this.unary((o) => this.raw.classify(req, o), options);
  }

  /**
   * Embeds texts as sparse vectors with a SPLADE model (`capabilities.sparseEmbeddings`; empty
   * `model`: the server's first): one SparseVector per input, in input order, each the input's
   * `index`, its `tokens`, `tokenIds` (vocabulary ids, ascending) and their `weights`. `topK`
   * keeps only each input's heaviest weights (0: every nonzero one); `truncate` as for embed.
   */
  async embedSparse(request: string[] | EmbedSparseRequestInit, options?: CallOptions): Promise<SparseEmbeddings> {
    const given: EmbedSparseRequestInit = Array.isArray(request) ? { inputs: request } : request;
    const req = { ...given, priority: given.priority || this.priority };
    return sparseEmbeddings(await this.unary((o) => this.raw.embedSparse(req, o), options));
  }

  /**
   * Starts a Transcribe stream: speech to text with a speech model (`capabilities.transcription`;
   * empty `model`: the server's first). `audio` is an encoded file with its media type
   * (`await audioFile(path)`, or `audio(bytes, MediaType.WAV)`); `language` an ISO 639-1
   * code (empty: detected by a multilingual model, English for an English-only one); `task`
   * "transcribe" (the default) or "translate" (into English), or a TranscriptionTask;
   * `prompt` text the model reads first (names, spelling); `requestId` (assigned
   * client-side when you set none, so `call.cancel()` works at once) and `priority` as for
   * generate. Iterate the call for its events (`started`, `segment`s in time order,
   * `finished`) or `await call.collect()` for a Transcript.
   */
  transcribeStream(request: TranscribeInit, options: CallOptions = {}): TranscribeCall {
    const { task, ...rest } = request;
    const requestId = request.requestId || randomUUID();
    const priority = request.priority || this.priority;
    const req = { ...rest, requestId, priority, ...(task === undefined ? {} : { task: transcriptionTask(task) }) };
    const controller = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    const start = (timeoutMs: number | undefined) => this.raw.transcribe(req, { ...options, signal, timeoutMs });
    return new TranscribeCall(requestId, start, this.attempts(options), controller, (id, o) => this.cancel(id, o));
  }

  /**
   * Transcribes speech (see transcribeStream) and resolves to the Transcript: `requestId`,
   * `model`, `audioSeconds`, the `segments` (`index`, `start`, `end`, `text`, `tokenIds`,
   * `avgLogprob`, `noSpeechProb`, `compressionRatio`), the whole `text`, `language`,
   * `segmentCount` and `seconds`. Audio whose media type does not match its bytes, cut short,
   * empty, too large or too long is INVALID_ARGUMENT naming `audio.media_type` or
   * `audio.data`; a language the model does not know INVALID_ARGUMENT naming `language`; a
   * model that is not a speech model FAILED_PRECONDITION (UNSUPPORTED_OPERATION); an unknown
   * one NOT_FOUND.
   */
  transcribe(request: TranscribeInit, options?: CallOptions): Promise<Transcript> {
    return this.transcribeStream(request, options).collect();
  }

  /** Describes a model (empty name: the default generation model). */
  async getModelInfo(model = "", options?: CallOptions): Promise<ModelInfo> {
    const res = await this.unary((o) => this.raw.getModelInfo({ model }, o), options);
    if (!res.info) throw new ConnectError("GetModelInfo returned no info", Code.Internal);
    return res.info;
  }

  /** Every ready model, the default generation model first. */
  async listModels(options?: CallOptions): Promise<ModelInfo[]> {
    return (await this.unary((o) => this.raw.listModels({}, o), options)).models;
  }

  /**
   * Every model this caller may use, with its `state` (`ModelState.LOADING`, `READY`,
   * `UNLOADING`, or `UNLOADED`: a catalog model its first request loads), `onDemand`,
   * `pinned`, `keepAliveSeconds` and `aliases`; for the admin role also `residentBytes`,
   * `idleSeconds`, `requests` and `loadSeconds` (ListModels' statuses: the ready models
   * first, in listModels' order).
   */
  async modelStatuses(options?: CallOptions): Promise<ModelStatus[]> {
    return (await this.unary((o) => this.raw.listModels({}, o), options)).statuses;
  }

  /**
   * Starts loading a model (the LoadModel RPC; admin role) and streams its steps: `stage`
   * RESOLVING, PLANNING (with the idle models `evicted` to make room), READING and
   * CONVERTING (`done` of `total`), WARMING, and last SERVING with the `model`; each with
   * `elapsedSeconds`. A refusal with RetryInfo before the first step is retried; leaving
   * the loop early or aborting `options.signal` cancels the call, which abandons the load.
   */
  loadModelProgress(request: LoadModelRequestInit, options: CallOptions = {}): AsyncGenerator<LoadModelResponse, void, undefined> {
    return withStreamRetry(
      (timeoutMs, signal) => this.raw.loadModel(request, { ...options, signal, timeoutMs }),
      this.attempts(options),
      options.signal,
    );
  }

  /**
   * Loads the model at `source` (a directory with config.json and safetensors, or a .gguf
   * file, relative to the server's --model-root; empty with a catalog model's `name`: that
   * entry) as `name`, with `kind` (default generation), `options` (`dtype`, `kvBits`,
   * `draftModel`, `contextLength`) and `keepAliveSeconds` (how long it stays loaded once
   * idle: 0 unloads it once idle, negative keeps it until unloadModel; unset: kept), and
   * resolves to its ModelInfo once it serves. `onProgress` hears of each step (see
   * loadModelProgress). Needs the admin role (PERMISSION_DENIED, ADMIN_ROLE_REQUIRED); a
   * source outside the root is INVALID_ARGUMENT, a name in use ALREADY_EXISTS, a model that
   * can never fit OUT_OF_RANGE. A stream that ends without SERVING rejects (Code.Internal).
   */
  async loadModel(request: LoadModelRequestInit, onProgress?: OnLoadProgress, options?: CallOptions): Promise<ModelInfo> {
    let last: LoadModelResponse | undefined;
    for await (const step of this.loadModelProgress(request, options)) {
      last = step;
      await onProgress?.(step);
    }
    if (last?.stage !== LoadStage.SERVING || !last.model) {
      const stage = last ? LoadStage[last.stage] : "no step";
      throw new ConnectError(`LoadModel of "${request.name ?? ""}" ended without SERVING (last: ${stage})`, Code.Internal);
    }
    return last.model;
  }

  /**
   * Unloads a model (admin role): new requests for it are UNAVAILABLE, its running ones
   * finish (with `cancelRequests`, they are cancelled: their streams end with
   * FinishReason.CANCELLED), then its memory is freed. Resolves
   * to its `name`, the `freedBytes` and its `state` now (a catalog model stays listed,
   * ModelState.UNLOADED).
   */
  async unloadModel(name: string, { cancelRequests = false }: { cancelRequests?: boolean } = {}, options?: CallOptions): Promise<UnloadModelResponse> {
    return this.unary((o) => this.raw.unloadModel({ name, cancelRequests }, o), options);
  }

  /** The memory plan of a model for a context (0: the model's context length). */
  async planMemory(model = "", contextTokens = 0n, options?: CallOptions): Promise<MemoryPlan | undefined> {
    return (await this.unary((o) => this.raw.planMemory({ model, contextTokens }, o), options)).plan;
  }

  /**
   * How busy each generation model is (empty name: every one): running and waiting
   * requests, KV-cache bytes against the memory budget, the prefix cache, recent
   * tokens per second and `tenants` (a `TenantLoad` per tenant with requests; a caller
   * without the admin role sees only its own). `client.raw.getLoad` also returns the
   * server's uptime.
   */
  async getLoad(model = "", options?: CallOptions): Promise<ModelLoad[]> {
    return (await this.unary((o) => this.raw.getLoad({ model }, o), options)).models;
  }

  /**
   * Brings the longest stored prefix of a prompt into the prefix cache's memory tier (from
   * the disk tier if need be) ahead of a Generate; nothing is generated. `prompt` is given
   * as in a Generate request (`{ case: "text" | "tokens" | "chat", value }`, templated as
   * Generate would), with the `model`, `sessionId` (the entry takes the session's affinity)
   * and `adapter` the Generate will name. The response has `promptTokens`, `cachedTokens`
   * (at most promptTokens - 1) and `tier`: `CacheTier.MEMORY`, `CacheTier.DISK`, or
   * `CacheTier.UNSPECIFIED` when nothing of the prompt is stored. No prompt is
   * INVALID_ARGUMENT; the prefix cache switched off is FAILED_PRECONDITION.
   */
  async prefetch(request: PrefetchRequestInit, options?: CallOptions): Promise<PrefetchResponse> {
    return this.unary((o) => this.raw.prefetch(request, o), options);
  }

  /**
   * Ends a session (the `sessionId` its Generate requests named) on `model` (empty: the
   * default generation model): the prefix-cache entries its requests stored lose their
   * eviction affinity; nothing is deleted. Resolves to how many entries did (0: no such
   * open session).
   */
  async closeSession(sessionId: string, model = "", options?: CallOptions): Promise<number> {
    return (await this.unary((o) => this.raw.closeSession({ model, sessionId }, o), options)).entries;
  }

  /**
   * Loads an adapter directory on the server (as mlx_lm.lora writes it) under `name`,
   * for `model` (empty: the default generation model). Generate picks it with `adapter`.
   */
  async loadAdapter(name: string, path: string, model = "", options?: CallOptions): Promise<LoadAdapterResponse> {
    return this.unary((o) => this.raw.loadAdapter({ model, name, path }, o), options);
  }

  /** Unloads an adapter; resolves once the requests already using it have finished. */
  async unloadAdapter(name: string, model = "", options?: CallOptions): Promise<AdapterInfo> {
    const res = await this.unary((o) => this.raw.unloadAdapter({ model, name }, o), options);
    if (!res.adapter) throw new ConnectError("UnloadAdapter returned no adapter", Code.Internal);
    return res.adapter;
  }

  /** The adapters loaded on a model (empty name: the default generation model). */
  async listAdapters(model = "", options?: CallOptions): Promise<ListAdaptersResponse> {
    return this.unary((o) => this.raw.listAdapters({ model }, o), options);
  }

  /** Closes the HTTP/2 connection; calls in flight fail. */
  close(): void {
    this.sessionManager?.abort();
  }
}

/** Cosine similarity of two vectors of equal length. */
export function cosineSimilarity(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}
