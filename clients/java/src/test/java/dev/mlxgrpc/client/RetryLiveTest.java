package dev.mlxgrpc.client;

import static dev.mlxgrpc.client.LiveServer.exact;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;

/**
 * Fills the live server's admission queue, then checks that a Generate refused with
 * RESOURCE_EXHAUSTED waits the server's delay and succeeds once there is room.
 */
class RetryLiveTest {
  @Test
  void aFullQueueIsRetriedAfterTheServersDelay() throws Exception {
    try (LiveServer server = LiveServer.connect();
        MlxGrpcClient fillerClient = server.builder().maxAttempts(1).build()) {
      GenerateRequest filler = exact("Count:", 4000).toBuilder().setModel(server.generator.getName()).build();
      List<GenerateCall> running = new ArrayList<>();
      ErrorDetails refusal = null;
      while (refusal == null && running.size() < 256) {
        List<GenerateCall> batch = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
          batch.add(fillerClient.generateAsync(filler, null));
        }
        // A refusal comes back at once: stop waiting then, before fillers end and make room.
        for (int waited = 0; waited < 1000 && batch.stream().noneMatch(c -> c.result().isDone()); waited += 50) {
          Thread.sleep(50);
        }
        for (GenerateCall call : batch) {
          if (!call.result().isDone()) {
            running.add(call);
            continue;
          }
          try {
            call.result().get();
          } catch (ExecutionException e) {
            ErrorDetails d = ErrorDetails.from(e.getCause());
            refusal = d.code() == Status.Code.RESOURCE_EXHAUSTED ? d : refusal;
          }
        }
      }
      assertTrue(refusal != null, running.size() + " concurrent generations and no RESOURCE_EXHAUSTED");
      Duration delay = refusal.retryDelay().orElseThrow();
      assertEquals("QUEUE_FULL", refusal.errorInfo().orElseThrow().getReason());

      List<Duration> retries = new ArrayList<>();
      try (MlxGrpcClient retrying = server.builder()
          .defaultDeadline(Duration.ofSeconds(120))
          .onRetry((details, d) -> {
            retries.add(d);
            running.forEach(GenerateCall::cancel); // room for the next attempt
          })
          .build()) {
        long start = System.nanoTime();
        GenerationResult r = retrying.generateText(exact("Hello", 3));
        assertTrue(System.nanoTime() - start >= delay.toNanos(), "waited the server's delay");
        assertEquals(List.of(delay), retries);
        assertEquals(3, r.tokenIds().size());
        assertEquals(FinishReason.FINISH_REASON_LENGTH, r.finished().orElseThrow().getReason());
      } finally {
        running.forEach(GenerateCall::cancel);
        for (GenerateCall call : running) {
          try {
            call.result().get(30, TimeUnit.SECONDS);
          } catch (ExecutionException | TimeoutException e) {
            // cancelled, as intended
          }
        }
      }
    }
  }
}
