package dev.mlxgrpc.client;

import static dev.mlxgrpc.client.LiveServer.exact;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.rpc.ErrorInfo;
import dev.mlxgrpc.v1.AdapterInfo;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.DetokenizeRequest;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.EmbeddingType;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ListAdaptersResponse;
import dev.mlxgrpc.v1.ListModelsRequest;
import dev.mlxgrpc.v1.LoadAdapterResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.ModelLoad;
import dev.mlxgrpc.v1.Prediction;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.SpeculationMode;
import dev.mlxgrpc.v1.StoppingCriteria;
import dev.mlxgrpc.v1.TokenLogprob;
import dev.mlxgrpc.v1.TokenizeRequest;
import dev.mlxgrpc.v1.TokenizeResponse;
import dev.mlxgrpc.v1.Truncation;
import dev.mlxgrpc.v1.Usage;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Runs against the live server at $MLXGRPC_ADDRESS (see {@link LiveServer}). */
class MlxGrpcClientTest {
  private static LiveServer server;
  private static MlxGrpcClient client;

  /** Per test, so that each one is reported as skipped without a server. */
  @BeforeEach
  void connect() {
    if (server == null) {
      server = LiveServer.connect();
      client = server.client;
    }
  }

  @AfterAll
  static void close() {
    if (server != null) {
      server.close();
    }
  }

  private static List<GenerateResponse> drain(GenerateRequest request) {
    List<GenerateResponse> events = new ArrayList<>();
    try (GenerateStream stream = client.generate(request)) {
      stream.forEachRemaining(events::add);
    }
    return events;
  }

  private static List<Integer> tokenIds(List<GenerateResponse> events) {
    return events.stream()
        .filter(GenerateResponse::hasDelta)
        .flatMap(e -> e.getDelta().getTokenIdsList().stream())
        .collect(Collectors.toList());
  }

  @Test
  void greedyGenerateIsDeterministicAndWellFormed() {
    GenerateRequest request = exact("Hello, my name is", 8);
    List<GenerateResponse> first = drain(request);
    List<GenerateResponse> second = drain(request);
    for (List<GenerateResponse> events : List.of(first, second)) {
      assertTrue(events.get(0).hasStarted(), "first event is started");
      assertTrue(events.get(0).getStarted().getPromptTokens() > 0, "prompt_tokens > 0");
      assertEquals(server.generator.getName(), events.get(0).getStarted().getModel());
      GenerateResponse last = events.get(events.size() - 1);
      assertEquals(FinishReason.FINISH_REASON_LENGTH, last.getFinished().getReason());
      assertEquals(8, last.getFinished().getUsage().getCompletionTokens());
      for (GenerateResponse middle : events.subList(1, events.size() - 1)) {
        assertTrue(middle.hasDelta(), "only deltas between started and finished");
      }
      List<Integer> ids = tokenIds(events);
      assertEquals(8, ids.size(), "exactly max_tokens tokens");
      assertTrue(ids.stream().allMatch(t -> t >= 0 && t < server.generator.getVocabSize()), "in vocab");
    }
    assertEquals(tokenIds(first), tokenIds(second), "greedy decoding is deterministic");
  }

  @Test
  void requestIdIsAssignedClientSideAtOnce() {
    try (GenerateStream stream = client.generate(exact("abc", 2))) {
      String id = stream.requestId();
      assertNotNull(id);
      assertEquals(id, stream.next().getStarted().getRequestId(), "the server uses the client's id");
    }
    GenerateRequest own = exact("abc", 2).toBuilder().setRequestId("java-own-id").build();
    assertEquals("java-own-id", client.generate(own).requestId());
  }

  @Test
  void generateTextIsTheUnaryForm() {
    GenerationResult r = client.generateText(exact("The quick brown fox", 6));
    assertEquals(6, r.tokenIds().size());
    assertEquals(r.requestId(), r.started().orElseThrow().getRequestId());
    assertEquals(FinishReason.FINISH_REASON_LENGTH, r.finished().orElseThrow().getReason());
    String detok = client.stub()
        .detokenize(DetokenizeRequest.newBuilder().addAllTokenIds(r.tokenIds()).build())
        .getText();
    assertEquals(detok, r.text());
  }

  private static GenerateRequest seeded(int maxTokens, long seed) {
    SamplingParams sampling = SamplingParams.newBuilder().setTemperature(1.0f).setSeed(seed).build();
    return exact("Once upon a time", maxTokens).toBuilder().setSampling(sampling).build();
  }

  @Test
  void nSeededChoicesEachEndWithTheirFinishedEvent() {
    GenerateRequest request = seeded(6, 7).toBuilder().setN(2).build();
    List<GenerateResponse> events = drain(request);
    assertTrue(events.get(0).hasStarted(), "first event is started");
    assertTrue(events.get(events.size() - 1).hasFinished(), "last event is a finished one");
    for (int index : List.of(0, 1)) {
      int i = index;
      List<GenerateResponse> mine =
          events.subList(1, events.size()).stream().filter(e -> e.getChoiceIndex() == i).toList();
      GenerateResponse last = mine.get(mine.size() - 1);
      assertTrue(mine.subList(0, mine.size() - 1).stream().allMatch(GenerateResponse::hasDelta), "deltas first");
      assertEquals(FinishReason.FINISH_REASON_LENGTH, last.getFinished().getReason(), "choice " + i + " ends finished");
      assertEquals(6, last.getFinished().getUsage().getCompletionTokens());
    }
    GenerationResult r = client.generateText(request);
    assertEquals(List.of(0, 1), r.choices().stream().map(GenerationResult.Choice::index).toList());
    assertEquals(r.tokenIds(), r.choices().get(0).tokenIds());
    // Choice i of a request seeded s is the request seeded s + i alone.
    for (GenerationResult.Choice c : r.choices()) {
      GenerationResult alone = client.generateText(seeded(6, 7 + c.index()));
      assertEquals(6, c.tokenIds().size());
      assertEquals(alone.tokenIds(), c.tokenIds());
      assertEquals(alone.text(), c.text());
    }
  }

  @Test
  void promptLogprobsComeBeforeTheFirstDelta() {
    String text = "The quick brown fox jumps over";
    GenerateRequest request = exact(text, 3).toBuilder().setPromptLogprobs(2).build();
    List<GenerateResponse> events = drain(request);
    int at = -1;
    int firstDelta = -1;
    for (int i = events.size() - 1; i >= 0; i--) {
      if (events.get(i).hasPromptLogprobs()) {
        at = i;
      }
      if (events.get(i).hasDelta()) {
        firstDelta = i;
      }
    }
    assertTrue(at > 0 && at < firstDelta, "prompt_logprobs at " + at + ", first delta at " + firstDelta);
    List<Integer> ids = client.stub()
        .tokenize(TokenizeRequest.newBuilder().setText(text).setAddSpecialTokens(true).build())
        .getTokenIdsList();
    assertEquals(ids.size(), events.get(0).getStarted().getPromptTokens());
    List<TokenLogprob> tokens = events.get(at).getPromptLogprobs().getTokensList();
    assertEquals(ids.subList(1, ids.size()), tokens.stream().map(TokenLogprob::getTokenId).toList(),
        "every prompt token but the first");
    for (TokenLogprob t : tokens) {
      assertTrue(t.getLogprob() <= 0 && t.getTopLogprobsCount() == 2, t.toString());
      assertTrue(t.getTopLogprobs(0).getLogprob() >= t.getTopLogprobs(1).getLogprob(), t.toString());
    }
    assertEquals(tokens, client.generateText(request).promptLogprobs());
  }

  /** Copy-heavy: the continuation repeats text the prompt holds, which prompt lookup drafts. */
  private static final String PASSAGE = "The lighthouse keeper climbed the narrow stairs every evening at dusk, "
      + "lit the great lamp, and wrote the names of the ships that passed in a worn leather book.";

  @Test
  void speculationNeverChangesTheOutputAndCountsDrafts() {
    GenerateRequest copy = exact("Repeat exactly: " + PASSAGE + "\n" + PASSAGE + "\n", 32); // greedy
    GenerationResult off = client.generateText(copy.toBuilder().setSpeculation(Speculation.off()).build());
    Usage offUsage = off.finished().orElseThrow().getUsage();
    assertEquals(32, off.tokenIds().size());
    assertEquals(0, offUsage.getDraftTokens());
    assertEquals(0, offUsage.getAcceptedDraftTokens());
    List<SpeculationMode> modes = server.generator.getCapabilities().getSpeculation().getModesList();
    Assumptions.assumeTrue(modes.contains(SpeculationMode.SPECULATION_MODE_NGRAM),
        server.generator.getName() + " does not speculate with NGRAM");
    GenerationResult ngram = client.generateText(copy.toBuilder().setSpeculation(Speculation.ngram(6)).build());
    assertEquals(off.tokenIds(), ngram.tokenIds());
    assertEquals(off.text(), ngram.text());
    Usage usage = ngram.finished().orElseThrow().getUsage();
    assertTrue(usage.getDraftTokens() >= usage.getAcceptedDraftTokens() && usage.getAcceptedDraftTokens() >= 0,
        usage.toString());
    assertEquals(32, usage.getCompletionTokens());
  }

  @Test
  void aPredictionNeverChangesTheOutputAndCountsItsTokens() {
    Assumptions.assumeTrue(server.generator.getCapabilities().getSpeculation().getExternalTokens(),
        server.generator.getName() + " does not verify predicted tokens");
    GenerateRequest copy = GenerateRequest.newBuilder() // greedy
        .setText("Repeat exactly: " + PASSAGE + "\n" + PASSAGE + "\n")
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(24))
        .build();
    GenerationResult plain = client.generateText(copy);
    assertFalse(plain.text().isEmpty(), "no output to predict");
    Usage plainUsage = plain.finished().orElseThrow().getUsage();
    assertEquals(0, plainUsage.getAcceptedPredictionTokens());
    assertEquals(0, plainUsage.getRejectedPredictionTokens());
    for (Prediction prediction : List.of(Predictions.text(plain.text()), Predictions.tokens(plain.tokenIds()))) {
      GenerationResult predicted = client.generateText(copy.toBuilder().setPrediction(prediction).build());
      assertEquals(plain.tokenIds(), predicted.tokenIds(), prediction.toString());
      assertEquals(plain.text(), predicted.text());
      Usage usage = predicted.finished().orElseThrow().getUsage();
      assertTrue(usage.getAcceptedPredictionTokens() > 0, usage.toString());
      assertTrue(usage.getAcceptedPredictionTokens() + usage.getRejectedPredictionTokens() <= usage.getDraftTokens(),
          usage.toString());
    }
  }

  @Test
  void aPredictionWithSpeculationOffIsInvalidArgument() {
    Assumptions.assumeTrue(server.generator.getCapabilities().getSpeculation().getExternalTokens(),
        server.generator.getName() + " does not verify predicted tokens");
    GenerateRequest request = exact("Repeat exactly: " + PASSAGE + "\n", 4).toBuilder()
        .setSpeculation(Speculation.off())
        .setPrediction(Predictions.text(PASSAGE))
        .build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> client.generateText(request));
    ErrorDetails details = ErrorDetails.from(e);
    assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
    assertEquals(List.of("prediction"), details.violationFields());
  }

  @Test
  void asyncGenerateMatchesTheBlockingOne() throws Exception {
    GenerationResult blocking = client.generateText(exact("The quick brown fox", 6));
    List<GenerateResponse> seen = new ArrayList<>();
    GenerateCall call = client.generateAsync(exact("The quick brown fox", 6), new Recorder(seen));
    GenerationResult async = call.result().get(120, TimeUnit.SECONDS);
    assertEquals(blocking.tokenIds(), async.tokenIds());
    assertEquals(call.requestId(), async.requestId());
    synchronized (seen) {
      assertTrue(seen.get(0).hasStarted() && seen.get(seen.size() - 1).hasFinished(), "observer saw every event");
    }
    assertEquals(blocking.tokenIds(), client.generateTextAsync(exact("The quick brown fox", 6)).get().tokenIds());
  }

  @Test
  void asyncCancelByIdAndClientSide() throws Exception {
    GenerateCall byId = client.generateAsync(exact("Once upon a time", 2000), null);
    boolean found = false;
    for (int i = 0; i < 200 && !found; i++) {
      found = client.cancel(byId.requestId());
      if (!found) {
        Thread.sleep(20);
      }
    }
    assertTrue(found, "Cancel found the request by its client-side id");
    GenerationFinished finished = byId.result().get(120, TimeUnit.SECONDS).finished().orElseThrow();
    assertEquals(FinishReason.FINISH_REASON_CANCELLED, finished.getReason());

    GenerateCall aborted = client.generateAsync(exact("Once upon a time", 2000), null);
    aborted.cancel();
    ExecutionException e = assertThrows(ExecutionException.class, () -> aborted.result().get(120, TimeUnit.SECONDS));
    assertEquals(Status.Code.CANCELLED, ErrorDetails.from(e.getCause()).code());
  }

  @Test
  void tokenizeDetokenizeRoundTrips() {
    String text = "Hello world, this is a round trip.";
    TokenizeResponse tokens = client.stub().tokenize(TokenizeRequest.newBuilder().setText(text).build());
    assertTrue(tokens.getTokenIdsCount() > 0);
    assertEquals(tokens.getTokenIdsCount(), tokens.getTokensCount());
    String back = client.stub()
        .detokenize(DetokenizeRequest.newBuilder().addAllTokenIds(tokens.getTokenIdsList())
            .setSkipSpecialTokens(true).build())
        .getText();
    assertEquals(text, back);
  }

  @Test
  void embedReturnsNormalizedVectorsWithMeaningfulSimilarity() {
    if (server.embedder.isEmpty()) {
      LiveServer.unavailable("the server serves no embedding model");
    }
    ModelInfo embedder = server.embedder.get();
    List<String> inputs = List.of(
        "A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today.");
    List<EmbedResponse> out = client.embed(
        EmbedRequest.newBuilder().setModel(embedder.getName()).addAllInputs(inputs).build());
    assertEquals(3, out.size(), "one response per input");
    for (int i = 0; i < out.size(); i++) {
      EmbedResponse r = out.get(i);
      assertEquals(i, r.getIndex(), "index set");
      assertEquals(embedder.getEmbeddingDimensions(), r.getEmbeddingCount());
      assertTrue(r.getTokens() > 0);
      double norm = Math.sqrt(r.getEmbeddingList().stream().mapToDouble(f -> f * f).sum());
      assertEquals(1.0, norm, 1e-3, "L2-normalized");
    }
    double similar = Example.cosine(out.get(0).getEmbeddingList(), out.get(1).getEmbeddingList());
    double unrelated = Example.cosine(out.get(0).getEmbeddingList(), out.get(2).getEmbeddingList());
    assertTrue(similar > unrelated + 0.2, "similar " + similar + ", unrelated " + unrelated);
  }

  /** Seventy short texts: a packed Embed of them is at most ceil(70 / 64) = 2 messages. */
  private static List<String> seventy() {
    String[] topics = {"rivers", "bread", "the stock market", "mountains", "music", "a cat", "rain", "trains",
        "chess", "the sea"};
    List<String> out = new ArrayList<>();
    for (int i = 0; i < 70; i++) {
      out.add("Note " + i + ": a short sentence about " + topics[i % topics.length] + ".");
    }
    return out;
  }

  private static double cosine(float[] a, List<Float> b) {
    double dot = 0;
    double na = 0;
    double nb = 0;
    for (int i = 0; i < a.length; i++) {
      dot += a[i] * b.get(i);
      na += a[i] * a[i];
      nb += b.get(i) * b.get(i);
    }
    return dot / Math.sqrt(na * nb);
  }

  private static float[] floats(List<Float> values) {
    float[] out = new float[values.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = values.get(i);
    }
    return out;
  }

  @Test
  void packedEmbeddingsMatchThePerInputOnes() {
    if (server.embedder.isEmpty()) {
      LiveServer.unavailable("the server serves no embedding model");
    }
    ModelInfo embedder = server.embedder.get();
    EmbedRequest request = EmbedRequest.newBuilder().setModel(embedder.getName()).addAllInputs(seventy()).build();
    List<EmbedResponse> plain = client.embed(request);

    Embeddings packed = client.embedPacked(request);
    assertEquals(EmbeddingType.EMBEDDING_TYPE_FLOAT32, packed.type());
    assertEquals(70, packed.size());
    assertTrue(packed.messages() >= 1 && packed.messages() <= 2, packed.messages() + " messages");
    assertEquals(embedder.getEmbeddingDimensions(), packed.dimensions());
    for (int i = 0; i < 70; i++) {
      assertArrayEquals(floats(plain.get(i).getEmbeddingList()), packed.float32()[i], "input " + i + ": the same float32 values");
      assertEquals(plain.get(i).getTokens(), packed.tokens()[i]);
    }

    Embeddings int8 = client.embedPacked(request.toBuilder().setEmbeddingType(EmbeddingType.EMBEDDING_TYPE_INT8).build());
    assertEquals(EmbeddingType.EMBEDDING_TYPE_INT8, int8.type());
    assertTrue(int8.messages() <= 2);
    assertEquals(70, int8.scales().length);
    float[][] dequantized = int8.floats();
    for (int i = 0; i < 70; i++) {
      double c = cosine(dequantized[i], plain.get(i).getEmbeddingList());
      assertTrue(c >= 0.999, "input " + i + ": int8 cosine " + c);
    }

    Embeddings half = client.embedPacked(request.toBuilder().setEmbeddingType(EmbeddingType.EMBEDDING_TYPE_FLOAT16).build());
    assertEquals(EmbeddingType.EMBEDDING_TYPE_FLOAT16, half.type());
    for (int i = 0; i < 70; i++) {
      assertArrayEquals(floats(plain.get(i).getEmbeddingList()), half.float32()[i], 1e-3f, "input " + i);
    }

    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> client.embed(EmbedRequest.newBuilder()
        .setModel(embedder.getName()).addInputs("a").addInputs("b").setEmbeddingType(EmbeddingType.EMBEDDING_TYPE_INT8).build()));
    ErrorDetails details = ErrorDetails.from(e);
    assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
    assertEquals(List.of("embedding_type"), details.violationFields());
  }

  @Test
  void packedUbinaryEmbeddingsAreTheSigns() {
    if (server.embedder.isEmpty()) {
      LiveServer.unavailable("the server serves no embedding model");
    }
    // 100 dimensions: 13 bytes a vector, the last one's four low bits unused
    EmbedRequest request = EmbedRequest.newBuilder().setModel(server.embedder.get().getName()).setDimensions(100)
        .addAllInputs(List.of("A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."))
        .build();
    List<EmbedResponse> plain = client.embed(request);
    Embeddings e = client.embedPacked(request.toBuilder().setEmbeddingType(EmbeddingType.EMBEDDING_TYPE_UBINARY).build());
    assertEquals(List.of(EmbeddingType.EMBEDDING_TYPE_UBINARY, 100, 1), List.of(e.type(), e.dimensions(), e.messages()));
    byte[][] bits = e.ubinary();
    for (int i = 0; i < bits.length; i++) {
      assertEquals(13, bits[i].length);
      assertEquals(0, bits[i][12] & 0x0f, "unused low bits zero");
      byte[] signs = new byte[100];
      for (int k = 0; k < 100; k++) {
        signs[k] = (byte) (plain.get(i).getEmbedding(k) > 0 ? 1 : 0);
      }
      assertArrayEquals(signs, Embeddings.unpackBits(bits[i], 100), "input " + i);
    }
    assertTrue(Embeddings.hamming(bits[0], bits[1]) < Embeddings.hamming(bits[0], bits[2]));
  }

  @Test
  void embedCutsALongInputByDefaultAndRefusesItWithTruncationNone() {
    if (server.embedder.isEmpty()) {
      LiveServer.unavailable("the server serves no embedding model");
    }
    int limit = server.embedder.get().getContextLength();
    // Two words a token at least: twice the model's input limit, within its byte limit.
    List<String> inputs = List.of("A short sentence.", "word ".repeat(2 * limit));
    EmbedRequest request = EmbedRequest.newBuilder().addAllInputs(inputs).build(); // the default embedding model
    List<EmbedResponse> cut = client.embed(request);
    assertEquals(List.of(0, 1), cut.stream().map(EmbedResponse::getIndex).collect(Collectors.toList()));
    assertEquals(limit, cut.get(1).getTokens(), "cut to the model's limit (TRUNCATION_END, the default)");
    List<EmbedResponse> end = client.embed(request.toBuilder().setTruncate(Truncation.TRUNCATION_END).build());
    assertEquals(limit, end.get(1).getTokens());
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
        () -> client.embed(request.toBuilder().setTruncate(Truncation.TRUNCATION_NONE).build()));
    ErrorDetails details = ErrorDetails.from(e);
    assertEquals(Status.Code.INVALID_ARGUMENT, details.code(), details.message());
    assertEquals(List.of("inputs[1]"), details.violationFields(), "names the long input");
    assertTrue(details.message().contains(String.valueOf(limit)), "says the limit: " + details.message());
    EmbedResponse fits = client.embed(EmbedRequest.newBuilder().addInputs(inputs.get(0))
        .setTruncate(Truncation.TRUNCATION_NONE).build()).get(0);
    assertTrue(fits.getTokens() > 0 && fits.getTokens() < limit, "tokens " + fits.getTokens());
  }

  @Test
  void invalidTemperatureIsInvalidArgumentWithBadRequest() {
    GenerateRequest request = exact("Hi", 4).toBuilder()
        .setSampling(SamplingParams.newBuilder().setTemperature(-1f)).build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> client.generateText(request));
    ErrorDetails details = ErrorDetails.from(e);
    assertEquals(Status.Code.INVALID_ARGUMENT, details.code());
    assertEquals(List.of("sampling.temperature"), details.violationFields());
    ErrorInfo info = details.errorInfo().orElseThrow();
    assertEquals("mlxgrpc.v1", info.getDomain());
    assertEquals("INVALID_FIELD", info.getReason());
    assertEquals("sampling.temperature", info.getMetadataOrDefault("field", ""));
    assertTrue(details.retryInfo().isEmpty(), "no RetryInfo on a bad request");
  }

  @Test
  void unknownModelIsNotFound() {
    GenerateRequest request = exact("Hi", 4).toBuilder().setModel("no-such-model").build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> drain(request));
    assertEquals(Status.Code.NOT_FOUND, e.getStatus().getCode());
    StatusRuntimeException info = assertThrows(StatusRuntimeException.class, () -> client.modelInfo("no-such-model"));
    assertEquals(Status.Code.NOT_FOUND, ErrorDetails.from(info).code());
  }

  @Test
  void cancelRpcEndsStreamWithCancelledReason() {
    GenerationFinished finished = null;
    int deltas = 0;
    boolean cancelled = false;
    String id;
    try (GenerateStream stream = client.generate(exact("Once upon a time", 2000))) {
      id = stream.requestId();
      for (GenerateResponse event : stream) {
        if (event.hasDelta() && ++deltas == 2) {
          cancelled = client.cancel(id);
        }
        if (event.hasFinished()) {
          finished = event.getFinished();
        }
      }
    }
    assertTrue(cancelled, "Cancel found the running request");
    assertNotNull(finished, "stream ends with a finished event");
    assertEquals(FinishReason.FINISH_REASON_CANCELLED, finished.getReason());
    assertTrue(finished.getUsage().getCompletionTokens() < 2000);
    assertFalse(client.cancel(id), "nothing left to cancel");
  }

  @Test
  void clientSideCancelGivesCancelled() {
    GenerateStream stream = client.generate(exact("Once upon a time", 2000));
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> {
      int deltas = 0;
      while (stream.hasNext()) {
        if (stream.next().hasDelta() && ++deltas == 2) {
          stream.cancel();
        }
      }
    });
    assertEquals(Status.Code.CANCELLED, e.getStatus().getCode());
    stream.close();
  }

  @Test
  void modelInfoListModelsAndPlan() {
    ModelInfo info = client.modelInfo("");
    assertEquals(server.models.get(0).getName(), info.getName(), "the default generation model first");
    assertEquals(ModelKind.MODEL_KIND_GENERATION, info.getKind());
    assertTrue(info.getVocabSize() > 0 && info.getContextLength() > 0);
    assertTrue(info.getCapabilities().getGeneration());
    for (ModelInfo m : server.models) {
      if (m.getKind() != ModelKind.MODEL_KIND_EMBEDDING) {
        continue;
      }
      if (m.getCapabilities().getRerank() || m.getCapabilities().getClassify()
          || m.getCapabilities().getSparseEmbeddings()) {
        assertFalse(m.getCapabilities().getEmbeddings(),
            m.getName() + ": a reranker, classifier or SPLADE model does not embed");
      } else {
        assertTrue(m.getEmbeddingDimensions() > 0 && m.getCapabilities().getEmbeddings(), m.getName());
      }
    }
    long maxSafe = client.planMemory(info.getName(), 1024).getMaxSafeContext();
    assertTrue(maxSafe > 0 && maxSafe <= info.getContextLength(), "max_safe_context " + maxSafe);
  }

  @Test
  void modelLoadsReportEveryGenerationModel() {
    List<ModelLoad> before = client.modelLoads("");
    List<String> generators = server.models.stream()
        .filter(m -> m.getKind() == ModelKind.MODEL_KIND_GENERATION).map(ModelInfo::getName)
        .collect(Collectors.toList());
    assertEquals(generators, before.stream().map(ModelLoad::getModel).collect(Collectors.toList()),
        "generation models only, the default first");
    assertTrue(before.get(0).getMaxRunningRequests() > 0);
    assertTrue(before.get(0).getMemoryBudgetBytes() > 0);
    client.generateText(exact("Counting for the load report", 5));
    ModelLoad after = client.modelLoads(server.generator.getName()).get(0);
    assertTrue(after.getGeneratedTokens() - before.get(0).getGeneratedTokens() >= 5);
    assertTrue(after.getGeneratedTokensPerSecond() > 0, "tokens/s right after a generation");
    StatusRuntimeException unknown =
        assertThrows(StatusRuntimeException.class, () -> client.modelLoads("no-such-model"));
    assertEquals(Status.Code.NOT_FOUND, unknown.getStatus().getCode());
    server.embedder.ifPresent(embedder -> {
      StatusRuntimeException e =
          assertThrows(StatusRuntimeException.class, () -> client.modelLoads(embedder.getName()));
      assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode());
    });
  }

  @Test
  void channelCarriesTheToken() {
    // A stub of your own on client.channel(); a server without tokens takes any, one with tokens
    // takes $MLXGRPC_TOKEN only.
    String token = LiveServer.token() != null ? LiveServer.token() : "test-token";
    try (MlxGrpcClient withToken = MlxGrpcClient.builder(server.address).bearerToken(token).build()) {
      List<ModelInfo> models = InferenceServiceGrpc.newBlockingStub(withToken.channel())
          .listModels(ListModelsRequest.getDefaultInstance()).getModelsList();
      assertEquals(server.models.size(), models.size());
    }
  }

  @Test
  void aServerWithTokensRefusesNoneOrAWrongOne() {
    String token = LiveServer.token();
    Assumptions.assumeTrue(token != null, "MLXGRPC_TOKEN is not set: the server may have no tokens");
    for (String other : new String[] {null, token + "-not"}) {
      try (MlxGrpcClient stranger = MlxGrpcClient.builder(server.address).bearerToken(other).maxAttempts(1).build()) {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> stranger.modelInfo(""));
        assertEquals(Status.Code.UNAUTHENTICATED, e.getStatus().getCode(), String.valueOf(other));
      }
    }
  }

  @Test
  void chatPromptUsesTemplate() {
    if (!server.generator.getHasChatTemplate()) {
      LiveServer.unavailable(server.generator.getName() + " has no chat template");
    }
    GenerateRequest chat = exact("", 3).toBuilder()
        .setChat(ChatMessages.newBuilder().addMessages(ChatMessage.newBuilder().setRole("user").setContent("Hi")))
        .build();
    GenerationResult templated = client.generateText(chat);
    GenerationResult raw = client.generateText(exact("Hi", 3));
    int chatPrompt = templated.started().orElseThrow().getPromptTokens();
    int rawPrompt = raw.started().orElseThrow().getPromptTokens();
    assertTrue(chatPrompt > rawPrompt, "template adds tokens: " + chatPrompt + " vs " + rawPrompt);
    assertEquals(3, templated.tokenIds().size());
  }

  // --- adapters: the default generation model's first loaded adapter (ListAdapters) is used,
  // and loaded again from its directory under another name.

  private static AdapterInfo loadedAdapter() {
    ListAdaptersResponse listed = client.listAdapters("");
    assertEquals(server.generator.getName(), listed.getModel());
    assertTrue(listed.getMaxAdapters() > 0);
    if (listed.getAdaptersCount() == 0) {
      LiveServer.unavailable(
          server.generator.getName() + " has no adapter loaded (serve it with --adapter NAME=DIR)");
    }
    return listed.getAdapters(0);
  }

  private static List<Integer> adapterTokens(String adapter, int maxTokens) {
    return tokenIds(drain(exact("The quick brown fox", maxTokens).toBuilder().setAdapter(adapter).build()));
  }

  @Test
  void generateWithAnAdapterChangesTheOutput() {
    AdapterInfo adapter = loadedAdapter();
    List<Integer> tuned = adapterTokens(adapter.getName(), 8);
    assertEquals(8, tuned.size());
    assertNotEquals(adapterTokens("", 8), tuned);
    StatusRuntimeException e =
        assertThrows(StatusRuntimeException.class, () -> adapterTokens("no-such-adapter", 2));
    ErrorDetails d = ErrorDetails.from(e);
    assertEquals(Status.Code.NOT_FOUND, d.code());
    assertEquals("ADAPTER_NOT_FOUND", d.errorInfo().orElseThrow().getReason());
  }

  @Test
  void loadUseAndUnloadAnAdapter() {
    AdapterInfo adapter = loadedAdapter();
    LoadAdapterResponse loaded = client.loadAdapter("", "java-client", adapter.getSource());
    AdapterInfo info = loaded.getAdapter();
    assertEquals("java-client", info.getName());
    assertEquals(adapter.getKind(), info.getKind());
    assertEquals(adapter.getBytes(), info.getBytes());
    assertEquals(
        adapterTokens(adapter.getName(), 8),
        adapterTokens("java-client", 8),
        "the same weights under another name");
    assertEquals("java-client", client.unloadAdapter("", "java-client").getName());
    assertTrue(
        client.listAdapters("").getAdaptersList().stream()
            .noneMatch(a -> a.getName().equals("java-client")));
    StatusRuntimeException e =
        assertThrows(
            StatusRuntimeException.class,
            () -> client.loadAdapter("", "nothing", "/nonexistent/adapter"));
    assertEquals(List.of("path"), ErrorDetails.from(e).violationFields());
  }
}
