// Tools: the builders and the collected result against an in-process server (offline),
// and tool choice against a live server's "tools" model (see support.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  FinishReason,
  GenerateRequestSchema,
  GenerateResponseSchema,
  InferenceService,
  ModelKind,
  ToolCallDeltaSchema,
  ToolCallSchema,
  ToolChoiceMode,
  addToolCallDeltas,
  assistantMessage,
  chatPrompt,
  connect,
  errorDetails,
  tool,
  toolChoice,
  toolMessage,
  type ChatMessages,
  type GenerateRequest,
  type GenerateResponse,
  type MlxClient,
  type ToolCall,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

const city = { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false };
const zone = { type: "object", properties: { zone: { type: "string", maxLength: 16 } }, required: ["zone"], additionalProperties: false };
const tools = [tool("get_weather", "The current weather in a city.", city), tool("get_time", "The time in a time zone.", zone)];
const required: Record<string, string> = { get_weather: "city", get_time: "zone" };

test("tool, toolChoice and chatPrompt build the chat prompt's fields", () => {
  assert.deepEqual(tool("f", "does f", { type: "object" }), { name: "f", description: "does f", parametersJsonSchema: '{"type":"object"}' });
  assert.deepEqual(tool("g", "", '{"type":"object"}').parametersJsonSchema, '{"type":"object"}');
  assert.deepEqual(tool("h"), { name: "h", description: "", parametersJsonSchema: "" });
  assert.deepEqual(toolChoice("auto"), { mode: ToolChoiceMode.AUTO });
  assert.deepEqual(toolChoice("none"), { mode: ToolChoiceMode.NONE });
  assert.deepEqual(toolChoice("required"), { mode: ToolChoiceMode.REQUIRED });
  assert.deepEqual(toolChoice(ToolChoiceMode.REQUIRED), { mode: ToolChoiceMode.REQUIRED });
  assert.deepEqual(toolChoice({ function: "f" }), { mode: ToolChoiceMode.FUNCTION, functionName: "f" });
  assert.throws(() => toolChoice("any" as "auto"), /unknown tool choice "any"/);

  const messages = [{ role: "user", content: "Weather in Paris?" }];
  assert.deepEqual(chatPrompt(messages), { case: "chat", value: { messages } });
  const prompt = chatPrompt(messages, {
    tools,
    toolChoice: { function: "get_weather" },
    parallelToolCalls: false,
    enableThinking: false,
    templateKwargs: { reasoning_effort: "low", budget: 3 },
  });
  const req = create(GenerateRequestSchema, { prompt, stopping: { maxTokens: 96 } });
  assert.deepEqual(toJson(GenerateRequestSchema, req), {
    chat: {
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: [
        { name: "get_weather", description: "The current weather in a city.", parametersJsonSchema: JSON.stringify(city) },
        { name: "get_time", description: "The time in a time zone.", parametersJsonSchema: JSON.stringify(zone) },
      ],
      toolChoice: { mode: "TOOL_CHOICE_MODE_FUNCTION", functionName: "get_weather" },
      parallelToolCalls: false,
      enableThinking: false,
      templateKwargs: { reasoning_effort: '"low"', budget: "3" },
    },
    stopping: { maxTokens: 96 },
  });
});

test("assistantMessage and toolMessage carry the calls and their results", () => {
  const call = create(ToolCallSchema, { id: "call_1", name: "get_weather", argumentsJson: '{"city":"Paris"}' });
  assert.deepEqual(assistantMessage({ text: "", reasoning: "hmm", toolCalls: [call] }), {
    role: "assistant", content: "", reasoning: "hmm", toolCalls: [call],
  });
  assert.deepEqual(assistantMessage({ text: "Sunny." }), { role: "assistant", content: "Sunny.", reasoning: "", toolCalls: [] });
  assert.deepEqual(toolMessage(call, { temperature_c: 21 }), { role: "tool", toolCallId: "call_1", content: '{"temperature_c":21}' });
  assert.deepEqual(toolMessage("call_2", "done"), { role: "tool", toolCallId: "call_2", content: "done" });
});

test("addToolCallDeltas joins the pieces of each call by index", () => {
  const piece = (index: number, argumentsJson: string, id = "", name = "") =>
    create(ToolCallDeltaSchema, { index, id, name, argumentsJson });
  const calls = addToolCallDeltas([], [piece(0, '{"ci', "call_a", "get_weather"), piece(1, "", "call_b", "get_time")]);
  addToolCallDeltas(calls, [piece(0, 'ty": "Oslo"}'), piece(1, "{}")]);
  assert.deepEqual(calls.map((c) => [c.id, c.name, c.argumentsJson]), [
    ["call_a", "get_weather", '{"city": "Oslo"}'],
    ["call_b", "get_time", "{}"],
  ]);
});

// An in-process server that records the request and answers with thinking, streamed call
// pieces, the complete call and FINISH_REASON_TOOL_CALLS.
const seen: GenerateRequest[] = [];
const script: MessageInitShape<typeof GenerateResponseSchema>[] = [
  { event: { case: "started", value: { requestId: "r", promptTokens: 9 } } },
  { event: { case: "delta", value: { tokenIds: [1, 2], reasoning: "The user wants " } } },
  { event: { case: "delta", value: { tokenIds: [3], reasoning: "the weather." } } },
  { event: { case: "delta", value: { tokenIds: [4], text: "Let me check." } } },
  { event: { case: "delta", value: { tokenIds: [5], toolCallDeltas: [{ index: 0, id: "call_x", name: "get_weather", argumentsJson: '{"city": ' }] } } },
  {
    event: {
      case: "delta",
      value: {
        tokenIds: [6],
        toolCallDeltas: [{ index: 0, argumentsJson: '"Paris"}' }],
        toolCalls: [{ id: "call_x", name: "get_weather", argumentsJson: '{"city": "Paris"}' }],
      },
    },
  },
  { event: { case: "finished", value: { reason: FinishReason.TOOL_CALLS, usage: { promptTokens: 9, completionTokens: 6 } } } },
];
// Asked for two choices (n = 2) and prompt logprobs: the events of each choice interleaved.
const choicesScript: MessageInitShape<typeof GenerateResponseSchema>[] = [
  { event: { case: "started", value: { requestId: "r", promptTokens: 3 } } },
  { event: { case: "promptLogprobs", value: { tokens: [{ tokenId: 5, logprob: -1.5 }, { tokenId: 6, logprob: -0.5 }] } } },
  { event: { case: "delta", value: { tokenIds: [1], text: "a" } }, choiceIndex: 1 },
  { event: { case: "delta", value: { tokenIds: [2], text: "b" } } },
  { event: { case: "delta", value: { tokenIds: [3], text: "c" } }, choiceIndex: 1 },
  { event: { case: "finished", value: { reason: FinishReason.EOS } } },
  { event: { case: "finished", value: { reason: FinishReason.LENGTH } }, choiceIndex: 1 },
];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *generate(req: GenerateRequest) {
          seen.push(req);
          for (const res of req.n === 2 ? choicesScript : script) yield res;
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("collect gathers text, reasoning, streamed pieces and complete calls; the request carries the tools", async () => {
  const client = connect(local);
  try {
    const turn = [{ role: "user", content: "Weather in Paris?" }];
    const r = await client.generateText({ prompt: chatPrompt(turn, { tools, toolChoice: "required", enableThinking: false }) });
    assert.equal(r.text, "Let me check.");
    assert.equal(r.reasoning, "The user wants the weather.");
    assert.deepEqual(r.tokenIds, [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(r.toolCalls.map((c) => [c.id, c.name, c.argumentsJson]), [["call_x", "get_weather", '{"city": "Paris"}']]);
    assert.deepEqual(r.streamedToolCalls.map((c) => [c.id, c.name, c.argumentsJson]), [["call_x", "get_weather", '{"city": "Paris"}']]);
    assert.equal(r.finished?.reason, FinishReason.TOOL_CALLS);

    const [req] = seen;
    assert.equal(req.prompt.case, "chat");
    const chat = req.prompt.value as ChatMessages;
    assert.deepEqual(chat.tools.map((t) => [t.name, JSON.parse(t.parametersJsonSchema).required]), [["get_weather", ["city"]], ["get_time", ["zone"]]]);
    assert.equal(chat.toolChoice?.mode, ToolChoiceMode.REQUIRED);
    assert.equal(chat.enableThinking, false);
    assert.equal(chat.parallelToolCalls, undefined, "unset: the server's default");

    // The next turn: the assistant's calls and a "tool" message per call.
    const next = [...turn, assistantMessage(r), ...r.toolCalls.map((c) => toolMessage(c, { sky: "clear" }))];
    await client.generateText({ prompt: chatPrompt(next, { tools, toolChoice: "none" }) });
    const again = seen[1].prompt.value as ChatMessages;
    assert.deepEqual(again.messages.map((m) => [m.role, m.toolCallId, m.toolCalls.map((c) => c.id)]), [
      ["user", "", []],
      ["assistant", "", ["call_x"]],
      ["tool", "call_x", []],
    ]);
    assert.equal(again.messages[1].reasoning, "The user wants the weather.");
    assert.equal(again.messages[2].content, '{"sky":"clear"}');
    assert.equal(again.toolChoice?.mode, ToolChoiceMode.NONE);
  } finally {
    client.close();
  }
});

test("collect gathers each choice by choiceIndex and the prompt's logprobs", async () => {
  const client = connect(local);
  try {
    const r = await client.generateText({ prompt: { case: "text", value: "x" }, n: 2, promptLogprobs: 0 });
    assert.deepEqual(r.promptLogprobs.map((t) => [t.tokenId, t.logprob]), [[5, -1.5], [6, -0.5]]);
    assert.deepEqual(r.choices.map((c) => [c.index, c.tokenIds, c.text, c.finished?.reason]), [
      [0, [2], "b", FinishReason.EOS],
      [1, [1, 3], "ac", FinishReason.LENGTH],
    ]);
    assert.deepEqual([r.tokenIds, r.text, r.finished?.reason], [[2], "b", FinishReason.EOS], "its own fields are the first choice's");
    assert.equal(seen[seen.length - 1].promptLogprobs, 0);
  } finally {
    client.close();
  }
});

// Live: a server whose ListModels has a model named "tools" (the CI fixture server's
// tool-capable model, random weights: it calls tools only when tool choice makes it).

const NO_TOOLS_MODEL = 'the server has no model named "tools" (the fixture server\'s tool-capable model; the default server never has one)';

async function toolsModel(client: MlxClient): Promise<string | undefined> {
  const { all } = await discover(client);
  return all.find((m) => m.name === "tools")?.name;
}

// One call per answer: with random weights, parallel calls go on until maxTokens cuts one short.
function turn(model: string, choice: Parameters<typeof toolChoice>[0], parallelToolCalls = false) {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  return {
    model,
    prompt: chatPrompt(messages, { tools, toolChoice: choice, enableThinking: false, parallelToolCalls }),
    stopping: { maxTokens: 96 },
  };
}

function checkCalls(calls: ToolCall[], names: string[]): void {
  assert.ok(calls.length >= 1, "at least one call");
  for (const call of calls) {
    assert.ok(names.includes(call.name), `${call.name} is one of ${names}`);
    assert.ok(call.id.length > 0, "the call has an id");
    const args = JSON.parse(call.argumentsJson);
    assert.equal(typeof args, "object");
    assert.ok(args !== null && !Array.isArray(args), call.argumentsJson);
    assert.equal(typeof args[required[call.name]], "string", call.argumentsJson);
  }
}

liveTest("tool choice REQUIRED: the answer ends TOOL_CALLS with calls of the given tools", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const model = await toolsModel(client);
    if (!model) return t.skip(NO_TOOLS_MODEL);
    const info = await client.getModelInfo(model);
    assert.equal(info.capabilities?.chat?.toolCalling, true);
    const events: GenerateResponse[] = [];
    for await (const res of client.generate(turn(model, "required"))) events.push(res);
    const r = await client.generateText(turn(model, "required"));
    assert.equal(r.finished?.reason, FinishReason.TOOL_CALLS, JSON.stringify(r.text));
    checkCalls(r.toolCalls, Object.keys(required));
    // Greedy: the streamed run made the same calls, piece by piece.
    const streamed = events.flatMap((e) => (e.event.case === "delta" ? e.event.value.toolCalls : []));
    assert.deepEqual(streamed.map((c) => [c.name, c.argumentsJson]), r.toolCalls.map((c) => [c.name, c.argumentsJson]));
    assert.deepEqual(r.streamedToolCalls.map((c) => c.name), r.toolCalls.map((c) => c.name));
  } finally {
    client.close();
  }
});

liveTest("tool choice FUNCTION: the call is of that function", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const model = await toolsModel(client);
    if (!model) return t.skip(NO_TOOLS_MODEL);
    const r = await client.generateText(turn(model, { function: "get_time" }));
    assert.equal(r.finished?.reason, FinishReason.TOOL_CALLS, JSON.stringify(r.text));
    checkCalls(r.toolCalls, ["get_time"]);
    assert.equal(r.toolCalls.length, 1, "parallelToolCalls false: one call");
  } finally {
    client.close();
  }
});

liveTest("tool choice NONE: no calls", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const model = await toolsModel(client);
    if (!model) return t.skip(NO_TOOLS_MODEL);
    const r = await client.generateText({ ...turn(model, "none"), stopping: { maxTokens: 24 } });
    assert.deepEqual(r.toolCalls, []);
    assert.notEqual(r.finished?.reason, FinishReason.TOOL_CALLS);
  } finally {
    client.close();
  }
});

liveTest("tools for a model without tool calling: FAILED_PRECONDITION", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const { all } = await discover(client);
    const plain = all.find((m) => m.kind === ModelKind.GENERATION && m.hasChatTemplate && !m.capabilities?.chat?.toolCalling);
    if (!plain) return t.skip("every chat model of the server has tool calling");
    let failure: ConnectError | undefined;
    try {
      await client.generateText({ ...turn(plain.name, "auto"), stopping: { maxTokens: 4 } });
    } catch (err) {
      failure = ConnectError.from(err);
    }
    assert.equal(failure?.code, Code.FailedPrecondition, String(failure));
    assert.equal(errorDetails(failure).code, Code.FailedPrecondition);
  } finally {
    client.close();
  }
});
