package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import io.grpc.Context;
import java.util.Iterator;
import java.util.NoSuchElementException;

/**
 * The events of one Generate call, read in order with {@link #hasNext()}/{@link #next()} or a
 * for-each loop (once). {@link #cancel()} cancels the call client-side: the server stops the
 * generation and the next {@code hasNext()} throws a {@link io.grpc.StatusRuntimeException} with
 * status {@code CANCELLED}. Closing a stream that has not ended cancels it.
 */
public final class GenerateStream
    implements Iterator<GenerateResponse>, Iterable<GenerateResponse>, AutoCloseable {
  private final Context.CancellableContext context;
  private final Iterator<GenerateResponse> events;
  private volatile String requestId;
  private boolean done;

  GenerateStream(
      Context.CancellableContext context, Iterator<GenerateResponse> events, String requestId) {
    this.context = context;
    this.events = events;
    this.requestId = requestId == null || requestId.isEmpty() ? null : requestId;
  }

  /**
   * The request id for {@link MlxGrpcClient#cancel(String)}: the one set on the request, else
   * the one the server assigned (known once the {@code started} event has been read), else null.
   */
  public String requestId() {
    return requestId;
  }

  @Override
  public boolean hasNext() {
    if (done) {
      return false;
    }
    boolean more;
    try {
      more = events.hasNext();
    } catch (RuntimeException e) {
      done = true;
      context.cancel(null);
      throw e;
    }
    if (!more) {
      done = true;
      context.cancel(null);
    }
    return more;
  }

  @Override
  public GenerateResponse next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    GenerateResponse event = events.next();
    if (event.hasStarted() && requestId == null) {
      requestId = event.getStarted().getRequestId();
    }
    return event;
  }

  @Override
  public Iterator<GenerateResponse> iterator() {
    return this;
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
