package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.TranscribeResponse;
import io.grpc.Deadline;
import java.util.Iterator;
import java.util.function.Supplier;

/**
 * The events of one Transcribe call ({@link MlxGrpcClient#transcribeStream}): {@code started} once
 * the audio is decoded and admitted, one {@code segment} per piece of the transcript in time order,
 * then {@code finished}; read in order with {@link #hasNext()}/{@link #next()} or a for-each loop
 * (once), or {@link #collect()} into a {@link Transcript}. A refusal with RetryInfo before the first
 * event is retried after the server's delay. {@link #cancel()} cancels the call client-side: the
 * server stops the transcription and the next {@code hasNext()} throws a {@link
 * io.grpc.StatusRuntimeException} with status {@code CANCELLED}. Closing a stream that has not
 * ended cancels it.
 */
public final class TranscribeStream
    implements Iterator<TranscribeResponse>, Iterable<TranscribeResponse>, AutoCloseable {
  private final Events<TranscribeResponse> events;
  private final String requestId;

  TranscribeStream(
      Supplier<Iterator<TranscribeResponse>> start, RetryPolicy retry, Deadline deadline, String requestId) {
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
  public TranscribeResponse next() {
    return events.next();
  }

  @Override
  public Iterator<TranscribeResponse> iterator() {
    return this;
  }

  /**
   * Reads the rest of the stream into the whole transcript ({@link Transcript#of}); a stream that
   * ends without its {@code started} or {@code finished} event is INTERNAL.
   */
  public Transcript collect() {
    return Transcript.of(this);
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
