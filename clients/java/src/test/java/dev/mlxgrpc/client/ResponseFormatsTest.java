package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.ResponseFormat;
import dev.mlxgrpc.v1.ResponseFormatKind;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;

class ResponseFormatsTest {
  @Test
  void buildersSetOneFieldOfTheOneof() {
    assertEquals(ResponseFormat.FormatCase.JSON_SCHEMA, ResponseFormats.jsonSchema("{}").getFormatCase());
    assertTrue(ResponseFormats.jsonObject().getJsonObject());
    assertEquals("a+", ResponseFormats.regex("a+").getRegex());
    assertEquals("start: \"x\"", ResponseFormats.grammar("start: \"x\"").getGrammar());
    assertEquals(List.of("a", "b"), ResponseFormats.choice("a", "b").getChoice().getOptionsList());
  }

  @Test
  @EnabledIfEnvironmentVariable(
      named = "MLXGRPC_ADDRESS",
      matches = ".+",
      disabledReason = "MLXGRPC_ADDRESS is not set: skipping live tests")
  void jsonSchemaOutputIsCompleteAndAnInvalidRegexIsRefused() {
    try (MlxGrpcClient client =
        MlxGrpcClient.builder(System.getenv("MLXGRPC_ADDRESS"))
            .defaultDeadline(Duration.ofSeconds(60))
            .build()) {
      String schema =
          "{\"type\": \"object\", \"properties\": {\"answer\": {\"enum\": [\"yes\", \"no\"]}},"
              + " \"required\": [\"answer\"], \"additionalProperties\": false}";
      GenerateRequest request =
          GenerateRequest.newBuilder()
              .setText("Answer:")
              .setStopping(StoppingCriteria.newBuilder().setMaxTokens(32))
              .setResponseFormat(ResponseFormats.jsonSchema(schema))
              .build();
      StringBuilder text = new StringBuilder();
      FinishReason reason = FinishReason.FINISH_REASON_UNSPECIFIED;
      try (GenerateStream stream = client.generate(request)) {
        for (GenerateResponse event : stream) {
          text.append(event.getDelta().getText());
          if (event.hasFinished()) {
            reason = event.getFinished().getReason();
          }
        }
      }
      assertEquals(FinishReason.FINISH_REASON_STOP, reason, text.toString());
      assertTrue(
          List.of("{\"answer\": \"yes\"}", "{\"answer\": \"no\"}").contains(text.toString()),
          text.toString());
      assertTrue(
          client.modelInfo("").getCapabilities().getResponseFormatsList()
              .contains(ResponseFormatKind.RESPONSE_FORMAT_KIND_JSON_SCHEMA));

      GenerateRequest invalid =
          request.toBuilder().setResponseFormat(ResponseFormats.regex("[a-")).build();
      StatusRuntimeException error =
          assertThrows(
              StatusRuntimeException.class,
              () -> {
                try (GenerateStream stream = client.generate(invalid)) {
                  stream.forEachRemaining(e -> { });
                }
              });
      ErrorDetails details = ErrorDetails.from(error);
      assertEquals(Status.Code.INVALID_ARGUMENT, details.code());
      assertEquals(List.of("response_format.regex"), details.violationFields());
    }
  }
}
