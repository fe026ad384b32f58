// Agent loop: node dist/agent.js   (MLXGRPC_ADDRESS, default localhost:50051; MLXGRPC_MODEL, default "tools";
// MLXGRPC_TOKEN, when set, the bearer token of every call)
//
// One tool (get_weather), a first turn that must call it, the tool run here, and a second
// turn that answers from its result. Exits non-zero unless the first turn ended with calls.
import {
  FinishReason,
  assistantMessage,
  chatPrompt,
  connect,
  tool,
  toolMessage,
  type ChatMessageInit,
  type ToolCall,
} from "./index.js";

const address = process.env.MLXGRPC_ADDRESS || "localhost:50051";
const model = process.env.MLXGRPC_MODEL || "tools";
const client = connect(address, { token: process.env.MLXGRPC_TOKEN || undefined, timeoutMs: 120_000 });

const tools = [
  tool("get_weather", "The current weather in a city.", {
    type: "object",
    properties: { city: { type: "string", maxLength: 16, description: "The city's name." } },
    required: ["city"],
    additionalProperties: false,
  }),
];

// The tool itself, run locally: a fake weather report.
function getWeather(args: { city: string }): object {
  return { city: args.city, temperature_c: 21, sky: "clear" };
}

function run(call: ToolCall): object {
  if (call.name !== "get_weather") return { error: `unknown tool ${call.name}` };
  return getWeather(JSON.parse(call.argumentsJson));
}

async function main(): Promise<number> {
  const info = await client.getModelInfo(model);
  const chat = info.capabilities?.chat;
  console.log(`model ${info.name}: tool calling ${chat?.toolCalling ? `yes (${chat.toolParser})` : "no"}, ` +
    `enforced tool choice ${chat?.toolChoiceEnforced ? "yes" : "no"}, thinking ${chat?.reasoningStart ? "yes" : "no"}`);

  const messages: ChatMessageInit[] = [{ role: "user", content: "What is the weather like in Paris?" }];

  // 1. The model must call a tool (the grammar enforces it), one call in this answer.
  const first = await client.generateText({
    model,
    prompt: chatPrompt(messages, { tools, toolChoice: "required", parallelToolCalls: false, enableThinking: false }),
    stopping: { maxTokens: 96 },
  });
  const reason = first.finished?.reason ?? FinishReason.UNSPECIFIED;
  console.log(`turn 1: ${FinishReason[reason]}, ${first.toolCalls.length} call(s)`);
  for (const call of first.toolCalls) console.log(`  call ${call.id}: ${call.name}(${call.argumentsJson})`);
  if (reason !== FinishReason.TOOL_CALLS || first.toolCalls.length === 0) {
    console.error(`expected FINISH_REASON_TOOL_CALLS and a call; got ${FinishReason[reason]}: ${JSON.stringify(first.text)}`);
    return 1;
  }

  // 2. Run each call locally; send back the assistant's calls and one "tool" message per call.
  messages.push(assistantMessage(first));
  for (const call of first.toolCalls) {
    const result = run(call);
    console.log(`  result ${call.id}: ${JSON.stringify(result)}`);
    messages.push(toolMessage(call, result));
  }

  // 3. The answer, with no more calls.
  const second = await client.generateText({
    model,
    prompt: chatPrompt(messages, { tools, toolChoice: "none", enableThinking: false }),
    stopping: { maxTokens: 48 },
  });
  console.log(`turn 2: ${FinishReason[second.finished?.reason ?? 0]}: ${JSON.stringify(second.text)}`);
  return 0;
}

try {
  process.exitCode = await main();
} finally {
  client.close();
}
