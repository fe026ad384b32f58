// Speculative decoding options for a Generate request, and a predicted output.

import { create } from "@bufbuild/protobuf";

import {
  PredictionSchema,
  SpeculationMode,
  SpeculationOptionsSchema,
  type Prediction,
  type SpeculationOptions,
} from "./gen/mlxgrpc/v1/generation_pb.js";

/** A speculation mode by name: "default" is the server's own (SPECULATION_MODE_UNSPECIFIED). */
export type SpeculationModeName = "default" | "off" | "ngram" | "draft";

const MODES: Record<SpeculationModeName, SpeculationMode> = {
  default: SpeculationMode.UNSPECIFIED,
  off: SpeculationMode.OFF,
  ngram: SpeculationMode.NGRAM,
  draft: SpeculationMode.DRAFT,
};

/**
 * A request's speculative decoding: where drafts come from ("ngram": prompt lookup,
 * "draft": the server's draft model, "off", or a SpeculationMode) and the most draft
 * tokens verified per step (0: the server's default; at most 8). It never changes the
 * output, only how soon it arrives; `finished.usage` reports `draftTokens` and
 * `acceptedDraftTokens`, and a model's `capabilities.speculation.modes` the modes it can use.
 *
 *     client.generate({ prompt, stopping, speculation: speculation("ngram", 6) })
 */
export function speculation(mode: SpeculationMode | SpeculationModeName, numDraftTokens = 0): SpeculationOptions {
  const value = typeof mode === "string" ? MODES[mode] : mode;
  if (value === undefined) {
    throw new TypeError(`unknown speculation mode ${JSON.stringify(mode)} (one of ${Object.keys(MODES).join(", ")})`);
  }
  return create(SpeculationOptionsSchema, { mode: value, numDraftTokens });
}

/**
 * A request's predicted output: what the answer is expected to mostly repeat (a file
 * being edited, a passage being corrected), as text (tokenized by the server, no special
 * tokens) or token ids (used as they are). Its tokens are proposed as speculative drafts
 * and verified by the model, so the output is the same as without it, only sooner where
 * it matches; `finished.usage` reports `acceptedPredictionTokens` and
 * `rejectedPredictionTokens`. It needs a model whose
 * `capabilities.speculation.externalTokens` is set; with speculation "off" it is
 * INVALID_ARGUMENT.
 *
 *     client.generate({ prompt, stopping, prediction: prediction(source) })
 */
export function prediction(content: string | Iterable<number>): Prediction {
  if (typeof content === "string") {
    return create(PredictionSchema, { content: { case: "text", value: content } });
  }
  const ids = Array.from(content);
  if (!ids.every((id) => Number.isInteger(id))) {
    throw new TypeError("a prediction is text or integer token ids");
  }
  return create(PredictionSchema, { content: { case: "tokens", value: { ids } } });
}
