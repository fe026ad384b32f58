package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.GenerationStarted;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.PromptLogprobs;
import dev.mlxgrpc.v1.StoppingCriteria;
import dev.mlxgrpc.v1.TokenDelta;
import dev.mlxgrpc.v1.TokenLogprob;
import dev.mlxgrpc.v1.Tool;
import dev.mlxgrpc.v1.ToolCall;
import dev.mlxgrpc.v1.ToolCallDelta;
import dev.mlxgrpc.v1.ToolChoice;
import dev.mlxgrpc.v1.ToolChoiceMode;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Tools: the builders and the collected result against a local server (no mlx-grpc server
 * needed), and tool choice against a live server's "tools" model.
 */
class ToolsTest {
  static final String CITY = """
      {"type": "object", "required": ["city"], "additionalProperties": false,
       "properties": {"city": {"type": "string", "maxLength": 16}}}""";
  static final String ZONE = """
      {"type": "object", "required": ["zone"], "additionalProperties": false,
       "properties": {"zone": {"type": "string", "maxLength": 16}}}""";
  static final List<Tool> TOOLS = List.of(
      Tools.function("get_weather", "The current weather in a city.", CITY),
      Tools.function("get_time", "The time in a time zone.", ZONE));
  /** Each tool's required argument. */
  static final Map<String, String> REQUIRED = Map.of("get_weather", "city", "get_time", "zone");

  @Test
  void buildersFillTheGeneratedMessages() {
    Tool weather = TOOLS.get(0);
    assertEquals("get_weather", weather.getName());
    assertEquals("The current weather in a city.", weather.getDescription());
    assertEquals(CITY, weather.getParametersJsonSchema());
    assertEquals("", Tools.function("ping", "Pings.").getParametersJsonSchema());

    assertEquals(ToolChoiceMode.TOOL_CHOICE_MODE_AUTO, ToolChoices.auto().getMode());
    assertEquals(ToolChoiceMode.TOOL_CHOICE_MODE_NONE, ToolChoices.none().getMode());
    assertEquals(ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED, ToolChoices.required().getMode());
    assertEquals(ToolChoice.newBuilder().setMode(ToolChoiceMode.TOOL_CHOICE_MODE_FUNCTION).setFunctionName("get_time").build(),
        ToolChoices.function("get_time"));

    ToolCall call = ToolCall.newBuilder().setId("call_1").setName("get_weather").setArgumentsJson("{\"city\": \"Oslo\"}").build();
    ChatMessage result = Tools.result(call, "{\"sky\": \"clear\"}");
    assertEquals(ChatMessage.newBuilder().setRole("tool").setToolCallId("call_1").setContent("{\"sky\": \"clear\"}").build(), result);
    assertEquals(result, Tools.result("call_1", "{\"sky\": \"clear\"}"));
  }

  /** A delta event. */
  static GenerateResponse delta(TokenDelta.Builder delta) {
    return GenerateResponse.newBuilder().setDelta(delta).build();
  }

  static ToolCallDelta piece(int index, String id, String name, String arguments) {
    return ToolCallDelta.newBuilder().setIndex(index).setId(id).setName(name).setArgumentsJson(arguments).build();
  }

  /** Records each request and answers with thinking, text, streamed call pieces, the calls and TOOL_CALLS. */
  static final class Scripted extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<GenerateRequest> seen = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
      seen.add(request);
      out.onNext(GenerateResponse.newBuilder()
          .setStarted(GenerationStarted.newBuilder().setRequestId(request.getRequestId()).setPromptTokens(9)).build());
      out.onNext(delta(TokenDelta.newBuilder().addTokenIds(1).setReasoning("The user wants ")));
      out.onNext(delta(TokenDelta.newBuilder().addTokenIds(2).setReasoning("the weather.")));
      out.onNext(delta(TokenDelta.newBuilder().addTokenIds(3).setText("Let me check.")));
      out.onNext(delta(TokenDelta.newBuilder().addTokenIds(4)
          .addToolCallDeltas(piece(0, "call_a", "get_weather", "{\"city\": "))
          .addToolCallDeltas(piece(1, "call_b", "get_time", ""))));
      out.onNext(delta(TokenDelta.newBuilder().addTokenIds(5)
          .addToolCallDeltas(piece(0, "", "", "\"Oslo\"}"))
          .addToolCallDeltas(piece(1, "", "", "{\"zone\": \"CET\"}"))
          .addToolCalls(ToolCall.newBuilder().setId("call_a").setName("get_weather").setArgumentsJson("{\"city\": \"Oslo\"}"))
          .addToolCalls(ToolCall.newBuilder().setId("call_b").setName("get_time").setArgumentsJson("{\"zone\": \"CET\"}"))));
      out.onNext(GenerateResponse.newBuilder()
          .setFinished(GenerationFinished.newBuilder().setReason(FinishReason.FINISH_REASON_TOOL_CALLS)).build());
      out.onCompleted();
    }
  }

  static void checkCollected(GenerationResult r) {
    assertEquals("Let me check.", r.text());
    assertEquals("The user wants the weather.", r.reasoning());
    assertEquals(List.of(1, 2, 3, 4, 5), r.tokenIds());
    assertEquals(List.of("call_a get_weather {\"city\": \"Oslo\"}", "call_b get_time {\"zone\": \"CET\"}"),
        r.toolCalls().stream().map(c -> c.getId() + " " + c.getName() + " " + c.getArgumentsJson()).toList());
    assertEquals(r.toolCalls(), r.streamedToolCalls());
    assertEquals(FinishReason.FINISH_REASON_TOOL_CALLS, r.finished().orElseThrow().getReason());
  }

  @Test
  void collectGathersReasoningCallsAndPiecesAndTheRequestCarriesTheTools() throws Exception {
    Scripted service = new Scripted();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.connect("localhost:" + server.getPort())) {
      ChatMessages chat = ChatMessages.newBuilder()
          .addMessages(ChatMessage.newBuilder().setRole("user").setContent("Weather in Oslo?"))
          .addAllTools(TOOLS)
          .setToolChoice(ToolChoices.required())
          .setEnableThinking(false)
          .putTemplateKwargs("reasoning_effort", "\"low\"")
          .build();
      GenerateRequest request = GenerateRequest.newBuilder().setChat(chat).build();
      GenerationResult first = client.generateText(request);
      checkCollected(first);
      checkCollected(client.generateTextAsync(request).get(30, TimeUnit.SECONDS));
      try (GenerateStream stream = client.generate(request)) {
        checkCollected(stream.collect());
      }
      ChatMessages sent = service.seen.get(0).getChat();
      assertEquals(List.of("get_weather", "get_time"), sent.getToolsList().stream().map(Tool::getName).toList());
      assertEquals(CITY, sent.getTools(0).getParametersJsonSchema());
      assertEquals(ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED, sent.getToolChoice().getMode());
      assertTrue(sent.hasEnableThinking());
      assertFalse(sent.getEnableThinking());
      assertFalse(sent.hasParallelToolCalls(), "unset: the server's default");
      assertEquals(Map.of("reasoning_effort", "\"low\""), sent.getTemplateKwargsMap());

      // The next turn: the assistant's calls and a "tool" message per call.
      ChatMessages.Builder next = chat.toBuilder().addMessages(Tools.assistant(first)).setToolChoice(ToolChoices.none());
      for (ToolCall call : first.toolCalls()) {
        next.addMessages(Tools.result(call, "{\"ok\": true}"));
      }
      client.generateText(GenerateRequest.newBuilder().setChat(next).build());
      List<ChatMessage> messages = service.seen.get(3).getChat().getMessagesList();
      assertEquals(List.of("user", "assistant", "tool", "tool"), messages.stream().map(ChatMessage::getRole).toList());
      ChatMessage assistant = messages.get(1);
      assertEquals("Let me check.", assistant.getContent());
      assertEquals("The user wants the weather.", assistant.getReasoning());
      assertEquals(first.toolCalls(), assistant.getToolCallsList());
      assertEquals(List.of("call_a", "call_b"), messages.subList(2, 4).stream().map(ChatMessage::getToolCallId).toList());
      assertEquals(ToolChoiceMode.TOOL_CHOICE_MODE_NONE, service.seen.get(3).getChat().getToolChoice().getMode());
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void streamedPiecesWithoutACompleteCallStayApart() {
    GenerationResult r = new GenerationResult("r")
        .add(delta(TokenDelta.newBuilder().addToolCallDeltas(piece(0, "call_x", "get_weather", "{\"ci"))))
        .add(delta(TokenDelta.newBuilder().addToolCallDeltas(piece(0, "", "", "ty\":"))));
    assertEquals(List.of(), r.toolCalls());
    assertEquals(List.of(ToolCall.newBuilder().setId("call_x").setName("get_weather").setArgumentsJson("{\"city\":").build()),
        r.streamedToolCalls());
    assertEquals("", r.reasoning());
  }

  @Test
  void resultsKeepEachChoiceAndThePromptLogprobs() {
    TokenLogprob prompt = TokenLogprob.newBuilder().setTokenId(5).setLogprob(-1.5f).build();
    GenerationResult r = new GenerationResult("r")
        .add(GenerateResponse.newBuilder().setPromptLogprobs(PromptLogprobs.newBuilder().addTokens(prompt)).build())
        .add(delta(TokenDelta.newBuilder().addTokenIds(1).setText("a")).toBuilder().setChoiceIndex(1).build())
        .add(delta(TokenDelta.newBuilder().addTokenIds(2).setText("b")))
        .add(delta(TokenDelta.newBuilder().addTokenIds(3).setText("c")).toBuilder().setChoiceIndex(1).build())
        .add(GenerateResponse.newBuilder()
            .setFinished(GenerationFinished.newBuilder().setReason(FinishReason.FINISH_REASON_EOS)).build())
        .add(GenerateResponse.newBuilder().setChoiceIndex(1)
            .setFinished(GenerationFinished.newBuilder().setReason(FinishReason.FINISH_REASON_LENGTH)).build());
    assertEquals(List.of(prompt), r.promptLogprobs());
    assertEquals(List.of(0, 1), r.choices().stream().map(GenerationResult.Choice::index).toList());
    GenerationResult.Choice second = r.choices().get(1);
    assertEquals(List.of(1, 3), second.tokenIds());
    assertEquals("ac", second.text());
    assertEquals(FinishReason.FINISH_REASON_LENGTH, second.finished().orElseThrow().getReason());
    assertEquals(List.of(2), r.tokenIds(), "its own accessors are the first choice's");
    assertEquals("b", r.text());
    assertEquals(FinishReason.FINISH_REASON_EOS, r.finished().orElseThrow().getReason());
  }

  // Live: a server whose ListModels has a model named "tools" (the CI fixture server's
  // tool-capable model, random weights: it calls tools only when the tool choice makes it).

  /** The live server's "tools" model, or the test skips (even under MLXGRPC_REQUIRE_LIVE=1). */
  static String toolsModel(LiveServer live) {
    Optional<ModelInfo> tools = live.models.stream().filter(m -> m.getName().equals("tools")).findFirst();
    Assumptions.assumeTrue(tools.isPresent(),
        "the server has no model named \"tools\" (the fixture server's tool-capable model; the default server never has one)");
    return tools.get().getName();
  }

  /** One call per answer: with random weights, parallel calls go on until max_tokens cuts one short. */
  static GenerateRequest turn(String model, ToolChoice choice, int maxTokens) {
    ChatMessages chat = ChatMessages.newBuilder()
        .addMessages(ChatMessage.newBuilder().setRole("user").setContent("What is the weather in Paris?"))
        .addAllTools(TOOLS)
        .setToolChoice(choice)
        .setParallelToolCalls(false)
        .setEnableThinking(false)
        .build();
    return GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(chat)
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(maxTokens))
        .build();
  }

  static void checkCalls(List<ToolCall> calls, List<String> names) {
    assertFalse(calls.isEmpty(), "at least one call");
    for (ToolCall call : calls) {
      assertTrue(names.contains(call.getName()), call.getName() + " is one of " + names);
      assertFalse(call.getId().isEmpty(), "the call has an id");
      JsonElement arguments = JsonParser.parseString(call.getArgumentsJson());
      assertTrue(arguments.isJsonObject(), call.getArgumentsJson());
      JsonObject object = arguments.getAsJsonObject();
      String key = REQUIRED.get(call.getName());
      assertTrue(object.has(key) && object.get(key).isJsonPrimitive() && object.get(key).getAsJsonPrimitive().isString(),
          call.getArgumentsJson());
    }
  }

  @Test
  void toolChoiceRequiredEndsWithCallsOfTheGivenTools() {
    try (LiveServer live = LiveServer.connect()) {
      String model = toolsModel(live);
      assertTrue(live.client.modelInfo(model).getCapabilities().getChat().getToolCalling());
      GenerateRequest request = turn(model, ToolChoices.required(), 96);
      GenerationResult r = live.client.generateText(request);
      assertEquals(FinishReason.FINISH_REASON_TOOL_CALLS, r.finished().orElseThrow().getReason(), r.text());
      checkCalls(r.toolCalls(), List.copyOf(REQUIRED.keySet()));
      // Greedy: a streamed run makes the same calls, and its pieces name them.
      List<ToolCall> streamed = new ArrayList<>();
      try (GenerateStream stream = live.client.generate(request)) {
        for (GenerateResponse event : stream) {
          streamed.addAll(event.getDelta().getToolCallsList());
        }
      }
      assertEquals(r.toolCalls().stream().map(c -> c.getName() + c.getArgumentsJson()).toList(),
          streamed.stream().map(c -> c.getName() + c.getArgumentsJson()).toList());
      assertEquals(r.toolCalls().stream().map(ToolCall::getName).toList(),
          r.streamedToolCalls().stream().map(ToolCall::getName).toList());
    }
  }

  @Test
  void toolChoiceFunctionCallsThatFunction() {
    try (LiveServer live = LiveServer.connect()) {
      String model = toolsModel(live);
      GenerationResult r = live.client.generateText(turn(model, ToolChoices.function("get_time"), 96));
      assertEquals(FinishReason.FINISH_REASON_TOOL_CALLS, r.finished().orElseThrow().getReason(), r.text());
      checkCalls(r.toolCalls(), List.of("get_time"));
      assertEquals(1, r.toolCalls().size(), "parallel_tool_calls false: one call");
    }
  }

  @Test
  void toolChoiceNoneMakesNoCalls() {
    try (LiveServer live = LiveServer.connect()) {
      String model = toolsModel(live);
      GenerationResult r = live.client.generateText(turn(model, ToolChoices.none(), 24));
      assertEquals(List.of(), r.toolCalls());
      assertNotEquals(FinishReason.FINISH_REASON_TOOL_CALLS, r.finished().orElseThrow().getReason());
    }
  }

  @Test
  void toolsForAModelWithoutToolCallingAreAFailedPrecondition() {
    try (LiveServer live = LiveServer.connect()) {
      Optional<ModelInfo> plain = live.models.stream()
          .filter(m -> m.getKind() == ModelKind.MODEL_KIND_GENERATION && m.getHasChatTemplate()
              && !m.getCapabilities().getChat().getToolCalling())
          .findFirst();
      Assumptions.assumeTrue(plain.isPresent(), "every chat model of the server has tool calling");
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class,
          () -> live.client.generateText(turn(plain.get().getName(), ToolChoices.auto(), 4)));
      assertEquals(Status.Code.FAILED_PRECONDITION, ErrorDetails.from(error).code());
    }
  }
}
