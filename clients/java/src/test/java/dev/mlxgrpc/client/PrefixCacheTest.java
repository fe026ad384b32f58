package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.RetryInfo;
import dev.mlxgrpc.v1.CacheTier;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.CloseSessionRequest;
import dev.mlxgrpc.v1.CloseSessionResponse;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.PrefetchRequest;
import dev.mlxgrpc.v1.PrefetchResponse;
import dev.mlxgrpc.v1.TokenIds;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Prefetch and CloseSession: the requests prefetch and closeSession send, retried like the other
 * unary calls, against a local server (no mlx-grpc server needed); against the live server, a
 * session's Generate leaves a prefix that Prefetch finds in memory, and closing the session
 * releases its entries once.
 */
class PrefixCacheTest {
  /** Records the requests; refuses the first Prefetch with RetryInfo. */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<PrefetchRequest> prefetches = Collections.synchronizedList(new ArrayList<>());
    final List<CloseSessionRequest> closes = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void prefetch(PrefetchRequest request, StreamObserver<PrefetchResponse> out) {
      prefetches.add(request);
      if (prefetches.size() == 1) {
        com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
            .setCode(Code.RESOURCE_EXHAUSTED.getNumber()).setMessage("refused for now")
            .addDetails(Any.pack(RetryInfo.newBuilder()
                .setRetryDelay(com.google.protobuf.Duration.newBuilder().setNanos(50_000_000)).build()))
            .build();
        out.onError(StatusProto.toStatusRuntimeException(status));
        return;
      }
      out.onNext(PrefetchResponse.newBuilder()
          .setPromptTokens(10).setCachedTokens(8).setTier(CacheTier.CACHE_TIER_DISK).build());
      out.onCompleted();
    }

    @Override
    public void closeSession(CloseSessionRequest request, StreamObserver<CloseSessionResponse> out) {
      closes.add(request);
      out.onNext(CloseSessionResponse.newBuilder().setEntries(request.getSessionId().equals("open") ? 2 : 0).build());
      out.onCompleted();
    }
  }

  @Test
  void prefetchAndCloseSessionSendTheirRequestsAndAreRetried() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    List<Duration> retries = Collections.synchronizedList(new ArrayList<>());
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort())
        .onRetry((details, delay) -> retries.add(delay)).build()) {
      ChatMessages chat = ChatMessages.newBuilder()
          .addMessages(ChatMessage.newBuilder().setRole("user").setContent("hi")).build();
      PrefetchRequest sent = PrefetchRequest.newBuilder()
          .setModel("m").setSessionId("open").setAdapter("tone").setChat(chat).build();
      PrefetchResponse reply = client.prefetch(sent);
      assertEquals(List.of(10, 8, CacheTier.CACHE_TIER_DISK),
          List.of(reply.getPromptTokens(), reply.getCachedTokens(), reply.getTier()));
      assertEquals(List.of(Duration.ofMillis(50)), retries, "refused once with RetryInfo: retried");
      assertEquals(List.of(sent, sent), service.prefetches, "the same request for every attempt");

      GenerateRequest generate = LiveServer.exact("some text", 4).toBuilder()
          .setModel("m").setSessionId("s-1").setAdapter("tone").setRequestId("r-1").build();
      client.prefetch(generate);
      assertEquals(PrefetchRequest.newBuilder().setModel("m").setSessionId("s-1").setAdapter("tone")
          .setText("some text").build(), service.prefetches.get(2), "the Generate's prompt, model, session and adapter");
      GenerateRequest tokens = GenerateRequest.newBuilder().setTokens(TokenIds.newBuilder().addIds(1).addIds(2)).build();
      assertEquals(PrefetchRequest.newBuilder().setTokens(tokens.getTokens()).build(),
          MlxGrpcClient.prefetchRequest(tokens));
      assertEquals(PrefetchRequest.PromptCase.PROMPT_NOT_SET,
          MlxGrpcClient.prefetchRequest(GenerateRequest.getDefaultInstance()).getPromptCase());

      assertEquals(2, client.closeSession("open"));
      assertEquals(0, client.closeSession("m", "other"));
      assertEquals(List.of(
              CloseSessionRequest.newBuilder().setSessionId("open").build(),
              CloseSessionRequest.newBuilder().setModel("m").setSessionId("other").build()),
          service.closes);
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** About forty words: a prompt whose prefix the prefix cache keeps after a Generate. */
  static final String SESSION_PROMPT = "The old lighthouse keeper climbed the winding stairs every evening at dusk, "
      + "trimmed the wick, polished the great lens and watched the fishing boats return along the rocky "
      + "coast, writing each name in a worn leather logbook that his grandfather had started long ago.";

  @Test
  void prefetchFindsASessionsPrefixInMemoryAndCloseSessionReleasesItOnce() {
    try (LiveServer live = LiveServer.connect()) {
      String session = "java-" + UUID.randomUUID();
      GenerateRequest generate = LiveServer.exact(SESSION_PROMPT, 4).toBuilder().setSessionId(session).build();
      GenerationResult generated = live.client.generateText(generate);
      assertEquals(4, generated.tokenIds().size());
      PrefetchResponse prefetched = live.client.prefetch(
          PrefetchRequest.newBuilder().setText(SESSION_PROMPT).setSessionId(session).build());
      assertEquals(generated.started().orElseThrow().getPromptTokens(), prefetched.getPromptTokens(),
          "the prompt read as Generate reads it");
      assertEquals(CacheTier.CACHE_TIER_MEMORY, prefetched.getTier(), prefetched.toString());
      assertTrue(prefetched.getCachedTokens() > 0
          && prefetched.getCachedTokens() <= prefetched.getPromptTokens() - 1, prefetched.toString());
      assertEquals(prefetched, live.client.prefetch(generate), "the Generate request's own prompt");
      int entries = live.client.closeSession(session);
      assertTrue(entries >= 1, "closed " + entries + " entries");
      assertEquals(0, live.client.closeSession(session), "no longer open");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> live.client.prefetch(PrefetchRequest.newBuilder().setSessionId(session).build()));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode(), e.getMessage());
    }
  }
}
