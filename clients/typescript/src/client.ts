// A thin wrapper over the generated Connect client for mlxgrpc.v1.InferenceService.
//
// Everything the generated client can do stays reachable through `client.raw`;
// the wrapper only adds connection setup (TLS, bearer token, default deadline),
// a Generate handle that can be cancelled either way, and error-detail helpers.

import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type CallOptions,
  type Client,
  type Interceptor,
} from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  InferenceService,
  type EmbedRequestSchema,
  type EmbedResponse,
  type GenerateRequestSchema,
  type GenerateResponse,
  type GenerationFinished,
  type GenerationStarted,
  type ListAdaptersResponse,
  type LoadAdapterResponse,
} from "./gen/mlxgrpc/v1/inference_service_pb.js";
import type { AdapterInfo, ModelInfo } from "./gen/mlxgrpc/v1/model_pb.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
  type BadRequest_FieldViolation,
  type ErrorInfo,
  type RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";

export type GenerateRequestInit = MessageInitShape<typeof GenerateRequestSchema>;
export type EmbedRequestInit = MessageInitShape<typeof EmbedRequestSchema>;

export interface ConnectOptions {
  /**
   * Use TLS. `true` verifies the server against the system roots; `{ caFile }`
   * (or `{ ca }` with PEM contents) against the given CA instead. An address
   * starting with "https://" implies TLS with the system roots.
   */
  tls?: boolean | { caFile?: string; ca?: string | Buffer; serverName?: string };
  /** Sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** Deadline applied to every call that does not pass its own `timeoutMs`. */
  timeoutMs?: number;
  /** Extra interceptors, run after the bearer-token one. */
  interceptors?: Interceptor[];
}

/** Connects to an mlx-grpc server at "host:port" (or an http:// / https:// URL). */
export function connect(address: string, options: ConnectOptions = {}): MlxClient {
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
  return new MlxClient(createClient(InferenceService, transport), sessionManager);
}

export class MlxClient {
  constructor(
    /** The generated Connect client: every RPC with its plain request/response types. */
    readonly raw: Client<typeof InferenceService>,
    private readonly sessionManager?: Http2SessionManager,
  ) {}

  /**
   * Starts a Generate stream. Iterate the returned call for events (`started`,
   * then `delta`s, then `finished`). A request id is assigned client-side when
   * none is given, so `call.cancel()` (the Cancel RPC) works at any time.
   */
  generate(request: GenerateRequestInit, options: CallOptions = {}): GenerateCall {
    const requestId = request.requestId || randomUUID();
    const controller = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    const stream = this.raw.generate({ ...request, requestId }, { ...options, signal });
    return new GenerateCall(requestId, stream, controller, this);
  }

  /** Runs a Generate to the end and collects its text, token ids and first/last events. */
  async generateText(request: GenerateRequestInit, options?: CallOptions): Promise<GenerateResult> {
    const result: GenerateResult = { text: "", tokenIds: [] };
    for await (const res of this.generate(request, options)) {
      const ev = res.event;
      if (ev.case === "started") result.started = ev.value;
      else if (ev.case === "delta") {
        result.text += ev.value.text;
        result.tokenIds.push(...ev.value.tokenIds);
      } else if (ev.case === "finished") result.finished = ev.value;
    }
    return result;
  }

  /** Cancels a queued or running Generate/Embed by request id; false if none was running. */
  async cancel(requestId: string, options?: CallOptions): Promise<boolean> {
    return (await this.raw.cancel({ requestId }, options)).cancelled;
  }

  /** Embeds texts; the responses come back ordered by input index. */
  async embed(request: string[] | EmbedRequestInit, options?: CallOptions): Promise<EmbedResponse[]> {
    const req = Array.isArray(request) ? { inputs: request } : request;
    const out: EmbedResponse[] = [];
    for await (const res of this.raw.embed(req, options)) out.push(res);
    return out.sort((a, b) => a.index - b.index);
  }

  /** Describes a model (empty name: the default generation model). */
  async getModelInfo(model = "", options?: CallOptions): Promise<ModelInfo> {
    const res = await this.raw.getModelInfo({ model }, options);
    if (!res.info) throw new ConnectError("GetModelInfo returned no info", Code.Internal);
    return res.info;
  }

  /**
   * Loads an adapter directory on the server (as mlx_lm.lora writes it) under `name`,
   * for `model` (empty: the default generation model). Generate picks it with `adapter`.
   */
  async loadAdapter(name: string, path: string, model = "", options?: CallOptions): Promise<LoadAdapterResponse> {
    return this.raw.loadAdapter({ model, name, path }, options);
  }

  /** Unloads an adapter; resolves once the requests already using it have finished. */
  async unloadAdapter(name: string, model = "", options?: CallOptions): Promise<AdapterInfo> {
    const res = await this.raw.unloadAdapter({ model, name }, options);
    if (!res.adapter) throw new ConnectError("UnloadAdapter returned no adapter", Code.Internal);
    return res.adapter;
  }

  /** The adapters loaded on a model (empty name: the default generation model). */
  async listAdapters(model = "", options?: CallOptions): Promise<ListAdaptersResponse> {
    return this.raw.listAdapters({ model }, options);
  }

  /** Closes the HTTP/2 connection; calls in flight fail. */
  close(): void {
    this.sessionManager?.abort();
  }
}

export interface GenerateResult {
  text: string;
  tokenIds: number[];
  started?: GenerationStarted;
  finished?: GenerationFinished;
}

/** A running Generate: an async iterable of events plus both ways to cancel it. */
export class GenerateCall implements AsyncIterable<GenerateResponse> {
  constructor(
    /** The request id (the caller's, or the one assigned client-side). */
    readonly requestId: string,
    private readonly stream: AsyncIterable<GenerateResponse>,
    private readonly controller: AbortController,
    private readonly client: MlxClient,
  ) {}

  [Symbol.asyncIterator](): AsyncIterator<GenerateResponse> {
    const it = this.stream[Symbol.asyncIterator]();
    const controller = this.controller;
    return {
      next: () => it.next(),
      // Leaving a for-await loop early (break, return, throw) cancels the call, so
      // the server stops generating and the call's deadline timer is released.
      return: async (value?: unknown) => {
        controller.abort(new ConnectError("generate stream closed by the client", Code.Canceled));
        // Connect's stream iterator has no return(); reading on after the
        // abort drains the call until it rejects with CANCELLED, which clears the timer.
        try {
          while (!(await it.next()).done);
        } catch {
          // expected: the aborted call rejects
        }
        return { done: true, value };
      },
    };
  }

  /** Cancels the call client-side: iteration then fails with Code.Canceled. */
  abort(reason?: unknown): void {
    this.controller.abort(reason);
  }

  /**
   * Asks the server to cancel (Cancel RPC). The stream then ends normally with a
   * `finished` event whose reason is FINISH_REASON_CANCELLED.
   */
  cancel(options?: CallOptions): Promise<boolean> {
    return this.client.cancel(this.requestId, options);
  }
}

/** The google.rpc details of a failed call, decoded from `grpc-status-details-bin`. */
export interface ErrorDetails {
  code: Code;
  /** The status message, without Connect's "[code]" prefix. */
  message: string;
  errorInfo?: ErrorInfo;
  fieldViolations: BadRequest_FieldViolation[];
  retryInfo?: RetryInfo;
  /** RetryInfo's delay in milliseconds, when present. */
  retryDelayMs?: number;
}

/** Extracts ErrorInfo, BadRequest field violations and RetryInfo from any thrown error. */
export function errorDetails(err: unknown): ErrorDetails {
  const ce = ConnectError.from(err);
  const errorInfo = ce.findDetails(ErrorInfoSchema)[0];
  const fieldViolations = ce.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations);
  const retryInfo = ce.findDetails(RetryInfoSchema)[0];
  const delay = retryInfo?.retryDelay;
  const retryDelayMs = delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : undefined;
  return { code: ce.code, message: ce.rawMessage, errorInfo, fieldViolations, retryInfo, retryDelayMs };
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
