// Offline tests of the speculation helper (no server needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, toJson } from "@bufbuild/protobuf";

import { GenerateRequestSchema, SpeculationMode, speculation } from "../index.js";

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
