// Example: node dist/example.js   (server address from MLXGRPC_ADDRESS, default localhost:50051;
// MLXGRPC_TOKEN, when set, is the bearer token of every call)
//
// With MLXGRPC_IMAGE set to an image file (PNG, JPEG, WebP or GIF), it runs the image step
// instead: the image and a question go to MLXGRPC_MODEL (default "vision", the test
// fixture's vision-language model) and the streamed answer is printed.
import {
  Code,
  ConnectError,
  FinishReason,
  GraphMethod,
  ModelKind,
  connect,
  cosineSimilarity,
  errorDetails,
  imageFile,
  jsonSchemaFormat,
  userMessage,
} from "./index.js";

const address = process.env.MLXGRPC_ADDRESS || "localhost:50051";
const client = connect(address, { token: process.env.MLXGRPC_TOKEN || undefined, timeoutMs: 60_000 });
const imagePath = process.env.MLXGRPC_IMAGE;

// 7. The image step: an image (its media type detected from the file) and a question.
async function describeImage(path: string, model: string): Promise<void> {
  const image = await imageFile(path);
  const mediaType = image.part?.case === "image" ? image.part.value.mediaType : "";
  process.stdout.write(`image ${path} (${mediaType}) to ${model}: `);
  try {
    for await (const res of client.generate({
      model,
      prompt: { case: "chat", value: { messages: [userMessage(image, "Describe the image.")] } },
      stopping: { maxTokens: 32 },
    })) {
      const ev = res.event;
      if (ev.case === "started") process.stdout.write(`[${ev.value.promptTokens} prompt tokens] `);
      else if (ev.case === "delta") process.stdout.write(ev.value.text);
      else if (ev.case === "finished") {
        console.log(`\n  finished: ${FinishReason[ev.value.reason]}, ${ev.value.usage?.completionTokens} tokens`);
      }
    }
  } catch (err) {
    const d = errorDetails(err);
    console.log(`\nimage refused: ${Code[d.code]}: ${d.message} (reason ${d.errorInfo?.reason}, fields ${d.fieldViolations.map((v) => v.field).join(", ")})`);
    process.exitCode = 1;
  }
}

try {
  if (imagePath) {
    await describeImage(imagePath, process.env.MLXGRPC_MODEL || "vision");
  } else {
    // 1. Model info.
    const info = await client.getModelInfo();
    console.log(
      `model ${info.name}: kind=${ModelKind[info.kind]} graph=${info.graph?.id} ` +
        `backend=${info.graph?.backend} method=${GraphMethod[info.capabilities?.method ?? 0]} ` +
        `context=${info.contextLength} vocab=${info.vocabSize} dtype=${info.dtype} chat_template=${info.hasChatTemplate}`,
    );

    // 2. Stream a generation, printing text deltas as they arrive.
    process.stdout.write("generate: ");
    for await (const res of client.generate({
      prompt: { case: "chat", value: { messages: [{ role: "user", content: "Say hello." }] } },
      stopping: { maxTokens: 24 },
    })) {
      const ev = res.event;
      if (ev.case === "started") process.stdout.write(`[${ev.value.requestId}, ${ev.value.promptTokens} prompt tokens] `);
      else if (ev.case === "delta") process.stdout.write(JSON.stringify(ev.value.text) + " ");
      else if (ev.case === "finished") {
        const u = ev.value.usage;
        console.log(`\n  finished: ${FinishReason[ev.value.reason]}, ${u?.completionTokens} tokens, ` +
          `${ev.value.timings?.decodeTokensPerSecond.toFixed(1)} tok/s`);
      }
    }

    // 3. A second generation, cancelled with the Cancel RPC after a few deltas.
    const call = client.generate({ prompt: { case: "text", value: "Once upon a time" }, stopping: { maxTokens: 2000, ignoreEos: true } });
    let deltas = 0;
    for await (const res of call) {
      if (res.event.case === "delta" && ++deltas === 3) {
        const cancelled = await call.cancel();
        console.log(`cancel ${call.requestId} after ${deltas} deltas: cancelled=${cancelled}`);
      } else if (res.event.case === "finished") {
        console.log(`  second stream finished: ${FinishReason[res.event.value.reason]} ` +
          `after ${res.event.value.usage?.completionTokens} tokens`);
      }
    }

    // 3b. And one cancelled client-side (aborting the call).
    const call2 = client.generate({ prompt: { case: "text", value: "Twice upon a time" }, stopping: { maxTokens: 2000, ignoreEos: true } });
    deltas = 0;
    try {
      for await (const res of call2) {
        if (res.event.case === "delta" && ++deltas === 3) call2.abort();
      }
    } catch (err) {
      console.log(`client-side abort after ${deltas} deltas: ${Code[ConnectError.from(err).code]}`);
    }

    // 4. Embeddings of two inputs and their cosine similarity.
    const [a, b] = await client.embed(["A man is eating food.", "A man is eating a piece of bread."]);
    console.log(`embed: ${a.embedding.length} dims, cosine similarity ${cosineSimilarity(a.embedding, b.embedding).toFixed(4)}`);

    // 5. Structured output: an answer that validates against a JSON schema.
    const answer = await client.generateText({
      prompt: { case: "chat", value: { messages: [{ role: "user", content: "Where is the Eiffel Tower?" }] } },
      stopping: { maxTokens: 64 },
      responseFormat: jsonSchemaFormat({
        type: "object",
        additionalProperties: false,
        required: ["city", "country"],
        properties: { city: { type: "string", maxLength: 40 }, country: { type: "string", maxLength: 40 } },
      }),
    });
    const reason = answer.finished?.reason ?? FinishReason.UNSPECIFIED;
    console.log(`json schema: ${answer.text} [${FinishReason[reason]}]`);
    if (reason === FinishReason.STOP) console.log("  parsed:", JSON.parse(answer.text));

    // 6. An invalid request and its google.rpc details.
    try {
      await client.generateText({
        prompt: { case: "text", value: "hi" },
        sampling: { temperature: -1 },
        stopping: { maxTokens: 4 },
      });
      throw new Error("expected INVALID_ARGUMENT");
    } catch (err) {
      const d = errorDetails(err);
      console.log(`invalid request: ${Code[d.code]} (${d.code}): ${d.message}`);
      console.log(`  reason=${d.errorInfo?.reason} field violations: ${d.fieldViolations.map((v) => v.field).join(", ")}`);
      if (d.code !== Code.InvalidArgument) process.exitCode = 1;
    }
  }
} finally {
  client.close();
}
