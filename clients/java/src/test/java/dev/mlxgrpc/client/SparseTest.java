package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedSparseRequest;
import dev.mlxgrpc.v1.EmbedSparseResponse;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.SparseEmbedding;
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
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * EmbedSparse: the requests embedSparse sends and the vectors it returns, against a local server (no
 * mlx-grpc server needed), and the live server's "splade" model.
 */
class SparseTest {
  /**
   * Records the requests; gives each input its distinct characters, ascending, each weighing its
   * count (the topK heaviest), answering in reverse order.
   */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<EmbedSparseRequest> requests = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void embedSparse(EmbedSparseRequest request, StreamObserver<EmbedSparseResponse> out) {
      requests.add(request);
      List<SparseEmbedding> embeddings = new ArrayList<>();
      for (int i = 0; i < request.getInputsCount(); i++) {
        String text = request.getInputs(i);
        Map<Integer, Float> counts = new TreeMap<>();
        text.chars().forEach(c -> counts.merge(c, 1f, Float::sum));
        List<Integer> ids = counts.keySet().stream()
            .sorted(Comparator.comparing((Integer id) -> -counts.get(id)).thenComparing(id -> id))
            .limit(request.getTopK() > 0 ? request.getTopK() : Long.MAX_VALUE)
            .sorted()
            .collect(Collectors.toList());
        embeddings.add(0, SparseEmbedding.newBuilder().setIndex(i).setTokens(text.length() + 2).addAllTokenIds(ids)
            .addAllWeights(ids.stream().map(counts::get).collect(Collectors.toList())).build());
      }
      out.onNext(EmbedSparseResponse.newBuilder()
          .setModel(request.getModel().isEmpty() ? "splade" : request.getModel()).addAllEmbeddings(embeddings).build());
      out.onCompleted();
    }
  }

  @Test
  void embedSparseSendsTheInputsAndOptionsAndReturnsVectorsInInputOrder() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort()).priority(-20).build()) {
      List<String> inputs = List.of("abca", "b");
      SparseEmbeddings all = client.embedSparse(inputs);
      assertEquals("splade", all.model());
      SparseEmbeddings.Vector first = all.vectors().get(0);
      SparseEmbeddings.Vector second = all.vectors().get(1);
      assertEquals(List.of(0, 1), List.of(first.index(), second.index()));
      assertEquals(6, first.tokens());
      assertArrayEquals(new int[] {'a', 'b', 'c'}, first.tokenIds());
      assertArrayEquals(new float[] {2f, 1f, 1f}, first.weights());
      assertArrayEquals(new int[] {'b'}, second.tokenIds());
      assertEquals(2f, first.weight('a'));
      assertEquals(0f, first.weight('z'));
      assertEquals(Map.of((int) 'a', 2f, (int) 'b', 1f, (int) 'c', 1f), first.toMap());
      assertEquals(1.0, first.dot(second), 1e-9);
      SparseEmbeddings top = client.embedSparse(EmbedSparseRequest.newBuilder()
          .setModel("my-splade")
          .addInputs("abbcc")
          .setTopK(2)
          .setTruncate(Truncation.TRUNCATION_NONE)
          .setRequestId("s-1")
          .setPriority(30)
          .build());
      assertEquals("my-splade", top.model());
      assertArrayEquals(new int[] {'b', 'c'}, top.vectors().get(0).tokenIds());

      EmbedSparseRequest plain = service.requests.get(0);
      assertEquals(List.of("", inputs, 0, Truncation.TRUNCATION_UNSPECIFIED, "", -20),
          List.of(plain.getModel(), plain.getInputsList(), plain.getTopK(), plain.getTruncate(),
              plain.getRequestId(), plain.getPriority()),
          "unset: the server's defaults, the client's priority");
      EmbedSparseRequest full = service.requests.get(1);
      assertEquals(List.of("my-splade", List.of("abbcc"), 2, Truncation.TRUNCATION_NONE, "s-1", 30),
          List.of(full.getModel(), full.getInputsList(), full.getTopK(), full.getTruncate(),
              full.getRequestId(), full.getPriority()));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  // Live: a server whose ListModels has a model named "splade" with capabilities.sparse_embeddings
  // (the CI fixture server's SPLADE model, random weights: its weights mean nothing, their form does).

  static final List<String> TEXTS = List.of(
      "Where do rivers flow?", "Rivers flow into lakes and oceans.", "def add(a, b): return a + b");

  /** The live server's "splade" model, or the test skips (even under MLXGRPC_REQUIRE_LIVE=1). */
  static ModelInfo splade(LiveServer live) {
    Assumptions.assumeTrue(live.splade.isPresent(),
        "the server has no model named \"splade\" (the fixture server's; the default server never has one)");
    return live.splade.get();
  }

  /** One vector per input, in input order: ids ascending within the vocabulary, weights above 0. */
  static void check(SparseEmbeddings embedded, int inputs, int vocab) {
    assertEquals("splade", embedded.model());
    assertEquals(IntStream.range(0, inputs).boxed().collect(Collectors.toList()),
        embedded.vectors().stream().map(SparseEmbeddings.Vector::index).collect(Collectors.toList()), "in input order");
    for (SparseEmbeddings.Vector v : embedded.vectors()) {
      assertTrue(v.tokens() > 0 && v.tokenIds().length > 0 && v.tokenIds().length == v.weights().length);
      for (int i = 0; i < v.tokenIds().length; i++) {
        assertTrue(v.tokenIds()[i] < vocab && (i == 0 || v.tokenIds()[i - 1] < v.tokenIds()[i]), "ascending");
        assertTrue(v.weights()[i] > 0, "a weight above 0");
      }
    }
  }

  @Test
  void vectorsComeInInputOrderAndTopKKeepsTheHeaviest() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo splade = splade(live);
      assertFalse(splade.getCapabilities().getEmbeddings(), "a SPLADE model does not embed");
      assertEquals(0, splade.getEmbeddingDimensions());
      EmbedSparseRequest request = EmbedSparseRequest.newBuilder().setModel(splade.getName()).addAllInputs(TEXTS).build();
      SparseEmbeddings full = live.client.embedSparse(request);
      check(full, TEXTS.size(), splade.getVocabSize());
      SparseEmbeddings top = live.client.embedSparse(request.toBuilder().setTopK(3).setPriority(10)
          .setRequestId("java-sparse").build());
      check(top, TEXTS.size(), splade.getVocabSize());
      for (int i = 0; i < TEXTS.size(); i++) {
        SparseEmbeddings.Vector all = full.vectors().get(i);
        int[] heaviest = IntStream.of(all.tokenIds()).boxed()
            .sorted(Comparator.comparing((Integer id) -> -all.weight(id)).thenComparing(id -> id))
            .limit(3).mapToInt(Integer::intValue).sorted().toArray();
        assertArrayEquals(heaviest, top.vectors().get(i).tokenIds());
      }
      live.embedder.ifPresent(embedder -> {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
            () -> live.client.embedSparse(request.toBuilder().setModel(embedder.getName()).build()));
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
      });
    }
  }

  @Test
  void aLongInputIsCutByDefaultAndRefusedWithTruncationNoneAndBadFieldsAreNamed() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo splade = splade(live);
      int limit = splade.getContextLength();
      EmbedSparseRequest request = EmbedSparseRequest.newBuilder().setModel(splade.getName())
          .addInputs(TEXTS.get(0)).addInputs("word ".repeat(2 * limit)).build();
      SparseEmbeddings cut = live.client.embedSparse(request);
      assertEquals(limit, cut.vectors().get(1).tokens(), "cut to the model's limit (TRUNCATION_END, the default)");
      Map.of(request.toBuilder().setTruncate(Truncation.TRUNCATION_NONE).build(), "inputs[1]",
          request.toBuilder().setTopK(-1).build(), "top_k",
          request.toBuilder().clearInputs().build(), "inputs").forEach((refused, field) -> {
            StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> live.client.embedSparse(refused));
            ErrorDetails details = ErrorDetails.from(e);
            assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
            assertEquals(List.of(field), details.violationFields());
          });
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> live.client.embed(EmbedRequest.newBuilder().setModel(splade.getName()).addInputs("x").build()));
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode(), "a SPLADE model does not embed");
    }
  }
}
