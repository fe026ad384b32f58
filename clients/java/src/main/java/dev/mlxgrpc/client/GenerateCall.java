package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import io.grpc.Deadline;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A Generate running asynchronously ({@link MlxGrpcClient#generateAsync}): events go to the
 * caller's observer as they arrive, on gRPC's threads, and {@link #result()} completes with
 * everything the generation produced. A refusal with RetryInfo before the first event is
 * retried after the server's delay (the observer sees only the attempt that succeeds).
 */
public final class GenerateCall {
  private final String requestId;
  private final StreamObserver<GenerateResponse> observer;
  private final Consumer<StreamObserver<GenerateResponse>> start;
  private final RetryPolicy retry;
  private final Deadline deadline;
  private final ScheduledExecutorService scheduler;
  private final GenerationResult collected;
  private final CompletableFuture<GenerationResult> result = new CompletableFuture<>();
  private volatile ClientCallStreamObserver<GenerateRequest> call;
  private volatile ScheduledFuture<?> pendingRetry;
  private volatile boolean cancelled;
  private volatile boolean received;
  private int attempt = 1; // touched only by the serialized callbacks of one call at a time

  GenerateCall(
      String requestId,
      StreamObserver<GenerateResponse> observer,
      Consumer<StreamObserver<GenerateResponse>> start,
      RetryPolicy retry,
      Deadline deadline,
      ScheduledExecutorService scheduler) {
    this.requestId = requestId;
    this.observer = observer;
    this.start = start;
    this.retry = retry;
    this.deadline = deadline;
    this.scheduler = scheduler;
    this.collected = new GenerationResult(requestId);
    open();
  }

  private void open() {
    start.accept(new Listener());
  }

  /** The request id (the request's own, or the one assigned client-side), known at once. */
  public String requestId() {
    return requestId;
  }

  /**
   * Completes with the whole generation when the stream ends, or exceptionally with the
   * call's {@link io.grpc.StatusRuntimeException}.
   */
  public CompletableFuture<GenerationResult> result() {
    return result;
  }

  /**
   * Cancels the call client-side: the server stops, and the observer and {@link #result()} get
   * a CANCELLED error. To end it with a {@code finished} event instead, use {@link
   * MlxGrpcClient#cancel(String)} with {@link #requestId()}.
   */
  public void cancel() {
    cancelled = true;
    ScheduledFuture<?> pending = pendingRetry;
    if (pending != null && pending.cancel(false)) {
      fail(Status.CANCELLED.withDescription("cancelled by the client").asRuntimeException());
    }
    ClientCallStreamObserver<GenerateRequest> current = call;
    if (current != null) {
      current.cancel("cancelled by the client", null);
    }
  }

  private void fail(Throwable t) {
    if (observer != null) {
      observer.onError(t);
    }
    result.completeExceptionally(t);
  }

  private final class Listener implements ClientResponseObserver<GenerateRequest, GenerateResponse> {
    @Override
    public void beforeStart(ClientCallStreamObserver<GenerateRequest> requestStream) {
      call = requestStream;
      if (cancelled) {
        requestStream.cancel("cancelled by the client", null);
      }
    }

    @Override
    public void onNext(GenerateResponse event) {
      received = true;
      collected.add(event);
      if (observer != null) {
        observer.onNext(event);
      }
    }

    @Override
    public void onError(Throwable t) {
      Optional<Duration> delay =
          received || cancelled ? Optional.empty() : retry.delayAfter(t, attempt++, deadline);
      if (delay.isPresent()) {
        pendingRetry = scheduler.schedule(GenerateCall.this::open, delay.get().toNanos(), TimeUnit.NANOSECONDS);
        return;
      }
      fail(t);
    }

    @Override
    public void onCompleted() {
      if (observer != null) {
        observer.onCompleted();
      }
      result.complete(collected);
    }
  }
}
