package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ToolChoice;
import dev.mlxgrpc.v1.ToolChoiceMode;

/**
 * What the model may or must call: builders for {@code ChatMessages.tool_choice}. {@link
 * #required()} and {@link #function(String)} are enforced by the grammar, with arguments that
 * validate against the tool's parameters; unset is {@link #auto()}.
 */
public final class ToolChoices {
  private ToolChoices() {}

  /** The model answers or calls tools, as it chooses. */
  public static ToolChoice auto() {
    return ToolChoice.newBuilder().setMode(ToolChoiceMode.TOOL_CHOICE_MODE_AUTO).build();
  }

  /** The model does not call tools (the tools are still rendered). */
  public static ToolChoice none() {
    return ToolChoice.newBuilder().setMode(ToolChoiceMode.TOOL_CHOICE_MODE_NONE).build();
  }

  /** The model calls at least one tool. */
  public static ToolChoice required() {
    return ToolChoice.newBuilder().setMode(ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED).build();
  }

  /** The model calls the function named {@code name} (one of the request's tools). */
  public static ToolChoice function(String name) {
    return ToolChoice.newBuilder()
        .setMode(ToolChoiceMode.TOOL_CHOICE_MODE_FUNCTION)
        .setFunctionName(name)
        .build();
  }
}
