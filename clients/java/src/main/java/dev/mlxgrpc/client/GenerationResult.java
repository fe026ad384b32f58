package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.GenerationStarted;
import dev.mlxgrpc.v1.TokenLogprob;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;

/** Everything one Generate produced: the unary form of a generation. */
public final class GenerationResult {
  private final String requestId;
  private GenerationStarted started;
  private final List<Integer> tokenIds = new ArrayList<>();
  private final StringBuilder text = new StringBuilder();
  private final List<TokenLogprob> logprobs = new ArrayList<>();
  private GenerationFinished finished;

  GenerationResult(String requestId) {
    this.requestId = requestId;
  }

  /** Adds one event of the stream. */
  GenerationResult add(GenerateResponse event) {
    switch (event.getEventCase()) {
      case STARTED:
        started = event.getStarted();
        break;
      case DELTA:
        tokenIds.addAll(event.getDelta().getTokenIdsList());
        text.append(event.getDelta().getText());
        logprobs.addAll(event.getDelta().getLogprobsList());
        break;
      case FINISHED:
        finished = event.getFinished();
        break;
      default:
        break;
    }
    return this;
  }

  /** The request id (the request's own, or the one assigned client-side). */
  public String requestId() {
    return requestId;
  }

  /** The started event: prompt and cached token counts. */
  public Optional<GenerationStarted> started() {
    return Optional.ofNullable(started);
  }

  /** The generated token ids, in order. */
  public List<Integer> tokenIds() {
    return Collections.unmodifiableList(tokenIds);
  }

  /** The generated text. */
  public String text() {
    return text.toString();
  }

  /** The token log probabilities, when the request asked for them. */
  public List<TokenLogprob> logprobs() {
    return Collections.unmodifiableList(logprobs);
  }

  /** The finished event: reason, usage, timings (empty if the call was cancelled client-side). */
  public Optional<GenerationFinished> finished() {
    return Optional.ofNullable(finished);
  }
}
