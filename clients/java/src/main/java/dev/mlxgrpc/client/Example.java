package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.UUID;

/**
 * Walks through the API against the server at $MLXGRPC_ADDRESS (default localhost:50051): model
 * info, a streamed Generate, cancelling a Generate (Cancel RPC and client-side), an answer
 * constrained by a JSON schema, Embed, and an invalid request's error details.
 */
public final class Example {
  private Example() {}

  public static void main(String[] args) {
    String address = System.getenv().getOrDefault("MLXGRPC_ADDRESS", "localhost:50051");
    try (MlxGrpcClient client =
        MlxGrpcClient.builder(address).defaultDeadline(Duration.ofSeconds(60)).build()) {
      run(client);
    }
  }

  private static void run(MlxGrpcClient client) {
    // 1. Model info.
    ModelInfo info = client.modelInfo("");
    System.out.printf(
        "model %s: kind=%s vocab=%d context=%d dtype=%s chat_template=%b generation=%b%n",
        info.getName(), info.getKind(), info.getVocabSize(), info.getContextLength(),
        info.getDtype(), info.getHasChatTemplate(), info.getCapabilities().getGeneration());

    // 2. Stream a Generate, printing text deltas as they arrive.
    GenerateRequest request =
        GenerateRequest.newBuilder()
            .setText("The quick brown fox")
            .setStopping(StoppingCriteria.newBuilder().setMaxTokens(24))
            .build();
    System.out.print("generate: ");
    try (GenerateStream stream = client.generate(request)) {
      for (GenerateResponse event : stream) {
        switch (event.getEventCase()) {
          case STARTED:
            System.out.printf("[started id=%s prompt_tokens=%d] ",
                event.getStarted().getRequestId(), event.getStarted().getPromptTokens());
            break;
          case DELTA:
            System.out.print(event.getDelta().getText());
            System.out.flush();
            break;
          case FINISHED:
            System.out.printf("%n[finished reason=%s completion_tokens=%d]%n",
                event.getFinished().getReason(),
                event.getFinished().getUsage().getCompletionTokens());
            break;
          default:
            break;
        }
      }
    }

    // 3a. Start a second Generate and cancel it with the Cancel RPC after a few deltas.
    String id = "java-example-" + UUID.randomUUID();
    GenerateRequest longRequest =
        request.toBuilder()
            .setRequestId(id)
            .setStopping(StoppingCriteria.newBuilder().setMaxTokens(2000))
            .build();
    try (GenerateStream stream = client.generate(longRequest)) {
      int deltas = 0;
      for (GenerateResponse event : stream) {
        if (event.hasDelta() && ++deltas == 3) {
          System.out.printf("cancel(%s) -> cancelled=%b%n", id, client.cancel(id));
        }
        if (event.hasFinished()) {
          System.out.printf("cancelled stream finished: reason=%s after %d tokens%n",
              event.getFinished().getReason(),
              event.getFinished().getUsage().getCompletionTokens());
        }
      }
    }

    // 3b. The same, cancelling the call client-side instead.
    try (GenerateStream stream = client.generate(longRequest.toBuilder().setRequestId("").build())) {
      int deltas = 0;
      for (GenerateResponse event : stream) {
        if (event.hasDelta() && ++deltas == 3) {
          stream.cancel();
        }
      }
      System.out.println("client-side cancel: stream ended without error (it had finished)");
    } catch (StatusRuntimeException e) {
      System.out.println("client-side cancel: " + e.getStatus().getCode());
    }

    // 4. Embed two inputs and compare them.
    List<EmbedResponse> vectors =
        client.embed("A man is eating food.", "A man is eating a piece of bread.");
    System.out.printf("embed: %d vectors of length %d, cosine similarity %.4f%n",
        vectors.size(), vectors.get(0).getEmbeddingCount(),
        cosine(vectors.get(0).getEmbeddingList(), vectors.get(1).getEmbeddingList()));

    // 5. Structured output: an answer that validates against a JSON schema.
    String schema =
        "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"city\", \"country\"],"
            + " \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 40},"
            + " \"country\": {\"type\": \"string\", \"maxLength\": 40}}}";
    GenerateRequest structured =
        GenerateRequest.newBuilder()
            .setChat(ChatMessages.newBuilder().addMessages(
                ChatMessage.newBuilder().setRole("user").setContent("Where is the Eiffel Tower?")))
            .setStopping(StoppingCriteria.newBuilder().setMaxTokens(64))
            .setResponseFormat(ResponseFormats.jsonSchema(schema))
            .build();
    StringBuilder answer = new StringBuilder();
    try (GenerateStream stream = client.generate(structured)) {
      for (GenerateResponse event : stream) {
        answer.append(event.getDelta().getText());
        if (event.hasFinished()) {
          System.out.printf("json schema: %s [%s]%n", answer, event.getFinished().getReason());
        }
      }
    }

    // 6. An invalid request: the error carries google.rpc details.
    GenerateRequest invalid =
        request.toBuilder().setSampling(SamplingParams.newBuilder().setTemperature(-1f)).build();
    try (GenerateStream stream = client.generate(invalid)) {
      stream.forEachRemaining(e -> { });
      throw new IllegalStateException("expected temperature = -1 to be rejected");
    } catch (StatusRuntimeException e) {
      ErrorDetails details = ErrorDetails.from(e);
      System.out.printf("invalid request: %s, field violations %s%n",
          details.code(), details.violationFields());
      if (details.code() != Status.Code.INVALID_ARGUMENT) {
        throw e;
      }
    }
  }

  static double cosine(List<Float> a, List<Float> b) {
    double dot = 0;
    double na = 0;
    double nb = 0;
    for (int i = 0; i < a.size(); i++) {
      dot += a.get(i) * b.get(i);
      na += a.get(i) * a.get(i);
      nb += b.get(i) * b.get(i);
    }
    return dot / Math.sqrt(na * nb);
  }
}
