package dev.mlxgrpc.client;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.mlxgrpc.v1.ChatCapabilities;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.StoppingCriteria;
import dev.mlxgrpc.v1.Tool;
import dev.mlxgrpc.v1.ToolCall;
import java.time.Duration;

/**
 * An agent loop against the server at $MLXGRPC_ADDRESS (default localhost:50051) and the model
 * $MLXGRPC_MODEL (default "tools"): one tool (get_weather), a first turn that must call it, the
 * tool run here, and a second turn that answers from its result. Exits with status 1 unless the
 * first turn ended with {@code FINISH_REASON_TOOL_CALLS} and a call. $MLXGRPC_TOKEN, when set, is
 * the bearer token of every call.
 */
public final class Agent {
  private static final Tool WEATHER = Tools.function("get_weather", "The current weather in a city.", """
      {"type": "object", "required": ["city"], "additionalProperties": false,
       "properties": {"city": {"type": "string", "maxLength": 16, "description": "The city's name."}}}""");

  private Agent() {}

  public static void main(String[] args) {
    String address = System.getenv().getOrDefault("MLXGRPC_ADDRESS", "localhost:50051");
    String model = System.getenv().getOrDefault("MLXGRPC_MODEL", "tools");
    int status;
    try (MlxGrpcClient client = MlxGrpcClient.builder(address)
        .bearerToken(Example.token())
        .defaultDeadline(Duration.ofSeconds(120))
        .build()) {
      status = run(client, model);
    }
    System.exit(status);
  }

  /** The tool itself, run locally: a fake weather report, as JSON. */
  static String getWeather(String city) {
    JsonObject report = new JsonObject();
    report.addProperty("city", city);
    report.addProperty("temperature_c", 21);
    report.addProperty("sky", "clear");
    return report.toString();
  }

  static String runTool(ToolCall call) {
    if (!call.getName().equals("get_weather")) {
      JsonObject error = new JsonObject();
      error.addProperty("error", "unknown tool " + call.getName());
      return error.toString();
    }
    JsonObject arguments = JsonParser.parseString(call.getArgumentsJson()).getAsJsonObject();
    return getWeather(arguments.get("city").getAsString());
  }

  private static GenerateRequest turn(String model, ChatMessages chat, int maxTokens) {
    return GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(chat)
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(maxTokens))
        .build();
  }

  static int run(MlxGrpcClient client, String model) {
    ChatCapabilities chat = client.modelInfo(model).getCapabilities().getChat();
    System.out.printf("model %s: tool calling %s, enforced tool choice %s, thinking %s%n", model,
        chat.getToolCalling() ? "yes (" + chat.getToolParser() + ")" : "no",
        chat.getToolChoiceEnforced() ? "yes" : "no", chat.getReasoningStart().isEmpty() ? "no" : "yes");

    // 1. The model must call a tool (the grammar enforces it), one call in this answer.
    ChatMessages.Builder conversation = ChatMessages.newBuilder()
        .addMessages(ChatMessage.newBuilder().setRole("user").setContent("What is the weather like in Paris?"))
        .addTools(WEATHER)
        .setToolChoice(ToolChoices.required())
        .setParallelToolCalls(false)
        .setEnableThinking(false);
    GenerationResult first = client.generateText(turn(model, conversation.build(), 96));
    FinishReason reason = first.finished().map(f -> f.getReason()).orElse(FinishReason.FINISH_REASON_UNSPECIFIED);
    System.out.printf("turn 1: %s, %d call(s)%n", reason, first.toolCalls().size());
    for (ToolCall call : first.toolCalls()) {
      System.out.printf("  call %s: %s(%s)%n", call.getId(), call.getName(), call.getArgumentsJson());
    }
    if (reason != FinishReason.FINISH_REASON_TOOL_CALLS || first.toolCalls().isEmpty()) {
      System.err.printf("expected FINISH_REASON_TOOL_CALLS and a call; got %s: %s%n", reason, first.text());
      return 1;
    }

    // 2. Run each call locally; send back the assistant's calls and one "tool" message per call.
    conversation.addMessages(Tools.assistant(first));
    for (ToolCall call : first.toolCalls()) {
      String result = runTool(call);
      System.out.printf("  result %s: %s%n", call.getId(), result);
      conversation.addMessages(Tools.result(call, result));
    }

    // 3. The answer, with no more calls.
    GenerationResult second = client.generateText(turn(model, conversation.setToolChoice(ToolChoices.none()).build(), 48));
    System.out.printf("turn 2: %s: %s%n", second.finished().orElseThrow().getReason(), second.text());
    return 0;
  }
}
