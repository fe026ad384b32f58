// Structured output: the builders, and a JSON-schema request against the live server
// (see support.ts).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  Code,
  ConnectError,
  FinishReason,
  ResponseFormatKind,
  choiceFormat,
  connect,
  errorDetails,
  grammarFormat,
  jsonObjectFormat,
  jsonSchemaFormat,
  regexFormat,
} from "../index.js";
import { address, liveTest, token } from "./support.js";

test("the builders set one field of the oneof", () => {
  assert.deepEqual(jsonSchemaFormat({ type: "string" }), { format: { case: "jsonSchema", value: '{"type":"string"}' } });
  assert.deepEqual(jsonSchemaFormat("{}"), { format: { case: "jsonSchema", value: "{}" } });
  assert.deepEqual(jsonObjectFormat(), { format: { case: "jsonObject", value: true } });
  assert.deepEqual(regexFormat("a+"), { format: { case: "regex", value: "a+" } });
  assert.deepEqual(grammarFormat('start: "x"'), { format: { case: "grammar", value: 'start: "x"' } });
  assert.deepEqual(choiceFormat("a", "b"), { format: { case: "choice", value: { options: ["a", "b"] } } });
});

liveTest("a JSON-schema request ends STOP with JSON that fits the schema", async () => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const schema = {
      type: "object",
      properties: { answer: { enum: ["yes", "no"] } },
      required: ["answer"],
      additionalProperties: false,
    };
    const result = await client.generateText({
      prompt: { case: "text", value: "Answer:" },
      stopping: { maxTokens: 32 },
      responseFormat: jsonSchemaFormat(schema),
    });
    assert.equal(result.finished?.reason, FinishReason.STOP, result.text);
    assert.ok(["yes", "no"].includes(JSON.parse(result.text).answer), result.text);
    const info = await client.getModelInfo();
    assert.ok(info.capabilities?.responseFormats.includes(ResponseFormatKind.JSON_SCHEMA));
    let failure: ConnectError | undefined;
    try {
      await client.generateText({ prompt: { case: "text", value: "x" }, responseFormat: regexFormat("[a-") });
    } catch (err) {
      failure = ConnectError.from(err);
    }
    assert.equal(failure?.code, Code.InvalidArgument);
    assert.deepEqual(errorDetails(failure).fieldViolations.map((v) => v.field), ["response_format.regex"]);
  } finally {
    client.close();
  }
});
