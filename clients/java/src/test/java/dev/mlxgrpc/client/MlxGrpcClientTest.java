package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.rpc.ErrorInfo;
import dev.mlxgrpc.v1.AdapterInfo;
import dev.mlxgrpc.v1.AdapterKind;
import dev.mlxgrpc.v1.DetokenizeRequest;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.ListAdaptersResponse;
import dev.mlxgrpc.v1.ListModelsRequest;
import dev.mlxgrpc.v1.LoadAdapterResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import dev.mlxgrpc.v1.TokenizeRequest;
import dev.mlxgrpc.v1.TokenizeResponse;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;

/** Runs against the live server at $MLXGRPC_ADDRESS; skipped when it is unset. */
@EnabledIfEnvironmentVariable(
    named = "MLXGRPC_ADDRESS",
    matches = ".+",
    disabledReason = "MLXGRPC_ADDRESS is not set: skipping live tests")
class MlxGrpcClientTest {
  private static MlxGrpcClient client;

  @BeforeAll
  static void connect() {
    String address = System.getenv("MLXGRPC_ADDRESS");
    client =
        MlxGrpcClient.builder(address)
            .bearerToken("test-token") // the server ignores it; checks the interceptor is harmless
            .defaultDeadline(Duration.ofSeconds(60))
            .build();
  }

  @AfterAll
  static void close() {
    if (client != null) {
      client.close();
    }
  }

  private static GenerateRequest greedy(String text, int maxTokens) {
    return GenerateRequest.newBuilder()
        .setText(text)
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(maxTokens))
        .build();
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

  private static double cosine(EmbedResponse a, EmbedResponse b) {
    return Example.cosine(a.getEmbeddingList(), b.getEmbeddingList());
  }

  @Test
  void greedyGenerateIsDeterministicAndWellFormed() {
    GenerateRequest request = greedy("Hello, my name is", 8);
    List<GenerateResponse> first = drain(request);
    List<GenerateResponse> second = drain(request);

    for (List<GenerateResponse> events : List.of(first, second)) {
      assertTrue(events.get(0).hasStarted(), "first event is started");
      assertTrue(events.get(0).getStarted().getPromptTokens() > 0, "prompt_tokens > 0");
      assertFalse(events.get(0).getStarted().getRequestId().isEmpty(), "server assigns an id");
      GenerateResponse last = events.get(events.size() - 1);
      assertTrue(last.hasFinished(), "last event is finished");
      assertEquals(FinishReason.FINISH_REASON_LENGTH, last.getFinished().getReason());
      assertEquals(8, last.getFinished().getUsage().getCompletionTokens());
      assertEquals(8, tokenIds(events).size(), "exactly max_tokens tokens");
      for (GenerateResponse middle : events.subList(1, events.size() - 1)) {
        assertTrue(middle.hasDelta(), "only deltas between started and finished");
      }
    }
    assertEquals(tokenIds(first), tokenIds(second), "greedy decoding is deterministic");
  }

  @Test
  void streamReportsServerAssignedRequestId() {
    try (GenerateStream stream = client.generate(greedy("abc", 2))) {
      assertEquals(null, stream.requestId());
      GenerateResponse started = stream.next();
      assertEquals(started.getStarted().getRequestId(), stream.requestId());
      stream.forEachRemaining(e -> { });
      assertFalse(stream.hasNext());
    }
  }

  @Test
  void tokenizeDetokenizeRoundTrips() {
    String text = "Hello world, this is a round trip.";
    TokenizeResponse tokens =
        client.stub().tokenize(TokenizeRequest.newBuilder().setText(text).build());
    assertTrue(tokens.getTokenIdsCount() > 0);
    assertEquals(tokens.getTokenIdsCount(), tokens.getTokensCount());
    String back =
        client
            .stub()
            .detokenize(
                DetokenizeRequest.newBuilder()
                    .addAllTokenIds(tokens.getTokenIdsList())
                    .setSkipSpecialTokens(true)
                    .build())
            .getText();
    assertEquals(text, back);
  }

  @Test
  void embedReturnsNormalizedVectorsWithMeaningfulSimilarity() {
    List<String> inputs =
        List.of(
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The stock market crashed today.");
    List<EmbedResponse> out = client.embed(EmbedRequest.newBuilder().addAllInputs(inputs).build());
    assertEquals(3, out.size(), "one response per input");
    for (int i = 0; i < out.size(); i++) {
      EmbedResponse r = out.get(i);
      assertEquals(i, r.getIndex(), "index set");
      assertEquals(384, r.getEmbeddingCount());
      assertTrue(r.getTokens() > 0);
      double norm = Math.sqrt(r.getEmbeddingList().stream().mapToDouble(f -> f * f).sum());
      assertEquals(1.0, norm, 1e-3, "L2-normalized");
    }
    double similar = cosine(out.get(0), out.get(1));
    double unrelated = cosine(out.get(0), out.get(2));
    assertTrue(similar > 0.7, "similar sentences: cosine " + similar);
    assertTrue(unrelated < 0.2, "unrelated sentences: cosine " + unrelated);
  }

  @Test
  void invalidTemperatureIsInvalidArgumentWithBadRequest() {
    GenerateRequest request =
        greedy("Hi", 4).toBuilder()
            .setSampling(SamplingParams.newBuilder().setTemperature(-1f))
            .build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> drain(request));
    ErrorDetails details = ErrorDetails.from(e);
    assertEquals(Status.Code.INVALID_ARGUMENT, details.code());
    assertTrue(
        details.violationFields().contains("sampling.temperature"),
        "violations: " + details.violationFields());
    ErrorInfo info = details.errorInfo().orElseThrow();
    assertEquals("mlxgrpc.v1", info.getDomain());
    assertFalse(info.getReason().isEmpty());
    assertEquals("sampling.temperature", info.getMetadataOrDefault("field", ""));
    assertTrue(details.retryInfo().isEmpty(), "no RetryInfo on a bad request");
  }

  @Test
  void unknownModelIsNotFound() {
    GenerateRequest request = greedy("Hi", 4).toBuilder().setModel("no-such-model").build();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> drain(request));
    assertEquals(Status.Code.NOT_FOUND, e.getStatus().getCode());
    StatusRuntimeException info =
        assertThrows(StatusRuntimeException.class, () -> client.modelInfo("no-such-model"));
    assertEquals(Status.Code.NOT_FOUND, ErrorDetails.from(info).code());
  }

  @Test
  void cancelRpcEndsStreamWithCancelledReason() {
    String id = "java-test-" + UUID.randomUUID();
    GenerateRequest request = greedy("Once upon a time", 2000).toBuilder().setRequestId(id).build();
    GenerationFinished finished = null;
    int deltas = 0;
    boolean cancelled = false;
    try (GenerateStream stream = client.generate(request)) {
      assertEquals(id, stream.requestId());
      for (GenerateResponse event : stream) {
        if (event.hasStarted()) {
          assertEquals(id, event.getStarted().getRequestId());
        }
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
    GenerateStream stream = client.generate(greedy("Once upon a time", 2000));
    StatusRuntimeException e =
        assertThrows(
            StatusRuntimeException.class,
            () -> {
              int deltas = 0;
              while (stream.hasNext()) {
                if (stream.next().hasDelta() && ++deltas == 2) {
                  stream.cancel();
                }
              }
            });
    assertEquals(Status.Code.CANCELLED, e.getStatus().getCode());
    stream.close();
    assertNotNull(stream.requestId(), "id known from the started event");
  }

  @Test
  void modelInfoDescribesTheFixture() {
    ModelInfo info = client.modelInfo("");
    assertEquals("llama", info.getName());
    assertEquals(ModelKind.MODEL_KIND_GENERATION, info.getKind());
    assertEquals(640, info.getVocabSize());
    assertEquals(4096, info.getContextLength());
    assertTrue(info.getCapabilities().getGeneration());
    assertTrue(info.getHasChatTemplate());

    ModelInfo embedder = client.modelInfo("all-minilm-l6-v2");
    assertEquals(384, embedder.getEmbeddingDimensions());
    assertTrue(embedder.getCapabilities().getEmbeddings());
  }

  @Test
  void listModelsListsBoth() {
    List<String> names =
        client.stub().listModels(ListModelsRequest.getDefaultInstance()).getModelsList().stream()
            .map(ModelInfo::getName)
            .collect(Collectors.toList());
    assertEquals("llama", names.get(0), "default generation model first");
    assertTrue(names.contains("all-minilm-l6-v2"), "models: " + names);
  }

  @Test
  void chatPromptUsesTemplate() {
    GenerateRequest chat =
        GenerateRequest.newBuilder()
            .setChat(
                dev.mlxgrpc.v1.ChatMessages.newBuilder()
                    .addMessages(
                        dev.mlxgrpc.v1.ChatMessage.newBuilder().setRole("user").setContent("Hi")))
            .setStopping(StoppingCriteria.newBuilder().setMaxTokens(3))
            .build();
    List<GenerateResponse> events = drain(chat);
    int chatPrompt = events.get(0).getStarted().getPromptTokens();
    int rawPrompt = drain(greedy("Hi", 3)).get(0).getStarted().getPromptTokens();
    assertTrue(chatPrompt > rawPrompt, "template adds tokens: " + chatPrompt + " vs " + rawPrompt);
    assertEquals(3, tokenIds(events).size());
  }

  // --- adapters: the server starts with adapter "tone" on "llama";
  // $MLXGRPC_ADAPTER_DIR is another adapter directory on the server.

  private static List<Integer> adapterTokens(String adapter, int maxTokens) {
    return tokenIds(drain(greedy("The quick brown fox", maxTokens).toBuilder().setAdapter(adapter).build()));
  }

  @Test
  void generateWithAnAdapterChangesTheOutput() {
    ListAdaptersResponse listed = client.listAdapters("");
    assertEquals("llama", listed.getModel());
    assertTrue(listed.getAdaptersList().stream().anyMatch(a -> a.getName().equals("tone")));
    List<Integer> tuned = adapterTokens("tone", 8);
    assertEquals(8, tuned.size());
    assertNotEquals(adapterTokens("", 8), tuned);
    StatusRuntimeException e =
        assertThrows(StatusRuntimeException.class, () -> adapterTokens("no-such-adapter", 2));
    ErrorDetails d = ErrorDetails.from(e);
    assertEquals(Status.Code.NOT_FOUND, d.code());
    assertEquals("ADAPTER_NOT_FOUND", d.errorInfo().orElseThrow().getReason());
  }

  @Test
  @EnabledIfEnvironmentVariable(named = "MLXGRPC_ADAPTER_DIR", matches = ".+")
  void loadUseAndUnloadAnAdapter() {
    LoadAdapterResponse loaded =
        client.loadAdapter("", "java-client", System.getenv("MLXGRPC_ADAPTER_DIR"));
    AdapterInfo info = loaded.getAdapter();
    assertEquals("java-client", info.getName());
    assertEquals(AdapterKind.ADAPTER_KIND_LORA, info.getKind());
    assertTrue(info.getBytes() > 0);
    assertEquals(4, adapterTokens("java-client", 4).size());
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
