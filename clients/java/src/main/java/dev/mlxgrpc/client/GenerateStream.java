package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import io.grpc.Deadline;
import java.util.Iterator;
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
  private final Events<GenerateResponse> events;
  private final String requestId;

  GenerateStream(
      Supplier<Iterator<GenerateResponse>> start,
      RetryPolicy retry,
      Deadline deadline,
      String requestId) {
    this.requestId = requestId;
    this.events = new Events<>(start, retry, deadline);
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
    return events.hasNext();
  }

  @Override
  public GenerateResponse next() {
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
    events.cancel();
  }

  /** Cancels the call if it is still open. */
  @Override
  public void close() {
    cancel();
  }
}
