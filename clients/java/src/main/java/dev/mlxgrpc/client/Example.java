package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/**
 * Walks through the API against the server at $MLXGRPC_ADDRESS (default localhost:50051): model
 * info, a streamed Generate, cancelling a Generate (Cancel RPC and client-side), an asynchronous
 * Generate, Embed, an answer constrained by a JSON schema, and an invalid request's error details.
 * $MLXGRPC_TOKEN, when set, is the bearer token of every call (a server with a tokens file).
 * Notes are dimmed on a terminal only: piped output carries no escape codes (nor with NO_COLOR set).
 *
 * <p>With $MLXGRPC_IMAGE set to an image file (PNG, JPEG, WebP or GIF), it runs the image step
 * instead: the image and a question go to $MLXGRPC_MODEL (default "vision", the test fixture's
 * vision-language model) and the streamed answer is printed.
 */
public final class Example {
  private static final boolean COLOUR = System.console() != null && System.getenv("NO_COLOR") == null;

  private Example() {}

  public static void main(String[] args) throws Exception {
    String address = System.getenv().getOrDefault("MLXGRPC_ADDRESS", "localhost:50051");
    try (MlxGrpcClient client =
        MlxGrpcClient.builder(address).bearerToken(token()).defaultDeadline(Duration.ofSeconds(60)).build()) {
      String image = System.getenv("MLXGRPC_IMAGE");
      if (image != null && !image.isEmpty()) {
        describeImage(client, System.getenv().getOrDefault("MLXGRPC_MODEL", "vision"), Path.of(image));
      } else {
        run(client);
      }
    }
  }

  /** The image step: the image (its media type from the file's signature) and a question to {@code model}. */
  /** $MLXGRPC_TOKEN, or null (no token) when it is unset or empty. */
  static String token() {
    String token = System.getenv("MLXGRPC_TOKEN");
    return token == null || token.isEmpty() ? null : token;
  }

  private static void describeImage(MlxGrpcClient client, String model, Path path) throws Exception {
    ContentPart image = Images.image(path);
    System.out.printf("image %s (%s, %d bytes) to %s: ", path, image.getImage().getMediaType(),
        image.getImage().getData().size(), model);
    GenerateRequest request = GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(ChatMessages.newBuilder().addMessages(Images.user(image, Images.text("Describe the image."))))
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(32))
        .build();
    try (GenerateStream stream = client.generate(request)) {
      for (GenerateResponse event : stream) {
        if (event.hasStarted()) {
          System.out.print(note(String.format("[prompt_tokens=%d] ", event.getStarted().getPromptTokens())));
        } else if (event.hasDelta()) {
          System.out.print(event.getDelta().getText());
          System.out.flush();
        } else if (event.hasFinished()) {
          System.out.println(note(String.format("%n[finished reason=%s completion_tokens=%d]",
              event.getFinished().getReason(), event.getFinished().getUsage().getCompletionTokens())));
        }
      }
    } catch (StatusRuntimeException e) {
      System.out.printf("%nimage refused: %s%n", ErrorDetails.from(e));
      throw e;
    }
  }

  /** {@code text} dimmed on a terminal, as is anywhere else. */
  static String note(String text) {
    return COLOUR ? "\u001b[2m" + text + "\u001b[0m" : text;
  }

  private static GenerateRequest request(String text, int maxTokens) {
    StoppingCriteria stopping = StoppingCriteria.newBuilder().setMaxTokens(maxTokens).setIgnoreEos(true).build();
    return GenerateRequest.newBuilder().setText(text).setStopping(stopping).build();
  }

  private static void run(MlxGrpcClient client) throws Exception {
    // 1. Model info.
    ModelInfo info = client.modelInfo("");
    System.out.printf(
        "model %s: kind=%s vocab=%d context=%d dtype=%s chat_template=%b generation=%b%n",
        info.getName(), info.getKind(), info.getVocabSize(), info.getContextLength(),
        info.getDtype(), info.getHasChatTemplate(), info.getCapabilities().getGeneration());

    // 2. Stream a Generate, printing text deltas as they arrive.
    System.out.print("generate: ");
    try (GenerateStream stream = client.generate(request("The quick brown fox", 24))) {
      for (GenerateResponse event : stream) {
        if (event.hasStarted()) {
          System.out.print(note(String.format("[started id=%s prompt_tokens=%d] ",
              event.getStarted().getRequestId(), event.getStarted().getPromptTokens())));
        } else if (event.hasDelta()) {
          System.out.print(event.getDelta().getText());
          System.out.flush();
        } else if (event.hasFinished()) {
          System.out.println(note(String.format("%n[finished reason=%s completion_tokens=%d]",
              event.getFinished().getReason(), event.getFinished().getUsage().getCompletionTokens())));
        }
      }
    }

    // 3a. A second Generate, cancelled with the Cancel RPC after a few deltas. Its request id is
    // assigned client-side, so it is known before anything arrives.
    try (GenerateStream stream = client.generate(request("Once upon a time", 2000))) {
      int deltas = 0;
      for (GenerateResponse event : stream) {
        if (event.hasDelta() && ++deltas == 3) {
          System.out.printf("cancel(%s) -> cancelled=%b%n", stream.requestId(), client.cancel(stream.requestId()));
        }
        if (event.hasFinished()) {
          System.out.printf("cancelled stream finished: reason=%s after %d tokens%n",
              event.getFinished().getReason(), event.getFinished().getUsage().getCompletionTokens());
        }
      }
    }

    // 3b. The same, cancelling the call client-side instead.
    try (GenerateStream stream = client.generate(request("Once upon a time", 2000))) {
      int deltas = 0;
      for (GenerateResponse event : stream) {
        if (event.hasDelta() && ++deltas == 3) {
          stream.cancel();
        }
      }
    } catch (StatusRuntimeException e) {
      System.out.println("client-side cancel: " + e.getStatus().getCode());
    }

    // 4. Asynchronously: events arrive on gRPC's threads; the future holds the whole result.
    GenerateCall call = client.generateAsync(request("Hello", 8), new StreamObserver<>() {
      private int deltas;

      @Override
      public void onNext(GenerateResponse event) {
        deltas += event.hasDelta() ? 1 : 0;
      }

      @Override
      public void onError(Throwable t) {
        System.out.println("async generate failed: " + ErrorDetails.from(t));
      }

      @Override
      public void onCompleted() {
        System.out.printf("async generate: %d deltas%n", deltas);
      }
    });
    GenerationResult result = call.result().get();
    System.out.printf("async result: %s %s%n", result.finished().orElseThrow().getReason(),
        note(result.tokenIds().toString()));

    // 5. Embed two inputs and compare them.
    List<EmbedResponse> vectors =
        client.embed("A man is eating food.", "A man is eating a piece of bread.");
    System.out.printf("embed: %d vectors of length %d, cosine similarity %.4f%n",
        vectors.size(), vectors.get(0).getEmbeddingCount(),
        cosine(vectors.get(0).getEmbeddingList(), vectors.get(1).getEmbeddingList()));

    // 6. Structured output: an answer that validates against a JSON schema.
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
    GenerationResult answer = client.generateText(structured);
    System.out.printf("json schema: %s [%s]%n", answer.text(), answer.finished().orElseThrow().getReason());

    // 7. An invalid request: the error carries google.rpc details.
    GenerateRequest invalid = request("Hi", 4).toBuilder()
        .setSampling(SamplingParams.newBuilder().setTemperature(-1f)).build();
    try {
      client.generateText(invalid);
      throw new IllegalStateException("expected temperature = -1 to be rejected");
    } catch (StatusRuntimeException e) {
      ErrorDetails details = ErrorDetails.from(e);
      System.out.printf("invalid request: %s, field violations %s%n", details.code(), details.violationFields());
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
