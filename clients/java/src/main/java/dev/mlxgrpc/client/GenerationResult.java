package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GenerationFinished;
import dev.mlxgrpc.v1.GenerationStarted;
import dev.mlxgrpc.v1.TokenDelta;
import dev.mlxgrpc.v1.TokenLogprob;
import dev.mlxgrpc.v1.ToolCall;
import dev.mlxgrpc.v1.ToolCallDelta;
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
  private final StringBuilder reasoning = new StringBuilder();
  private final List<ToolCall> toolCalls = new ArrayList<>();
  private final List<ToolCall.Builder> streamedToolCalls = new ArrayList<>();
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
        TokenDelta delta = event.getDelta();
        tokenIds.addAll(delta.getTokenIdsList());
        text.append(delta.getText());
        reasoning.append(delta.getReasoning());
        logprobs.addAll(delta.getLogprobsList());
        toolCalls.addAll(delta.getToolCallsList());
        for (ToolCallDelta piece : delta.getToolCallDeltasList()) {
          join(piece);
        }
        break;
      case FINISHED:
        finished = event.getFinished();
        break;
      default:
        break;
    }
    return this;
  }

  /** Joins a streamed piece into its call (by index): the first piece's id and name, the arguments' text. */
  private void join(ToolCallDelta piece) {
    while (streamedToolCalls.size() <= piece.getIndex()) {
      streamedToolCalls.add(ToolCall.newBuilder());
    }
    ToolCall.Builder call = streamedToolCalls.get(piece.getIndex());
    if (!piece.getId().isEmpty()) {
      call.setId(piece.getId());
    }
    if (!piece.getName().isEmpty()) {
      call.setName(piece.getName());
    }
    call.setArgumentsJson(call.getArgumentsJson() + piece.getArgumentsJson());
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

  /** The answer's text (without reasoning or tool-call markup). */
  public String text() {
    return text.toString();
  }

  /** The model's thinking, kept out of the text (models with thinking markers). */
  public String reasoning() {
    return reasoning.toString();
  }

  /**
   * The tool calls the answer made, parsed and checked against the tools; the finished event's
   * reason is then {@code FINISH_REASON_TOOL_CALLS}.
   */
  public List<ToolCall> toolCalls() {
    return Collections.unmodifiableList(toolCalls);
  }

  /**
   * The tool-call pieces as they streamed ({@code TokenDelta.tool_call_deltas}), joined by index:
   * the model's text of each call. {@link #toolCalls()} holds the authoritative, checked calls.
   */
  public List<ToolCall> streamedToolCalls() {
    return streamedToolCalls.stream().map(ToolCall.Builder::build).toList();
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
