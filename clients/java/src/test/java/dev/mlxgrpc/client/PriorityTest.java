package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelLoad;
import dev.mlxgrpc.v1.TenantLoad;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Priority: the client's default and a request's own reach a local server (no mlx-grpc server
 * needed), and against the live server a priority never changes the output.
 */
class PriorityTest {
  /** Records the priority of every Generate and Embed. */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<Integer> seen = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
      seen.add(request.getPriority());
      out.onNext(GenerateResponse.newBuilder()
          .setFinished(GenerationFinished.newBuilder().setReason(FinishReason.FINISH_REASON_LENGTH)).build());
      out.onCompleted();
    }

    @Override
    public void embed(EmbedRequest request, StreamObserver<EmbedResponse> out) {
      seen.add(request.getPriority());
      out.onNext(EmbedResponse.newBuilder().setIndex(0).addEmbedding(1f).build());
      out.onCompleted();
    }
  }

  @Test
  void theDefaultFillsRequestsWithoutAPriorityAndARequestsOwnWins() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    String address = "localhost:" + server.getPort();
    try (MlxGrpcClient low = MlxGrpcClient.builder(address).priority(-20).build();
        MlxGrpcClient plain = MlxGrpcClient.connect(address)) {
      GenerateRequest request = GenerateRequest.newBuilder().setText("hi").build();
      low.generateText(request);
      low.generateText(request.toBuilder().setPriority(30).build());
      low.generateTextAsync(request).get(30, TimeUnit.SECONDS);
      low.embed("a");
      low.embed(EmbedRequest.newBuilder().addInputs("a").setPriority(5).build());
      plain.generateText(request);
      assertEquals(List.of(-20, 30, -20, -20, 5, 0), service.seen);
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    for (int bad : new int[] {Priority.MAX + 1, -Priority.MAX - 1}) {
      assertThrows(IllegalArgumentException.class, () -> MlxGrpcClient.builder(address).priority(bad).build());
    }
  }

  @Test
  void priorityNeverChangesTheOutputAndGetLoadReportsThisCallersTenant() {
    try (LiveServer live = LiveServer.connect()) {
      GenerateRequest request = LiveServer.exact("The quick brown fox", 8); // greedy
      GenerationResult plain = live.client.generateText(request);
      for (int priority : new int[] {10, -10}) {
        GenerationResult r = live.client.generateText(request.toBuilder().setPriority(priority).build());
        assertEquals(plain.tokenIds(), r.tokenIds(), "priority " + priority);
        assertEquals(plain.text(), r.text());
      }
      ModelLoad load = live.client.modelLoads(live.generator.getName()).get(0);
      // This caller counts under its token's tenant (without tokens: the empty name), and sees it.
      String tenant = LiveServer.tenant();
      List<TenantLoad> mine = load.getTenantsList().stream().filter(t -> t.getTenant().equals(tenant)).toList();
      assertEquals(1, mine.size(), load.getTenantsList().toString());
      assertTrue(mine.get(0).getGeneratedTokens() >= 24, mine.get(0).toString());
    }
  }
}
