// Structured output: builders for GenerateRequest.responseFormat. A complete output
// ends with FinishReason.STOP; FinishReason.LENGTH means maxTokens cut it short.
import type { MessageInitShape } from "@bufbuild/protobuf";

import type { ResponseFormatSchema } from "./gen/mlxgrpc/v1/generation_pb.js";

export type ResponseFormatInit = MessageInitShape<typeof ResponseFormatSchema>;

/** JSON that validates against `schema`: an object (serialized here) or JSON Schema text. */
export function jsonSchemaFormat(schema: object | string): ResponseFormatInit {
  return { format: { case: "jsonSchema", value: typeof schema === "string" ? schema : JSON.stringify(schema) } };
}

/** Any JSON object. */
export function jsonObjectFormat(): ResponseFormatInit {
  return { format: { case: "jsonObject", value: true } };
}

/** Text the whole of which matches `pattern` (Rust regex syntax). */
export function regexFormat(pattern: string): ResponseFormatInit {
  return { format: { case: "regex", value: pattern } };
}

/** Text matching a Lark grammar (start rule `start`). */
export function grammarFormat(lark: string): ResponseFormatInit {
  return { format: { case: "grammar", value: lark } };
}

/** Exactly one of `options`. */
export function choiceFormat(...options: string[]): ResponseFormatInit {
  return { format: { case: "choice", value: { options } } };
}
