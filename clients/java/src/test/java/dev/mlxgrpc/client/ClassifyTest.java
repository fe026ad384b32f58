package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.Classification;
import dev.mlxgrpc.v1.ClassifyRequest;
import dev.mlxgrpc.v1.ClassifyResponse;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.LabelScore;
import dev.mlxgrpc.v1.ModelInfo;
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
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Classify: the requests classify sends and the typed response, against a local server (no
 * mlx-grpc server needed), and the live server's "classifier", "classifier-multi" and "reranker"
 * models.
 */
class ClassifyTest {
  /** Records the requests; gives each input "long" (its length / 10, at most 1) and "short" (the rest of 1). */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<ClassifyRequest> requests = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void classify(ClassifyRequest request, StreamObserver<ClassifyResponse> out) {
      requests.add(request);
      ClassifyResponse.Builder response =
          ClassifyResponse.newBuilder().setModel(request.getModel().isEmpty() ? "classifier" : request.getModel());
      for (int i = 0; i < request.getInputsCount(); i++) {
        float lengthy = Math.min(request.getInputs(i).length() / 10f, 1f);
        List<LabelScore> labels = List.of(
                LabelScore.newBuilder().setLabel("long").setScore(lengthy).build(),
                LabelScore.newBuilder().setLabel("short").setScore(1 - lengthy).build())
            .stream()
            .sorted(Comparator.comparingDouble(LabelScore::getScore).reversed())
            .limit(request.getTopK() > 0 ? request.getTopK() : Long.MAX_VALUE)
            .collect(Collectors.toList());
        response.addResults(Classification.newBuilder().setIndex(i).setTokens(request.getInputs(i).length() + 2)
            .addAllLabels(labels));
      }
      out.onNext(response.build());
      out.onCompleted();
    }
  }

  static List<List<String>> labels(ClassifyResponse response) {
    return response.getResultsList().stream()
        .map(c -> c.getLabelsList().stream().map(LabelScore::getLabel).collect(Collectors.toList()))
        .collect(Collectors.toList());
  }

  @Test
  void classifySendsTheInputsAndOptionsAndReturnsTheTypedResults() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort()).priority(-20).build()) {
      List<String> inputs = List.of("0123456789ab", "ab");
      ClassifyResponse all = client.classify(inputs);
      assertEquals("classifier", all.getModel());
      assertEquals(List.of(List.of("long", "short"), List.of("short", "long")), labels(all));
      assertEquals(List.of(0, 1), all.getResultsList().stream().map(Classification::getIndex).collect(Collectors.toList()));
      assertEquals(List.of(14, 4), all.getResultsList().stream().map(Classification::getTokens).collect(Collectors.toList()));
      assertEquals(0.8f, all.getResults(1).getLabels(0).getScore(), 1e-6);
      ClassifyResponse top = client.classify(ClassifyRequest.newBuilder()
          .setModel("my-classifier")
          .addInputs("ab")
          .setTopK(1)
          .setTruncate(Truncation.TRUNCATION_NONE)
          .setRequestId("c-1")
          .setPriority(30)
          .build());
      assertEquals("my-classifier", top.getModel());
      assertEquals(List.of(List.of("short")), labels(top));

      ClassifyRequest plain = service.requests.get(0);
      assertEquals(List.of("", inputs, 0, Truncation.TRUNCATION_UNSPECIFIED, "", -20),
          List.of(plain.getModel(), plain.getInputsList(), plain.getTopK(), plain.getTruncate(),
              plain.getRequestId(), plain.getPriority()),
          "unset: the server's defaults, the client's priority");
      ClassifyRequest full = service.requests.get(1);
      assertEquals(List.of("my-classifier", List.of("ab"), 1, Truncation.TRUNCATION_NONE, "c-1", 30),
          List.of(full.getModel(), full.getInputsList(), full.getTopK(), full.getTruncate(),
              full.getRequestId(), full.getPriority()));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  // Live: a server whose ListModels has a model named "classifier" with capabilities.classify (the
  // CI fixture server's three-label classifier, random weights: its scores mean nothing, their sums
  // and order do).

  static final List<String> TEXTS = List.of(
      "I loved this film.", "The service was slow and the food cold.", "Rivers flow into lakes and oceans.");

  /** The live server's "classifier" model, or the test skips (even under MLXGRPC_REQUIRE_LIVE=1). */
  static ModelInfo classifier(LiveServer live) {
    Assumptions.assumeTrue(live.classifier.isPresent(),
        "the server has no model named \"classifier\" (the fixture server's; the default server never has one)");
    return live.classifier.get();
  }

  static boolean serves(LiveServer live, String name) {
    return live.models.stream().anyMatch(m -> m.getName().equals(name));
  }

  /** Each result's score sum, after checking the results' order and labels. */
  static List<Double> sums(ClassifyResponse response, String model, int inputs, int labels) {
    assertEquals(model, response.getModel());
    assertEquals(IntStream.range(0, inputs).boxed().collect(Collectors.toList()),
        response.getResultsList().stream().map(Classification::getIndex).collect(Collectors.toList()), "in input order");
    List<Double> sums = new ArrayList<>();
    for (Classification c : response.getResultsList()) {
      assertEquals(labels, c.getLabelsCount(), c.toString());
      assertTrue(c.getTokens() > 0, c.toString());
      double sum = 0;
      for (int i = 0; i < c.getLabelsCount(); i++) {
        float score = c.getLabels(i).getScore();
        assertTrue(score >= 0 && score <= 1, c.toString());
        assertTrue(i == 0 || c.getLabels(i - 1).getScore() >= score, "highest first: " + c);
        sum += score;
      }
      sums.add(sum);
    }
    return sums;
  }

  @Test
  void softmaxScoresSumToOneSigmoidsNeedNotAndTopKIsTheHead() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo classifier = classifier(live);
      assertFalse(classifier.getCapabilities().getEmbeddings(), "a classifier does not embed");
      ClassifyRequest request = ClassifyRequest.newBuilder().setModel(classifier.getName()).addAllInputs(TEXTS).build();
      ClassifyResponse full = live.client.classify(request);
      for (double sum : sums(full, classifier.getName(), TEXTS.size(), 3)) {
        assertEquals(1.0, sum, 1e-5);
      }
      ClassifyResponse top = live.client.classify(request.toBuilder().setTopK(1).setPriority(10)
          .setRequestId("java-classify").build());
      assertEquals(full.getResultsList().stream().map(c -> List.of(c.getLabels(0).getLabel())).collect(Collectors.toList()),
          labels(top));
      if (serves(live, "classifier-multi")) {
        ClassifyResponse multi = live.client.classify(request.toBuilder().setModel("classifier-multi").build());
        assertTrue(sums(multi, "classifier-multi", TEXTS.size(), 3).stream().anyMatch(s -> Math.abs(s - 1) > 1e-3),
            "independent sigmoids");
      }
      if (serves(live, "reranker")) {
        sums(live.client.classify(request.toBuilder().setModel("reranker").build()), "reranker", TEXTS.size(), 1);
      }
      live.embedder.ifPresent(embedder -> {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
            () -> live.client.classify(request.toBuilder().setModel(embedder.getName()).build()));
        assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
      });
    }
  }

  @Test
  void aLongInputIsCutByDefaultAndRefusedWithTruncationNoneAndBadFieldsAreNamed() {
    try (LiveServer live = LiveServer.connect()) {
      ModelInfo classifier = classifier(live);
      int limit = classifier.getContextLength();
      ClassifyRequest request = ClassifyRequest.newBuilder().setModel(classifier.getName())
          .addInputs(TEXTS.get(0)).addInputs("word ".repeat(2 * limit)).build();
      ClassifyResponse cut = live.client.classify(request);
      assertEquals(limit, cut.getResults(1).getTokens(), "cut to the model's limit (TRUNCATION_END, the default)");
      Map.of(request.toBuilder().setTruncate(Truncation.TRUNCATION_NONE).build(), "inputs[1]",
          request.toBuilder().setTopK(-1).build(), "top_k",
          request.toBuilder().clearInputs().build(), "inputs").forEach((refused, field) -> {
            StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> live.client.classify(refused));
            ErrorDetails details = ErrorDetails.from(e);
            assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
            assertEquals(List.of(field), details.violationFields());
          });
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> live.client.embed(EmbedRequest.newBuilder().setModel(classifier.getName()).addInputs("x").build()));
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode(), "a classifier does not embed");
    }
  }
}
