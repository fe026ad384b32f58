// A running Generate (and any server stream with a request id: StreamCall): an async
// iterable of events, retried before its first event when the server refuses it for now,
// cancellable both ways.

import { Code, ConnectError, type CallOptions } from "@connectrpc/connect";

import type { TokenLogprob, ToolCall } from "./gen/mlxgrpc/v1/generation_pb.js";
import type {
  GenerateResponse,
  GenerationFinished,
  GenerationStarted,
  TokenDelta,
} from "./gen/mlxgrpc/v1/inference_service_pb.js";
import { sleep, type Attempts } from "./retry.js";
import { addToolCallDeltas } from "./tools.js";

/** One answer of a Generate: GenerateRequest.n of them (one by default), by choiceIndex. */
export interface GenerateChoice {
  /** GenerateResponse.choiceIndex: 0 to n-1. */
  index: number;
  /** The answer's text (without reasoning or tool-call markup). */
  text: string;
  /** The model's thinking, kept out of text (models with thinking markers). */
  reasoning: string;
  /** The tool calls the answer made, parsed and checked; finished.reason is then FinishReason.TOOL_CALLS. */
  toolCalls: ToolCall[];
  /** The tool-call pieces as they streamed, joined by index (the model's text of each call's arguments). */
  streamedToolCalls: ToolCall[];
  tokenIds: number[];
  logprobs: TokenLogprob[];
  /** This choice's finished event (reason, usage, timings); absent if the call was aborted. */
  finished?: GenerationFinished;
}

/**
 * Everything one Generate produced (the unary-style result). Its own answer fields
 * (text, tokenIds, finished, ...) are the first choice's; `choices` holds every choice by
 * index, the first included.
 */
export interface GenerateResult extends GenerateChoice {
  requestId: string;
  started?: GenerationStarted;
  /** The prompt tokens' log probabilities (all but the first), when the request set promptLogprobs. */
  promptLogprobs: TokenLogprob[];
  choices: GenerateChoice[];
}

function emptyChoice(index: number): GenerateChoice {
  return { index, text: "", reasoning: "", toolCalls: [], streamedToolCalls: [], tokenIds: [], logprobs: [] };
}

function addDelta(choice: GenerateChoice, delta: TokenDelta): void {
  choice.text += delta.text;
  choice.reasoning += delta.reasoning;
  choice.toolCalls.push(...delta.toolCalls);
  addToolCallDeltas(choice.streamedToolCalls, delta.toolCallDeltas);
  choice.tokenIds.push(...delta.tokenIds);
  choice.logprobs.push(...delta.logprobs);
}

/** Opens one attempt of a server-streaming call with this much time left. */
export type StartStream<T> = (timeoutMs: number | undefined) => AsyncIterable<T>;

/** Opens one attempt of the call with this much time left. */
export type StartGenerate = StartStream<GenerateResponse>;

/** Sends Cancel for a request id (MlxClient.cancel). */
export type CancelById = (requestId: string, options?: CallOptions) => Promise<boolean>;

/**
 * A running server-streaming call with a request id (Generate, Transcribe): an async
 * iterable of its events, retried before the first one when the server refuses it for
 * now, cancellable both ways.
 */
export class StreamCall<T> implements AsyncIterable<T> {
  private stream: AsyncIterable<T>;

  constructor(
    /** The request id (the caller's, or the one assigned client-side). */
    readonly requestId: string,
    private readonly start: StartStream<T>,
    private readonly attempts: Attempts,
    private readonly controller: AbortController,
    private readonly cancelById: CancelById,
    /** The RPC's name, in the reason a stream the client left is aborted with. */
    private readonly rpc = "stream",
  ) {
    this.stream = start(attempts.timeoutMs());
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    let it = this.stream[Symbol.asyncIterator]();
    let received = false;
    const controller = this.controller;
    return {
      next: async () => {
        for (;;) {
          try {
            const result = await it.next();
            received = true;
            return result;
          } catch (err) {
            const delay = received ? undefined : this.attempts.delayAfter(err);
            if (delay === undefined) throw err;
            await sleep(delay, controller.signal);
            this.stream = this.start(this.attempts.timeoutMs());
            it = this.stream[Symbol.asyncIterator]();
          }
        }
      },
      // Leaving a for-await loop early (break, return, throw) cancels the call, so
      // the server stops working on it and the call's deadline timer is released.
      return: async (value?: unknown) => {
        controller.abort(new ConnectError(`${this.rpc} stream closed by the client`, Code.Canceled));
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

  /** Asks the server to cancel the request (Cancel RPC with `requestId`); false if none was running. */
  cancel(options?: CallOptions): Promise<boolean> {
    return this.cancelById(this.requestId, options);
  }
}

/** A running Generate: an async iterable of events plus both ways to cancel it. */
export class GenerateCall extends StreamCall<GenerateResponse> {
  constructor(requestId: string, start: StartGenerate, attempts: Attempts, controller: AbortController, cancelById: CancelById) {
    super(requestId, start, attempts, controller, cancelById, "generate");
  }

  /** Reads the whole stream: the unary form of Generate (every choice, the prompt's logprobs). */
  async collect(): Promise<GenerateResult> {
    const result: GenerateResult = { ...emptyChoice(0), requestId: this.requestId, promptLogprobs: [], choices: [] };
    const choice = (index: number): GenerateChoice => {
      while (result.choices.length <= index) result.choices.push(emptyChoice(result.choices.length));
      return result.choices[index];
    };
    choice(0);
    for await (const res of this) {
      const ev = res.event;
      if (ev.case === "started") result.started = ev.value;
      else if (ev.case === "promptLogprobs") result.promptLogprobs.push(...ev.value.tokens);
      else if (ev.case === "delta") {
        addDelta(choice(res.choiceIndex), ev.value);
        if (res.choiceIndex === 0) addDelta(result, ev.value);
      } else if (ev.case === "finished") {
        choice(res.choiceIndex).finished = ev.value;
        if (res.choiceIndex === 0) result.finished = ev.value;
      }
    }
    return result;
  }

  /**
   * Asks the server to cancel (Cancel RPC). The stream then ends normally with a
   * `finished` event whose reason is FINISH_REASON_CANCELLED.
   */
  override cancel(options?: CallOptions): Promise<boolean> {
    return super.cancel(options);
  }
}
