package dev.mlxgrpc.client;

import io.grpc.Deadline;
import io.grpc.Status;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Supplier;

/**
 * Retries calls the server refused for now: RESOURCE_EXHAUSTED (admission queue full) or
 * UNAVAILABLE (model loading, server draining) carrying a google.rpc RetryInfo, after exactly
 * the delay the server asked for. A call is retried only before its first response arrived,
 * never past its deadline, and with the same request (so the same request id).
 */
final class RetryPolicy {
  private final int maxAttempts;
  private final BiConsumer<ErrorDetails, Duration> observer;

  RetryPolicy(int maxAttempts, BiConsumer<ErrorDetails, Duration> observer) {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1, not " + maxAttempts);
    }
    this.maxAttempts = maxAttempts;
    this.observer = observer;
  }

  /**
   * The wait before the attempt after {@code attempt} (1-based) failed with {@code error}, or
   * empty when the error is final: not a refusal with RetryInfo, the attempts are spent, or the
   * delay would pass {@code deadline} (null: none). Tells the observer of each retry.
   */
  Optional<Duration> delayAfter(Throwable error, int attempt, Deadline deadline) {
    if (attempt >= maxAttempts) {
      return Optional.empty();
    }
    ErrorDetails details = ErrorDetails.from(error);
    if (details.code() != Status.Code.RESOURCE_EXHAUSTED && details.code() != Status.Code.UNAVAILABLE) {
      return Optional.empty();
    }
    Optional<Duration> delay = details.retryDelay();
    if (delay.isEmpty()
        || (deadline != null && deadline.timeRemaining(TimeUnit.NANOSECONDS) <= delay.get().toNanos())) {
      return Optional.empty();
    }
    if (observer != null) {
      observer.accept(details, delay.get());
    }
    return delay;
  }

  /** Runs a unary call, sleeping and trying again while {@link #delayAfter} allows. */
  <T> T call(Supplier<T> attempt, Deadline deadline) {
    for (int n = 1; ; n++) {
      try {
        return attempt.get();
      } catch (RuntimeException e) {
        Duration delay = delayAfter(e, n, deadline).orElseThrow(() -> e);
        sleep(delay);
      }
    }
  }

  static void sleep(Duration delay) {
    try {
      Thread.sleep(delay.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw Status.CANCELLED.withDescription("interrupted while waiting to retry").withCause(e)
          .asRuntimeException();
    }
  }
}
