package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.Prediction;
import dev.mlxgrpc.v1.TokenIds;
import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * A request's predicted output: what the answer is expected to mostly repeat (a file being
 * edited, a passage being corrected). Its tokens are proposed as speculative drafts and verified
 * by the model, so the output is the same as without it, only sooner where it matches; the
 * finished event's usage reports {@code acceptedPredictionTokens} and {@code
 * rejectedPredictionTokens} (both counted in {@code draftTokens}). It needs a model whose {@code
 * capabilities.speculation.externalTokens} is set; with {@link Speculation#off()} it is
 * INVALID_ARGUMENT.
 *
 * <pre>{@code
 * GenerateRequest req = GenerateRequest.newBuilder()
 *     .setText("Rename total to sum in:\n" + source)
 *     .setPrediction(Predictions.text(source))
 *     .build();
 * }</pre>
 */
public final class Predictions {
  private Predictions() {}

  /** A prediction as text, tokenized by the server with the model's tokenizer (no special tokens). */
  public static Prediction text(String text) {
    return Prediction.newBuilder().setText(text).build();
  }

  /** A prediction as token ids, used as they are (a result's {@code tokenIds()}, for one). */
  public static Prediction tokens(Iterable<Integer> ids) {
    return Prediction.newBuilder().setTokens(TokenIds.newBuilder().addAllIds(ids)).build();
  }

  /** A prediction as token ids, used as they are. */
  public static Prediction tokens(int... ids) {
    return tokens(Arrays.stream(ids).boxed().collect(Collectors.toList()));
  }
}
