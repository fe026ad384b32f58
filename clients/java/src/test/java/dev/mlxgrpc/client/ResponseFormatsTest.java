package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.ResponseFormat;
import dev.mlxgrpc.v1.ResponseFormatKind;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.List;
import org.junit.jupiter.api.Test;

class ResponseFormatsTest {
  @Test
  void buildersSetOneFieldOfTheOneof() {
    assertEquals(ResponseFormat.FormatCase.JSON_SCHEMA, ResponseFormats.jsonSchema("{}").getFormatCase());
    assertTrue(ResponseFormats.jsonObject().getJsonObject());
    assertEquals("a+", ResponseFormats.regex("a+").getRegex());
    assertEquals("start: \"x\"", ResponseFormats.grammar("start: \"x\"").getGrammar());
    assertEquals(List.of("a", "b"), ResponseFormats.choice("a", "b").getChoice().getOptionsList());
  }

  /** Against the live server at $MLXGRPC_ADDRESS (see {@link LiveServer}). */
  @Test
  void jsonSchemaOutputIsCompleteAndAnInvalidRegexIsRefused() {
    try (LiveServer server = LiveServer.connect()) {
      MlxGrpcClient client = server.client;
      String schema =
          "{\"type\": \"object\", \"properties\": {\"answer\": {\"enum\": [\"yes\", \"no\"]}},"
              + " \"required\": [\"answer\"], \"additionalProperties\": false}";
      GenerateRequest request =
          GenerateRequest.newBuilder()
              .setText("Answer:")
              .setStopping(StoppingCriteria.newBuilder().setMaxTokens(32))
              .setResponseFormat(ResponseFormats.jsonSchema(schema))
              .build();
      GenerationResult result = client.generateText(request);
      assertEquals(FinishReason.FINISH_REASON_STOP, result.finished().orElseThrow().getReason(), result.text());
      assertTrue(
          List.of("{\"answer\": \"yes\"}", "{\"answer\": \"no\"}").contains(result.text()), result.text());
      assertTrue(
          server.generator.getCapabilities().getResponseFormatsList()
              .contains(ResponseFormatKind.RESPONSE_FORMAT_KIND_JSON_SCHEMA));

      GenerateRequest invalid =
          request.toBuilder().setResponseFormat(ResponseFormats.regex("[a-")).build();
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> client.generateText(invalid));
      ErrorDetails details = ErrorDetails.from(error);
      assertEquals(Status.Code.INVALID_ARGUMENT, details.code());
      assertEquals(List.of("response_format.regex"), details.violationFields());
    }
  }
}
