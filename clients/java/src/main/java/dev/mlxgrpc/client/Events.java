package dev.mlxgrpc.client;

import io.grpc.Context;
import io.grpc.Deadline;
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * The events of one server-streaming call through the blocking stub, behind {@link GenerateStream}
 * and {@link TranscribeStream}: read once, in order; a refusal with RetryInfo before the first
 * event is retried after the server's delay; {@link #cancel()} cancels the call client-side (the
 * next {@link #hasNext()} throws a {@link io.grpc.StatusRuntimeException} with status {@code
 * CANCELLED}).
 */
final class Events<T> implements Iterator<T> {
  private final Context.CancellableContext context;
  private final Supplier<Iterator<T>> start;
  private final RetryPolicy retry;
  private final Deadline deadline;
  private Iterator<T> events;
  private int attempt = 1;
  private boolean received;
  private boolean done;

  Events(Supplier<Iterator<T>> start, RetryPolicy retry, Deadline deadline) {
    this.context = Context.current().withCancellation();
    this.start = start;
    this.retry = retry;
    this.deadline = deadline;
    this.events = open();
  }

  /** Starts one attempt, bound to this stream's cancellable context. */
  private Iterator<T> open() {
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
  public T next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    received = true;
    return events.next();
  }

  /** Cancels the call client-side (safe from any thread, and after the stream has ended). */
  void cancel() {
    context.cancel(null);
  }
}
