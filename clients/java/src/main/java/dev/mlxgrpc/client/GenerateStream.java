package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import io.grpc.Context;
import io.grpc.Deadline;
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * The events of one Generate call, read in order with {@link #hasNext()}/{@link #next()} or a
 * for-each loop (once). A refusal with RetryInfo before the first event is retried after the
 * server's delay. {@link #cancel()} cancels the call client-side: the server stops the
 * generation and the next {@code hasNext()} throws a {@link io.grpc.StatusRuntimeException} with
 * status {@code CANCELLED}. Closing a stream that has not ended cancels it.
 */
public final class GenerateStream
    implements Iterator<GenerateResponse>, Iterable<GenerateResponse>, AutoCloseable {
  private final Context.CancellableContext context;
  private final Supplier<Iterator<GenerateResponse>> start;
  private final RetryPolicy retry;
  private final Deadline deadline;
  private final String requestId;
  private Iterator<GenerateResponse> events;
  private int attempt = 1;
  private boolean received;
  private boolean done;

  GenerateStream(
      Supplier<Iterator<GenerateResponse>> start,
      RetryPolicy retry,
      Deadline deadline,
      String requestId) {
    this.context = Context.current().withCancellation();
    this.start = start;
    this.retry = retry;
    this.deadline = deadline;
    this.requestId = requestId;
    this.events = open();
  }

  /** Starts one attempt, bound to this stream's cancellable context. */
  private Iterator<GenerateResponse> open() {
    Context previous = context.attach();
    try {
      return start.get();
    } catch (RuntimeException e) {
      context.cancel(e);
      throw e;
    } finally {
      context.detach(previous);
    }
  }

  /**
   * The request id for {@link MlxGrpcClient#cancel(String)}: the request's own, or the one
   * assigned client-side. Known before anything arrives, usable from any thread.
   */
  public String requestId() {
    return requestId;
  }

  @Override
  public boolean hasNext() {
    while (!done) {
      try {
        if (events.hasNext()) {
          return true;
        }
        end();
      } catch (RuntimeException e) {
        Optional<Duration> delay =
            received || context.isCancelled()
                ? Optional.empty()
                : retry.delayAfter(e, attempt++, deadline);
        if (delay.isEmpty()) {
          end();
          throw e;
        }
        RetryPolicy.sleep(delay.get());
        events = open();
      }
    }
    return false;
  }

  private void end() {
    done = true;
    context.cancel(null);
  }

  @Override
  public GenerateResponse next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    received = true;
    return events.next();
  }

  @Override
  public Iterator<GenerateResponse> iterator() {
    return this;
  }

  /** Reads the rest of the stream: everything the generation produced. */
  public GenerationResult collect() {
    GenerationResult result = new GenerationResult(requestId);
    forEachRemaining(result::add);
    return result;
  }

  /** Cancels the call client-side (safe from any thread, and after the stream has ended). */
  public void cancel() {
    context.cancel(null);
  }

  /** Cancels the call if it is still open. */
  @Override
  public void close() {
    cancel();
  }
}
