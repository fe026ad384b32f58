// Tools and chat options: builders for a chat prompt's tools, tool choice and template
// options, and the messages of an agent loop (the assistant's calls, the tools' results).
// A response that ended with calls has FinishReason.TOOL_CALLS and GenerateResult.toolCalls.
import { create, type MessageInitShape } from "@bufbuild/protobuf";

import {
  ToolCallSchema,
  ToolChoiceMode,
  type ChatMessageSchema,
  type ChatMessagesSchema,
  type ToolCall,
  type ToolCallDelta,
  type ToolChoiceSchema,
  type ToolSchema,
} from "./gen/mlxgrpc/v1/generation_pb.js";

export type ToolInit = MessageInitShape<typeof ToolSchema>;
export type ToolChoiceInit = MessageInitShape<typeof ToolChoiceSchema>;
export type ChatMessageInit = MessageInitShape<typeof ChatMessageSchema>;
export type ChatMessagesInit = MessageInitShape<typeof ChatMessagesSchema>;

/** A function the model may call: its parameters a JSON Schema object (serialized here) or its text. */
export function tool(name: string, description = "", parameters?: object | string): ToolInit {
  const parametersJsonSchema = parameters === undefined || typeof parameters === "string" ? (parameters ?? "") : JSON.stringify(parameters);
  return { name, description, parametersJsonSchema };
}

/** A tool choice by name: "auto" (the model chooses), "none" (no calls), "required" (at least one call). */
export type ToolChoiceName = "auto" | "none" | "required";

const CHOICES: Record<ToolChoiceName, ToolChoiceMode> = {
  auto: ToolChoiceMode.AUTO,
  none: ToolChoiceMode.NONE,
  required: ToolChoiceMode.REQUIRED,
};

/**
 * What the model may or must call: "auto", "none", "required", `{ function: name }` (that
 * function, enforced by the grammar like "required") or a ToolChoiceMode.
 */
export function toolChoice(choice: ToolChoiceName | { function: string } | ToolChoiceMode): ToolChoiceInit {
  if (typeof choice === "object") return { mode: ToolChoiceMode.FUNCTION, functionName: choice.function };
  const mode = typeof choice === "string" ? CHOICES[choice] : choice;
  if (mode === undefined) {
    throw new TypeError(`unknown tool choice ${JSON.stringify(choice)} (one of ${Object.keys(CHOICES).join(", ")}, or { function })`);
  }
  return { mode };
}

/** A chat prompt's options beyond its messages. */
export interface ChatOptions {
  /** Functions the model may call (`tool(...)`); a model without tool calling refuses them (FAILED_PRECONDITION). */
  tools?: ToolInit[];
  /** See `toolChoice()`; unset: auto. */
  toolChoice?: ToolChoiceName | { function: string } | ToolChoiceMode;
  /** Allow more than one call in one answer; unset: true. */
  parallelToolCalls?: boolean;
  /** Thinking on or off, for templates that have it; unset: the template's default. */
  enableThinking?: boolean;
  /** Further template variables, each any JSON value (serialized here), e.g. `{ reasoning_effort: "low" }`. */
  templateKwargs?: Record<string, unknown>;
}

/**
 * A chat prompt (GenerateRequest.prompt) of `messages` with tools and template options:
 *
 *     client.generateText({ prompt: chatPrompt(messages, { tools, toolChoice: "required", enableThinking: false }) })
 */
export function chatPrompt(messages: ChatMessageInit[], options: ChatOptions = {}): { case: "chat"; value: ChatMessagesInit } {
  const value: ChatMessagesInit = { messages };
  if (options.tools !== undefined) value.tools = options.tools;
  if (options.toolChoice !== undefined) value.toolChoice = toolChoice(options.toolChoice);
  if (options.parallelToolCalls !== undefined) value.parallelToolCalls = options.parallelToolCalls;
  if (options.enableThinking !== undefined) value.enableThinking = options.enableThinking;
  if (options.templateKwargs !== undefined) {
    value.templateKwargs = Object.fromEntries(Object.entries(options.templateKwargs).map(([k, v]) => [k, JSON.stringify(v)]));
  }
  return { case: "chat", value };
}

/** The assistant's turn for the next request: an answer's text, reasoning and tool calls (a GenerateResult fits). */
export function assistantMessage(answer: { text: string; reasoning?: string; toolCalls?: ToolCall[] }): ChatMessageInit {
  return { role: "assistant", content: answer.text, reasoning: answer.reasoning ?? "", toolCalls: answer.toolCalls ?? [] };
}

/** A tool's result for the call it answers (a ToolCall or its id): text, or any other value as JSON. */
export function toolMessage(call: ToolCall | string, result: unknown): ChatMessageInit {
  const toolCallId = typeof call === "string" ? call : call.id;
  return { role: "tool", toolCallId, content: typeof result === "string" ? result : JSON.stringify(result) };
}

/**
 * Joins streamed tool-call pieces into `calls` (by index: the first piece's id and name,
 * the arguments' text concatenated) and returns it. The complete calls
 * (TokenDelta.toolCalls) are the parsed, checked ones; these are the model's text as it streams.
 */
export function addToolCallDeltas(calls: ToolCall[], deltas: ToolCallDelta[]): ToolCall[] {
  for (const d of deltas) {
    const call = (calls[d.index] ??= create(ToolCallSchema));
    if (d.id) call.id = d.id;
    if (d.name) call.name = d.name;
    call.argumentsJson += d.argumentsJson;
  }
  return calls;
}
