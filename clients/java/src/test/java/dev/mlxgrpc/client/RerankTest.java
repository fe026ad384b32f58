package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.RerankRequest;
import dev.mlxgrpc.v1.RerankResponse;
import dev.mlxgrpc.v1.RerankResult;
import dev.mlxgrpc.v1.Truncation;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Rerank and truncation: the requests rerank and embed send and the typed response, against a
 * local server (no mlx-grpc server needed), and the live server's "reranker" model.
 */
class RerankTest {
  /** Records the requests; scores each document by its length. */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<RerankRequest> reranks = Collections.synchronizedList(new ArrayList<>());
    final List<EmbedRequest> embeds = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void rerank(RerankRequest request, StreamObserver<RerankResponse> out) {
      reranks.add(request);
      List<RerankResult> results = IntStream.range(0, request.getDocumentsCount())
          .mapToObj(i -> RerankResult.newBuilder().setIndex(i)
              .setScore(request.getDocuments(i).length() / 2f).setTokens(request.getDocuments(i).length() + 3).build())
          .sorted(Comparator.comparingDouble(RerankResult::getScore).reversed())
          .limit(request.getTopN() > 0 ? request.getTopN() : Long.MAX_VALUE)
          .collect(Collectors.toList());
      String model = request.getModel().isEmpty() ? "reranker" : request.getModel();
      out.onNext(RerankResponse.newBuilder().setModel(model).addAllResults(results).build());
      out.onCompleted();
    }

    @Override
    public void embed(EmbedRequest request, StreamObserver<EmbedResponse> out) {
      embeds.add(request);
      out.onNext(EmbedResponse.newBuilder().setIndex(0).addEmbedding(1f).setTokens(1).build());
      out.onCompleted();
    }
  }

  static List<Integer> indices(RerankResponse response) {
    return response.getResultsList().stream().map(RerankResult::getIndex).collect(Collectors.toList());
  }

  @Test
  void rerankSendsTheQueryDocumentsAndOptionsAndReturnsTheTypedResults() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort()).priority(-20).build()) {
      List<String> documents = List.of("a", "abcd", "ab");
      RerankResponse all = client.rerank("q", documents);
      assertEquals("reranker", all.getModel());
      assertEquals(List.of(1, 2, 0), indices(all), "most relevant first");
      assertEquals(List.of(2f, 1f, 0.5f),
          all.getResultsList().stream().map(RerankResult::getScore).collect(Collectors.toList()));
      assertEquals(List.of(7, 5, 4),
          all.getResultsList().stream().map(RerankResult::getTokens).collect(Collectors.toList()));
      RerankResponse top = client.rerank(RerankRequest.newBuilder()
          .setModel("my-reranker")
          .setQuery("q")
          .addAllDocuments(documents)
          .setTopN(2)
          .setTruncate(Truncation.TRUNCATION_NONE)
          .setRequestId("rr-1")
          .setPriority(30)
          .build());
      assertEquals("my-reranker", top.getModel());
      assertEquals(List.of(1, 2), indices(top));

      RerankRequest plain = service.reranks.get(0);
      assertEquals(List.of("", "q", documents, 0, Truncation.TRUNCATION_UNSPECIFIED, "", -20),
          List.of(plain.getModel(), plain.getQuery(), plain.getDocumentsList(), plain.getTopN(),
              plain.getTruncate(), plain.getRequestId(), plain.getPriority()),
          "unset: the server's defaults, the client's priority");
      RerankRequest full = service.reranks.get(1);
      assertEquals(List.of("my-reranker", "q", documents, 2, Truncation.TRUNCATION_NONE, "rr-1", 30),
          List.of(full.getModel(), full.getQuery(), full.getDocumentsList(), full.getTopN(),
              full.getTruncate(), full.getRequestId(), full.getPriority()));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void embedSendsTruncate() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.connect("localhost:" + server.getPort())) {
      client.embed("a");
      for (Truncation t : new Truncation[] {Truncation.TRUNCATION_END, Truncation.TRUNCATION_NONE}) {
        client.embed(EmbedRequest.newBuilder().addInputs("a").setTruncate(t).build());
      }
      assertEquals(
          List.of(Truncation.TRUNCATION_UNSPECIFIED, Truncation.TRUNCATION_END, Truncation.TRUNCATION_NONE),
          service.embeds.stream().map(EmbedRequest::getTruncate).collect(Collectors.toList()));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  // Live: a server whose ListModels has a model named "reranker" with capabilities.rerank (the CI
  // fixture server's cross-encoder, random weights: its scores mean nothing, their order does).

  static final String QUERY = "Where does the cat sleep?";
  static final List<String> DOCUMENTS = List.of(
      "The cat sleeps on the warm windowsill every afternoon.",
      "Stock markets fell sharply after the announcement.",
      "A recipe for bread needs flour, water, salt and yeast.",
      "Cats often sleep in boxes and baskets.",
      "The train to the airport leaves every ten minutes.");

  /** The live server's "reranker" model, or the test skips (even under MLXGRPC_REQUIRE_LIVE=1). */
  static ModelInfo reranker(LiveServer live) {
    Optional<ModelInfo> reranker = live.reranker;
    Assumptions.assumeTrue(reranker.isPresent(),
        "the server has no reranking model named \"reranker\" (the fixture server's cross-encoder; the default server never has one)");
    return reranker.get();
  }

  static RerankRequest.Builder request(ModelInfo model, List<String> documents) {
    return RerankRequest.newBuilder().setModel(model.getName()).setQuery(QUERY).addAllDocuments(documents);
  }

  @Test
  void rerankScoresEveryDocumentOnceByDescendingScoreAndTopNIsTheFirstOfTheFullRanking() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo reranker = reranker(live);
      assertFalse(reranker.getCapabilities().getEmbeddings(), "a reranker does not embed");
      RerankResponse full = live.client.rerank(request(reranker, DOCUMENTS).build());
      assertEquals(reranker.getName(), full.getModel());
      assertEquals(IntStream.range(0, DOCUMENTS.size()).boxed().collect(Collectors.toList()),
          indices(full).stream().sorted().collect(Collectors.toList()), "a permutation of the documents");
      List<RerankResult> results = full.getResultsList();
      for (int i = 1; i < results.size(); i++) {
        assertTrue(results.get(i - 1).getScore() >= results.get(i).getScore(), "sorted by score: " + results);
      }
      for (RerankResult r : results) {
        assertTrue(Float.isFinite(r.getScore()), r.toString());
        assertTrue(r.getTokens() > 0 && r.getTokens() <= reranker.getContextLength(), r.toString());
      }
      RerankResponse top = live.client.rerank(request(reranker, DOCUMENTS).setTopN(2).setPriority(10).build());
      assertEquals(indices(full).subList(0, 2), indices(top));
      for (int i = 0; i < 2; i++) {
        assertEquals(results.get(i).getScore(), top.getResults(i).getScore(), 1e-4);
      }
      // Rerank needs a reranker: an embedding model is refused.
      live.embedder.ifPresent(embedder -> {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
            () -> live.client.rerank(RerankRequest.newBuilder().setModel(embedder.getName())
                .setQuery(QUERY).addAllDocuments(DOCUMENTS).build()));
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
      });
    }
  }

  @Test
  void rerankCutsALongDocumentByDefaultAndRefusesItWithTruncationNone() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo reranker = reranker(live);
      int limit = reranker.getContextLength();
      // Two words a token at least: twice the model's input limit, within its byte limit.
      List<String> documents = List.of(DOCUMENTS.get(0), "word ".repeat(2 * limit));
      RerankResponse cut = live.client.rerank(request(reranker, documents).setRequestId("java-rerank-cut").build());
      RerankResult longOne = cut.getResultsList().stream().filter(r -> r.getIndex() == 1).findFirst().orElseThrow();
      assertEquals(limit, longOne.getTokens(), "cut to the model's limit (TRUNCATION_END, the default)");
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> live.client.rerank(request(reranker, documents).setTruncate(Truncation.TRUNCATION_NONE).build()));
      ErrorDetails details = ErrorDetails.from(e);
      assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
      assertEquals(List.of("documents[1]"), details.violationFields(), "names the long document");
      RerankResponse fits = live.client.rerank(
          request(reranker, documents.subList(0, 1)).setTruncate(Truncation.TRUNCATION_NONE).build());
      assertEquals(1, fits.getResultsCount());
    }
  }
}
