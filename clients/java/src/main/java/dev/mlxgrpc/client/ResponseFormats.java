package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ResponseFormat;
import java.util.List;

/**
 * Structured output: builders for {@code GenerateRequest.response_format}. A complete output ends
 * with {@code FINISH_REASON_STOP}; {@code FINISH_REASON_LENGTH} means max_tokens cut it short
 * (JSON may then not parse).
 *
 * <pre>{@code
 * GenerateRequest request = GenerateRequest.newBuilder()
 *     .setText("The Eiffel Tower is in")
 *     .setResponseFormat(ResponseFormats.jsonSchema(
 *         "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}"))
 *     .build();
 * }</pre>
 */
public final class ResponseFormats {
  private ResponseFormats() {}

  /** JSON that validates against a JSON Schema document (its text). */
  public static ResponseFormat jsonSchema(String schema) {
    return ResponseFormat.newBuilder().setJsonSchema(schema).build();
  }

  /** Any JSON object. */
  public static ResponseFormat jsonObject() {
    return ResponseFormat.newBuilder().setJsonObject(true).build();
  }

  /** Text the whole of which matches {@code pattern} (Rust regex syntax). */
  public static ResponseFormat regex(String pattern) {
    return ResponseFormat.newBuilder().setRegex(pattern).build();
  }

  /** Text matching a Lark grammar (start rule {@code start}). */
  public static ResponseFormat grammar(String lark) {
    return ResponseFormat.newBuilder().setGrammar(lark).build();
  }

  /** Exactly one of {@code options}. */
  public static ResponseFormat choice(String... options) {
    return ResponseFormat.newBuilder()
        .setChoice(ResponseFormat.Choice.newBuilder().addAllOptions(List.of(options)))
        .build();
  }
}
