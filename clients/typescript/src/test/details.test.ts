// Offline tests of the error-detail helper (no server needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";

import {
  BadRequestSchema,
  Code,
  ConnectError,
  ErrorInfoSchema,
  RetryInfoSchema,
  cosineSimilarity,
  errorDetails,
} from "../index.js";

test("errorDetails extracts ErrorInfo, BadRequest and RetryInfo", () => {
  const err = new ConnectError("queue full", Code.ResourceExhausted, undefined, [
    { desc: ErrorInfoSchema, value: { domain: "mlxgrpc.v1", reason: "QUEUE_FULL", metadata: { queued: "8" } } },
    { desc: BadRequestSchema, value: { fieldViolations: [{ field: "stopping.max_tokens", description: "too big" }] } },
    { desc: RetryInfoSchema, value: { retryDelay: create(DurationSchema, { seconds: 1n, nanos: 500_000_000 }) } },
  ]);
  const d = errorDetails(err);
  assert.equal(d.code, Code.ResourceExhausted);
  assert.equal(d.message, "queue full");
  assert.equal(d.errorInfo?.reason, "QUEUE_FULL");
  assert.equal(d.errorInfo?.metadata["queued"], "8");
  assert.deepEqual(d.fieldViolations.map((v) => v.field), ["stopping.max_tokens"]);
  assert.equal(d.retryDelayMs, 1500);
});

test("errorDetails of a plain error is UNKNOWN with no details", () => {
  const d = errorDetails(new Error("boom"));
  assert.equal(d.code, Code.Unknown);
  assert.equal(d.errorInfo, undefined);
  assert.deepEqual(d.fieldViolations, []);
  assert.equal(d.retryInfo, undefined);
});

test("cosineSimilarity", () => {
  assert.equal(cosineSimilarity([1, 0], [1, 0]), 1);
  assert.equal(cosineSimilarity([1, 0], [0, 2]), 0);
  assert.ok(Math.abs(cosineSimilarity([1, 1], [-1, -1]) + 1) < 1e-12);
});
