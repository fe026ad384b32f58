package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;

import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.GenerationStarted;
import dev.mlxgrpc.v1.GetModelInfoRequest;
import dev.mlxgrpc.v1.GetModelInfoResponse;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelInfo;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Retries against a local server that refuses Generate and GetModelInfo the way mlx-grpc does
 * when its admission queue is full. Needs no mlx-grpc server, so it always runs.
 */
class RetryTest {
  /** Refuses the next {@code refusals} calls with {@code code} (RetryInfo when delay > 0). */
  static final class Refusing extends InferenceServiceGrpc.InferenceServiceImplBase {
    volatile int refusals;
    volatile Code code = Code.RESOURCE_EXHAUSTED;
    volatile Duration delay = Duration.ofMillis(200);
    volatile boolean afterStarted;
    final List<String> ids = Collections.synchronizedList(new ArrayList<>());

    private StatusRuntimeException refusal(String id) {
      ids.add(id);
      if (refusals <= 0) {
        return null;
      }
      refusals--;
      com.google.rpc.Status.Builder status = com.google.rpc.Status.newBuilder()
          .setCode(code.getNumber()).setMessage("refused for now")
          .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("mlxgrpc.v1").setReason("QUEUE_FULL").build()));
      if (!delay.isZero()) {
        status.addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder().setNanos((int) delay.toNanos() % 1_000_000_000).setSeconds(delay.getSeconds())).build()));
      }
      return StatusProto.toStatusRuntimeException(status.build());
    }

    @Override
    public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
      if (afterStarted) {
        out.onNext(GenerateResponse.newBuilder()
            .setStarted(GenerationStarted.newBuilder().setRequestId(request.getRequestId())).build());
      }
      StatusRuntimeException refusal = refusal(request.getRequestId());
      if (refusal != null) {
        out.onError(refusal);
        return;
      }
      out.onNext(GenerateResponse.newBuilder()
          .setFinished(GenerationFinished.newBuilder().setReason(FinishReason.FINISH_REASON_LENGTH)).build());
      out.onCompleted();
    }

    @Override
    public void getModelInfo(GetModelInfoRequest request, StreamObserver<GetModelInfoResponse> out) {
      StatusRuntimeException refusal = refusal("info");
      if (refusal != null) {
        out.onError(refusal);
        return;
      }
      out.onNext(GetModelInfoResponse.newBuilder().setInfo(ModelInfo.newBuilder().setName(request.getModel())).build());
      out.onCompleted();
    }
  }

  private final Refusing service = new Refusing();
  private Server server;
  private String address;

  @BeforeEach
  void start() throws Exception {
    server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    address = "localhost:" + server.getPort();
  }

  @AfterEach
  void stop() throws Exception {
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  private MlxGrpcClient client(int attempts, Duration deadline, List<Duration> retries) {
    return MlxGrpcClient.builder(address).maxAttempts(attempts).defaultDeadline(deadline)
        .onRetry((details, delay) -> retries.add(delay)).build();
  }

  @Test
  void refusalsAreRetriedAfterTheServersDelayWithTheSameRequestId() throws Exception {
    List<Duration> retries = Collections.synchronizedList(new ArrayList<>());
    try (MlxGrpcClient client = client(3, Duration.ofSeconds(30), retries)) {
      GenerateRequest request = GenerateRequest.newBuilder().setRequestId("same-id").build();
      service.refusals = 2;
      long start = System.nanoTime();
      GenerationResult blocking = client.generateText(request);
      assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(400));
      assertEquals(FinishReason.FINISH_REASON_LENGTH, blocking.finished().orElseThrow().getReason());
      assertEquals(List.of("same-id", "same-id", "same-id"), service.ids);
      assertEquals(List.of(Duration.ofMillis(200), Duration.ofMillis(200)), retries);

      service.refusals = 2;
      service.ids.clear();
      GenerationResult async = client.generateTextAsync(request).get(30, TimeUnit.SECONDS);
      assertEquals(FinishReason.FINISH_REASON_LENGTH, async.finished().orElseThrow().getReason());
      assertEquals(3, service.ids.size(), "asynchronous calls retry too");

      service.refusals = 1;
      service.code = Code.UNAVAILABLE;
      assertEquals("m", client.modelInfo("m").getName(), "unary calls retry too");
    }
  }

  private void assertNotRetried(MlxGrpcClient client, int attempts) throws Exception {
    service.refusals = 5;
    service.ids.clear();
    long start = System.nanoTime();
    assertThrows(StatusRuntimeException.class, () -> client.generateText(GenerateRequest.getDefaultInstance()));
    assertEquals(attempts, service.ids.size());
    service.refusals = 5;
    service.ids.clear();
    ExecutionException e = assertThrows(ExecutionException.class,
        () -> client.generateTextAsync(GenerateRequest.getDefaultInstance()).get(30, TimeUnit.SECONDS));
    assertTrue(e.getCause() instanceof StatusRuntimeException, e.toString());
    assertEquals(attempts, service.ids.size());
    assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(3));
  }

  @Test
  void refusalsThatAreNotRetried() throws Exception {
    List<Duration> retries = new ArrayList<>();
    try (MlxGrpcClient client = client(3, Duration.ofSeconds(30), retries)) {
      service.delay = Duration.ZERO; // no RetryInfo: the server did not say when
      assertNotRetried(client, 1);
      service.delay = Duration.ofMillis(100); // the attempts run out
      assertNotRetried(client, 3);
      service.afterStarted = true; // the generation had begun: retrying would repeat it
      assertNotRetried(client, 1);
    }
    try (MlxGrpcClient client = client(3, Duration.ofSeconds(1), retries)) {
      service.afterStarted = false;
      service.delay = Duration.ofSeconds(5); // past the deadline
      assertNotRetried(client, 1);
    }
    try (MlxGrpcClient client = client(1, Duration.ofSeconds(30), retries)) {
      service.delay = Duration.ofMillis(100);
      assertNotRetried(client, 1);
    }
    assertThrows(IllegalArgumentException.class, () -> MlxGrpcClient.builder(address).maxAttempts(0).build());
  }
}
