// Retrying calls the server refused for now: RESOURCE_EXHAUSTED (admission queue full)
// or UNAVAILABLE (model loading, server draining) carrying a google.rpc RetryInfo,
// after exactly the delay the server asked for. A call is retried only before its
// first response arrived, never past its deadline, and with the same request id.

import { Code, ConnectError } from "@connectrpc/connect";

import { errorDetails, type ErrorDetails } from "./errors.js";

/** Called before each retry with the refusal's details and the delay in milliseconds. */
export type OnRetry = (details: ErrorDetails, delayMs: number) => void;

const RETRYABLE = new Set([Code.ResourceExhausted, Code.Unavailable]);

/** The attempts and the deadline of one logical call. */
export class Attempts {
  private left: number;
  private readonly deadline?: number;

  constructor(
    maxAttempts: number,
    timeoutMs: number | undefined,
    private readonly onRetry?: OnRetry,
  ) {
    if (!(maxAttempts >= 1)) throw new RangeError("maxAttempts must be at least 1");
    this.left = maxAttempts;
    this.deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  }

  /** The time left for the next attempt (undefined: no deadline). */
  timeoutMs(): number | undefined {
    return this.deadline === undefined ? undefined : Math.max(1, this.deadline - Date.now());
  }

  /** Milliseconds to wait before trying again after `err`; undefined when `err` is final. */
  delayAfter(err: unknown): number | undefined {
    this.left -= 1;
    if (this.left < 1 || !(err instanceof ConnectError) || !RETRYABLE.has(err.code)) return undefined;
    const details = errorDetails(err);
    const delay = details.retryDelayMs;
    if (delay === undefined) return undefined;
    if (this.deadline !== undefined && Date.now() + delay >= this.deadline) return undefined;
    this.onRetry?.(details, delay);
    return delay;
  }
}

/** Resolves after `ms`, or rejects as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(ConnectError.from(signal.reason, Code.Canceled));
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(ConnectError.from(signal?.reason, Code.Canceled));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** `call(timeoutMs)` (a unary call), retried as `attempts` allows. */
export async function withRetry<T>(
  call: (timeoutMs: number | undefined) => Promise<T>,
  attempts: Attempts,
  signal?: AbortSignal,
): Promise<T> {
  for (;;) {
    try {
      return await call(attempts.timeoutMs());
    } catch (err) {
      const delay = attempts.delayAfter(err);
      if (delay === undefined) throw err;
      await sleep(delay, signal);
    }
  }
}

/**
 * The messages of a server stream opened by `start(timeoutMs, signal)`, retried as
 * `attempts` allows before its first message arrived. Leaving the loop early (break,
 * return, throw) or aborting `signal` cancels the call.
 */
export async function* withStreamRetry<T>(
  start: (timeoutMs: number | undefined, signal: AbortSignal) => AsyncIterable<T>,
  attempts: Attempts,
  signal?: AbortSignal,
): AsyncGenerator<T, void, undefined> {
  const controller = new AbortController();
  const both = signal ? AbortSignal.any([signal, controller.signal]) : controller.signal;
  let received = false;
  let it: AsyncIterator<T> | undefined;
  let open = false; // a call is open and the consumer left while it was
  try {
    for (;;) {
      it = start(attempts.timeoutMs(), both)[Symbol.asyncIterator]();
      try {
        for (;;) {
          open = false;
          const result = await it.next();
          if (result.done) return;
          received = true;
          open = true;
          yield result.value;
        }
      } catch (err) {
        const delay = received ? undefined : attempts.delayAfter(err);
        if (delay === undefined) throw err;
        await sleep(delay, both);
      }
    }
  } finally {
    if (open && it) {
      controller.abort(new ConnectError("stream closed by the client", Code.Canceled));
      // Connect's stream iterator has no return(): reading on after the abort drains
      // the call until it rejects with CANCELLED, which clears its deadline timer.
      try {
        while (!(await it.next()).done);
      } catch {
        // expected: the aborted call rejects
      }
    }
  }
}
