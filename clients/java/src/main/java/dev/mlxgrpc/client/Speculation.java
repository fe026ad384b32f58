package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.SpeculationMode;
import dev.mlxgrpc.v1.SpeculationOptions;

/**
 * A request's speculative decoding: where drafts come from and the most draft tokens verified per
 * step (0: the server's default; at most 8). It never changes the output, only how soon it
 * arrives; the finished event's usage reports {@code draftTokens} and {@code acceptedDraftTokens},
 * and a model's {@code capabilities.speculation.modes} the modes it can use.
 *
 * <pre>{@code
 * GenerateRequest req = GenerateRequest.newBuilder()
 *     .setText("Repeat exactly: ...")
 *     .setSpeculation(Speculation.ngram(6))
 *     .build();
 * }</pre>
 */
public final class Speculation {
  private Speculation() {}

  /** The options for {@code mode} (UNSPECIFIED: the server's default) and at most {@code numDraftTokens} per step. */
  public static SpeculationOptions of(SpeculationMode mode, int numDraftTokens) {
    return SpeculationOptions.newBuilder().setMode(mode).setNumDraftTokens(numDraftTokens).build();
  }

  /** Prompt lookup: drafts continue an earlier occurrence of the latest tokens (copy-heavy output). */
  public static SpeculationOptions ngram(int numDraftTokens) {
    return of(SpeculationMode.SPECULATION_MODE_NGRAM, numDraftTokens);
  }

  /** Drafts from the server's draft model for the requested model. */
  public static SpeculationOptions draft(int numDraftTokens) {
    return of(SpeculationMode.SPECULATION_MODE_DRAFT, numDraftTokens);
  }

  /** No speculation. */
  public static SpeculationOptions off() {
    return of(SpeculationMode.SPECULATION_MODE_OFF, 0);
  }
}
