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

/**
 * Everything one Generate produced: the unary form of a generation. Its answer accessors ({@link
 * #text()}, {@link #tokenIds()}, {@link #finished()}, ...) are the first choice's; {@link
 * #choices()} holds every choice ({@code GenerateRequest.n} of them) by {@code choice_index}.
 */
public final class GenerationResult {
  private final String requestId;
  private GenerationStarted started;
  private final List<TokenLogprob> promptLogprobs = new ArrayList<>();
  private final List<Choice> choices = new ArrayList<>(List.of(new Choice(0)));

  GenerationResult(String requestId) {
    this.requestId = requestId;
  }

  /** One answer of a generation, from the events of its {@code choice_index}. */
  public static final class Choice {
    private final int index;
    private final List<Integer> tokenIds = new ArrayList<>();
    private final StringBuilder text = new StringBuilder();
    private final StringBuilder reasoning = new StringBuilder();
    private final List<ToolCall> toolCalls = new ArrayList<>();
    private final List<ToolCall.Builder> streamedToolCalls = new ArrayList<>();
    private final List<TokenLogprob> logprobs = new ArrayList<>();
    private GenerationFinished finished;

    private Choice(int index) {
      this.index = index;
    }

    private void add(TokenDelta delta) {
      tokenIds.addAll(delta.getTokenIdsList());
      text.append(delta.getText());
      reasoning.append(delta.getReasoning());
      logprobs.addAll(delta.getLogprobsList());
      toolCalls.addAll(delta.getToolCallsList());
      for (ToolCallDelta piece : delta.getToolCallDeltasList()) {
        join(piece);
      }
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

    /** The choice's index, 0 to n-1. */
    public int index() {
      return index;
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

    /** This choice's finished event: reason, usage, timings (empty if the call was cancelled client-side). */
    public Optional<GenerationFinished> finished() {
      return Optional.ofNullable(finished);
    }
  }

  private Choice choice(int index) {
    while (choices.size() <= index) {
      choices.add(new Choice(choices.size()));
    }
    return choices.get(Math.max(index, 0));
  }

  /** Adds one event of the stream. */
  GenerationResult add(GenerateResponse event) {
    switch (event.getEventCase()) {
      case STARTED:
        started = event.getStarted();
        break;
      case PROMPT_LOGPROBS:
        promptLogprobs.addAll(event.getPromptLogprobs().getTokensList());
        break;
      case DELTA:
        choice(event.getChoiceIndex()).add(event.getDelta());
        break;
      case FINISHED:
        choice(event.getChoiceIndex()).finished = event.getFinished();
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

  /**
   * The prompt tokens' log probabilities (every prompt token but the first), when the request set
   * {@code prompt_logprobs}.
   */
  public List<TokenLogprob> promptLogprobs() {
    return Collections.unmodifiableList(promptLogprobs);
  }

  /** Every choice in index order, the first included. */
  public List<Choice> choices() {
    return Collections.unmodifiableList(choices);
  }

  /** The first choice's generated token ids, in order. */
  public List<Integer> tokenIds() {
    return choices.get(0).tokenIds();
  }

  /** The first choice's text (without reasoning or tool-call markup). */
  public String text() {
    return choices.get(0).text();
  }

  /** The first choice's thinking, kept out of the text (models with thinking markers). */
  public String reasoning() {
    return choices.get(0).reasoning();
  }

  /** The first choice's tool calls (see {@link Choice#toolCalls()}). */
  public List<ToolCall> toolCalls() {
    return choices.get(0).toolCalls();
  }

  /** The first choice's tool-call pieces as they streamed (see {@link Choice#streamedToolCalls()}). */
  public List<ToolCall> streamedToolCalls() {
    return choices.get(0).streamedToolCalls();
  }

  /** The first choice's token log probabilities, when the request asked for them. */
  public List<TokenLogprob> logprobs() {
    return choices.get(0).logprobs();
  }

  /** The first choice's finished event: reason, usage, timings (empty if the call was cancelled client-side). */
  public Optional<GenerationFinished> finished() {
    return choices.get(0).finished();
  }
}
