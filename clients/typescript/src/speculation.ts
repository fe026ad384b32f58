// Speculative decoding options for a Generate request.

import { create } from "@bufbuild/protobuf";

import {
  SpeculationMode,
  SpeculationOptionsSchema,
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
