package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.Tool;
import dev.mlxgrpc.v1.ToolCall;

/**
 * Tools: the functions a chat prompt offers ({@code ChatMessages.tools}) and the messages of an
 * agent loop, the assistant's calls and each tool's result. The other chat options are the
 * generated builder's: {@code setToolChoice} ({@link ToolChoices}), {@code setParallelToolCalls},
 * {@code setEnableThinking} and {@code putTemplateKwargs} (each value JSON text). An answer that
 * called tools ends with {@code FINISH_REASON_TOOL_CALLS} and {@link GenerationResult#toolCalls()}.
 *
 * <pre>{@code
 * Tool weather = Tools.function("get_weather", "The current weather in a city.", """
 *     {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}""");
 * ChatMessages chat = ChatMessages.newBuilder()
 *     .addMessages(ChatMessage.newBuilder().setRole("user").setContent("Weather in Paris?"))
 *     .addTools(weather)
 *     .setToolChoice(ToolChoices.required())
 *     .setEnableThinking(false)
 *     .build();
 * GenerationResult first = client.generateText(GenerateRequest.newBuilder().setChat(chat).build());
 * ChatMessages.Builder next = chat.toBuilder().addMessages(Tools.assistant(first));
 * for (ToolCall call : first.toolCalls()) {
 *   next.addMessages(Tools.result(call, runTool(call.getName(), call.getArgumentsJson())));
 * }
 * }</pre>
 */
public final class Tools {
  private Tools() {}

  /**
   * A function the model may call: its parameters a JSON Schema document (its text) of a JSON
   * object; calls the grammar enforces have arguments that validate against it.
   */
  public static Tool function(String name, String description, String parametersJsonSchema) {
    return Tool.newBuilder()
        .setName(name)
        .setDescription(description)
        .setParametersJsonSchema(parametersJsonSchema)
        .build();
  }

  /** A function without parameters. */
  public static Tool function(String name, String description) {
    return function(name, description, "");
  }

  /** The assistant's turn for the next request: the answer's text, reasoning and tool calls. */
  public static ChatMessage assistant(GenerationResult answer) {
    return ChatMessage.newBuilder()
        .setRole("assistant")
        .setContent(answer.text())
        .setReasoning(answer.reasoning())
        .addAllToolCalls(answer.toolCalls())
        .build();
  }

  /** A tool's result (text, often JSON) for the call it answers: a message of role "tool". */
  public static ChatMessage result(ToolCall call, String content) {
    return result(call.getId(), content);
  }

  /** A tool's result for the call with id {@code toolCallId}. */
  public static ChatMessage result(String toolCallId, String content) {
    return ChatMessage.newBuilder().setRole("tool").setToolCallId(toolCallId).setContent(content).build();
  }
}
