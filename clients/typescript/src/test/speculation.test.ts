// Offline tests of the speculation and prediction helpers (no server needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, toJson } from "@bufbuild/protobuf";

import { GenerateRequestSchema, SpeculationMode, prediction, speculation } from "../index.js";

test("speculation() builds the request's SpeculationOptions", () => {
  const ngram = speculation("ngram", 6);
  assert.equal(ngram.mode, SpeculationMode.NGRAM);
  assert.equal(ngram.numDraftTokens, 6);
  assert.equal(speculation("off").mode, SpeculationMode.OFF);
  assert.equal(speculation("off").numDraftTokens, 0);
  assert.equal(speculation("default").mode, SpeculationMode.UNSPECIFIED);
  assert.equal(speculation(SpeculationMode.DRAFT, 8).mode, SpeculationMode.DRAFT);
  assert.throws(() => speculation("fast" as "off"), /unknown speculation mode "fast"/);
  const req = create(GenerateRequestSchema, { prompt: { case: "text", value: "x" }, speculation: ngram });
  assert.deepEqual(toJson(GenerateRequestSchema, req), {
    text: "x",
    speculation: { mode: "SPECULATION_MODE_NGRAM", numDraftTokens: 6 },
  });
});

test("prediction() builds the request's Prediction from text or token ids", () => {
  const text = prediction("def f():\n    return 1\n");
  assert.deepEqual(text.content, { case: "text", value: "def f():\n    return 1\n" });
  assert.equal(prediction("").content.case, "text"); // set, if empty
  for (const ids of [[5, 6, 7], new Int32Array([5, 6, 7]), new Set([5, 6, 7])]) {
    const tokens = prediction(ids);
    assert.equal(tokens.content.case, "tokens");
    assert.deepEqual(tokens.content.case === "tokens" ? tokens.content.value.ids : [], [5, 6, 7]);
  }
  assert.throws(() => prediction([1, 2.5]), /text or integer token ids/);
  const req = create(GenerateRequestSchema, { prompt: { case: "text", value: "x" }, prediction: prediction([5, 6]) });
  assert.deepEqual(toJson(GenerateRequestSchema, req), { text: "x", prediction: { tokens: { ids: [5, 6] } } });
  const byText = create(GenerateRequestSchema, { prompt: { case: "text", value: "x" }, prediction: prediction("y") });
  assert.deepEqual(toJson(GenerateRequestSchema, byText), { text: "x", prediction: { text: "y" } });
});
