// Tests against a live server at MLXGRPC_ADDRESS (any server: the models come from
// ListModels); skipped when it is unset, failed under MLXGRPC_REQUIRE_LIVE=1.
import { after, before, describe } from "node:test";
import assert from "node:assert/strict";

import {
  Code,
  ConnectError,
  EmbeddingType,
  FinishReason,
  ModelKind,
  SpeculationMode,
  Truncation,
  connect,
  cosineSimilarity,
  embeddingFloats,
  errorDetails,
  hamming,
  prediction,
  speculation,
  unpackBits,
  type GenerateResponse,
  type MlxClient,
  type ModelInfo,
} from "../index.js";
import { address, discover, exact, liveTest, release, saturate, sleep, token, unavailable, type Served } from "./support.js";

async function events(client: MlxClient, maxTokens: number, prompt = "The quick brown fox"): Promise<GenerateResponse[]> {
  const out: GenerateResponse[] = [];
  for await (const res of client.generate({ prompt: { case: "text", value: prompt }, stopping: exact(maxTokens) })) {
    out.push(res);
  }
  return out;
}

async function expectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  assert.fail("expected the call to fail");
}

// Copy-heavy: the continuation repeats text the prompt holds, which prompt lookup drafts.
const passage =
  "The lighthouse keeper climbed the narrow stairs every evening at dusk, lit the great lamp, " +
  "and wrote the names of the ships that passed in a worn leather book.";
const copyPrompt = `Repeat exactly: ${passage}\n${passage}\n`;

// Seventy short texts: a packed Embed of them is at most ceil(70 / 64) = 2 messages.
const topics = ["rivers", "bread", "the stock market", "mountains", "music", "a cat", "rain", "trains", "chess", "the sea"];
const seventy = Array.from({ length: 70 }, (_, i) => `Note ${i}: a short sentence about ${topics[i % topics.length]}.`);

const long = { prompt: { case: "text" as const, value: "Once upon a time" }, stopping: exact(2000) };

describe("live server", () => {
  let client: MlxClient;
  let served: Served;
  let generator: ModelInfo;
  before(async () => {
    if (!address) return;
    client = connect(address, { token, timeoutMs: 120_000 });
    served = await discover(client);
    assert.ok(served.generator, "the server serves a generation model");
    generator = served.generator;
  });
  after(() => client?.close());

  liveTest("greedy Generate is deterministic: started, 8 tokens, finished LENGTH", async () => {
    const runs = [await events(client, 8), await events(client, 8)];
    const ids: number[][] = [];
    for (const evs of runs) {
      const first = evs[0].event;
      const last = evs[evs.length - 1].event;
      assert.equal(first.case, "started");
      assert.ok(first.value.promptTokens > 0, "prompt_tokens > 0");
      assert.ok(first.value.requestId.length > 0);
      assert.equal(first.value.model, generator.name);
      assert.equal(last.case, "finished");
      assert.equal(last.value.reason, FinishReason.LENGTH);
      assert.equal(last.value.usage?.completionTokens, 8);
      assert.equal(last.value.usage?.promptTokens, first.value.promptTokens);
      const middle = evs.slice(1, -1);
      assert.ok(middle.every((e) => e.event.case === "delta"), "only deltas between started and finished");
      ids.push(middle.flatMap((e) => (e.event.case === "delta" ? e.event.value.tokenIds : [])));
    }
    assert.equal(ids[0].length, 8);
    assert.deepEqual(ids[0], ids[1]);
    assert.ok(ids[0].every((id) => id >= 0 && id < generator.vocabSize));
  });

  liveTest("collect (generateText) gathers the same tokens, and text equal to their detokenization", async () => {
    const call = client.generate({ prompt: { case: "text", value: "The quick brown fox" }, stopping: exact(8) });
    const r = await call.collect();
    const evs = await events(client, 8);
    const ids = evs.flatMap((e) => (e.event.case === "delta" ? e.event.value.tokenIds : []));
    assert.deepEqual(r.tokenIds, ids);
    assert.equal(r.requestId, call.requestId);
    assert.equal(r.started?.requestId, call.requestId);
    assert.equal(r.finished?.reason, FinishReason.LENGTH);
    const detok = await client.raw.detokenize({ tokenIds: r.tokenIds });
    assert.equal(r.text, detok.text);
  });

  liveTest("seeded sampling is reproducible; chat prompts are templated", async (t) => {
    if (!generator.hasChatTemplate) return t.skip(`${generator.name} has no chat template`);
    const req = {
      prompt: { case: "chat" as const, value: { messages: [{ role: "user", content: "Hi there" }] } },
      sampling: { temperature: 1.0, seed: 1234n },
      stopping: exact(6),
    };
    const a = await client.generateText(req);
    const b = await client.generateText(req);
    assert.equal(a.tokenIds.length, 6);
    assert.deepEqual(a.tokenIds, b.tokenIds);
    const tok = await client.raw.tokenize({ text: "Hi there" });
    assert.ok((a.started?.promptTokens ?? 0) > tok.tokenIds.length, "chat template adds tokens");
  });

  liveTest("n = 2 with a seed: two choices, each ending with its finished event, each its seed's alone", async () => {
    const prompt = { case: "text" as const, value: "Once upon a time" };
    const sampling = (seed: bigint) => ({ temperature: 1.0, seed });
    const evs: GenerateResponse[] = [];
    const call = client.generate({ prompt, n: 2, sampling: sampling(7n), stopping: exact(6) });
    for await (const res of call) evs.push(res);
    assert.equal(evs[0].event.case, "started");
    assert.equal(evs[evs.length - 1].event.case, "finished");
    for (const index of [0, 1]) {
      const mine = evs.slice(1).filter((e) => e.choiceIndex === index);
      const last = mine[mine.length - 1].event;
      assert.ok(mine.slice(0, -1).every((e) => e.event.case === "delta"), `choice ${index}: deltas, then finished`);
      assert.equal(last.case, "finished");
      assert.equal(last.value.reason, FinishReason.LENGTH);
      assert.equal(last.value.usage?.completionTokens, 6);
    }
    const r = await client.generateText({ prompt, n: 2, sampling: sampling(7n), stopping: exact(6) });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    assert.deepEqual(r.tokenIds, r.choices[0].tokenIds);
    // Choice i of a request seeded s is the request seeded s + i alone.
    for (const c of r.choices) {
      const alone = await client.generateText({ prompt, sampling: sampling(7n + BigInt(c.index)), stopping: exact(6) });
      assert.equal(c.tokenIds.length, 6);
      assert.deepEqual([c.tokenIds, c.text], [alone.tokenIds, alone.text]);
    }
  });

  liveTest("promptLogprobs: one event before the first delta, prompt_tokens - 1 entries", async () => {
    const text = "The quick brown fox jumps over";
    const evs: GenerateResponse[] = [];
    for await (const res of client.generate({ prompt: { case: "text", value: text }, promptLogprobs: 2, stopping: exact(3) })) {
      evs.push(res);
    }
    const at = evs.findIndex((e) => e.event.case === "promptLogprobs");
    const firstDelta = evs.findIndex((e) => e.event.case === "delta");
    assert.ok(at > 0 && at < firstDelta, `prompt_logprobs at ${at}, first delta at ${firstDelta}`);
    const started = evs[0].event;
    const got = evs[at].event;
    assert.ok(started.case === "started" && got.case === "promptLogprobs");
    const ids = (await client.raw.tokenize({ text, addSpecialTokens: true })).tokenIds;
    assert.equal(started.value.promptTokens, ids.length);
    assert.deepEqual(got.value.tokens.map((t) => t.tokenId), ids.slice(1), "every prompt token but the first");
    for (const t of got.value.tokens) {
      assert.ok(t.logprob <= 0 && t.topLogprobs.length === 2 && t.topLogprobs[0].logprob >= t.topLogprobs[1].logprob);
    }
    const r = await client.generateText({ prompt: { case: "text", value: text }, promptLogprobs: 2, stopping: exact(3) });
    assert.equal(r.promptLogprobs.length, ids.length - 1);
  });

  liveTest("speculation never changes the output; usage counts the drafts", async (t) => {
    const run = (mode: "off" | "ngram") =>
      client.generateText({
        prompt: { case: "text", value: copyPrompt }, // no sampling: greedy
        stopping: exact(32),
        speculation: speculation(mode, mode === "off" ? 0 : 6),
      });
    const off = await run("off");
    assert.equal(off.tokenIds.length, 32);
    assert.equal(off.finished?.usage?.draftTokens, 0);
    assert.equal(off.finished?.usage?.acceptedDraftTokens, 0);
    if (!generator.capabilities?.speculation?.modes.includes(SpeculationMode.NGRAM)) {
      return t.skip(`${generator.name} does not speculate with NGRAM`);
    }
    const ngram = await run("ngram");
    assert.deepEqual(ngram.tokenIds, off.tokenIds);
    assert.equal(ngram.text, off.text);
    const usage = ngram.finished?.usage;
    assert.ok(usage, "finished with usage");
    assert.ok(usage.draftTokens >= usage.acceptedDraftTokens && usage.acceptedDraftTokens >= 0, JSON.stringify(usage));
    assert.equal(usage.completionTokens, 32);
  });

  liveTest("a prediction never changes the output; usage counts its tokens", async (t) => {
    if (!generator.capabilities?.speculation?.externalTokens) {
      return t.skip(`${generator.name} does not verify predicted tokens`);
    }
    const run = (predicted?: string | number[]) =>
      client.generateText({
        prompt: { case: "text", value: copyPrompt }, // no sampling: greedy
        stopping: { maxTokens: 24 },
        prediction: predicted === undefined ? undefined : prediction(predicted),
      });
    const plain = await run();
    assert.ok(plain.text.length > 0, "no output to predict");
    assert.equal(plain.finished?.usage?.acceptedPredictionTokens, 0);
    assert.equal(plain.finished?.usage?.rejectedPredictionTokens, 0);
    for (const predicted of [plain.text, plain.tokenIds]) {
      const r = await run(predicted);
      assert.deepEqual(r.tokenIds, plain.tokenIds);
      assert.equal(r.text, plain.text);
      const usage = r.finished?.usage;
      assert.ok(usage, "finished with usage");
      assert.ok(usage.acceptedPredictionTokens > 0, JSON.stringify(usage));
      assert.ok(usage.acceptedPredictionTokens + usage.rejectedPredictionTokens <= usage.draftTokens, JSON.stringify(usage));
    }
  });

  liveTest("a prediction with speculation off is INVALID_ARGUMENT", async (t) => {
    if (!generator.capabilities?.speculation?.externalTokens) {
      return t.skip(`${generator.name} does not verify predicted tokens`);
    }
    const err = await expectError(
      client.generateText({
        prompt: { case: "text", value: copyPrompt },
        stopping: { maxTokens: 4 },
        speculation: speculation("off"),
        prediction: prediction(passage),
      }),
    );
    assert.equal(err.code, Code.InvalidArgument, err.message);
    assert.deepEqual(errorDetails(err).fieldViolations.map((v) => v.field), ["prediction"]);
  });

  liveTest("Tokenize then Detokenize round-trips a text", async () => {
    const text = "Hello world, this is a test.";
    const t = await client.raw.tokenize({ text });
    assert.ok(t.tokenIds.length > 0);
    assert.equal(t.tokens.length, t.tokenIds.length);
    const d = await client.raw.detokenize({ tokenIds: t.tokenIds });
    assert.equal(d.text, text);
  });

  liveTest("Embed: one normalized vector per input, similar texts closer than unrelated ones", async (t) => {
    const embedder = served.embedder;
    if (!embedder) return unavailable(t, "the server has no embedding model");
    const inputs = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."];
    const res = await client.embed({ model: embedder.name, inputs });
    assert.deepEqual(res.map((r) => r.index), [0, 1, 2]);
    for (const r of res) {
      assert.equal(r.embedding.length, embedder.embeddingDimensions);
      const norm = Math.sqrt(r.embedding.reduce((s, x) => s + x * x, 0));
      assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
      assert.ok(r.tokens > 0);
    }
    const similar = cosineSimilarity(res[0].embedding, res[1].embedding);
    const unrelated = cosineSimilarity(res[0].embedding, res[2].embedding);
    assert.ok(similar > unrelated + 0.2, `similar ${similar} vs unrelated ${unrelated}`);
    const [short] = await client.embed({ model: embedder.name, inputs: inputs.slice(0, 1), dimensions: 64 });
    assert.equal(short.embedding.length, 64);
  });

  liveTest("Embed truncation: a long input is cut by default, refused with Truncation.NONE", async (t) => {
    const embedder = served.embedder;
    if (!embedder) return unavailable(t, "the server has no embedding model");
    // Two words a token at least: twice the model's input limit, within its byte limit.
    const inputs = ["A short sentence.", "word ".repeat(2 * embedder.contextLength)];
    const cut = await client.embed({ inputs }); // the server's default embedding model
    assert.deepEqual(cut.map((r) => r.index), [0, 1]);
    assert.equal(cut[1].tokens, embedder.contextLength, "cut to the model's limit (Truncation.END, the default)");
    const end = await client.embed({ inputs, truncate: Truncation.END });
    assert.equal(end[1].tokens, embedder.contextLength);
    const err = await expectError(client.embed({ inputs, truncate: Truncation.NONE }));
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["inputs[1]"], "names the long input");
    assert.match(d.message, new RegExp(`${embedder.contextLength}`), "says the limit");
    const [fits] = await client.embed({ inputs: inputs.slice(0, 1), truncate: Truncation.NONE });
    assert.ok(fits.tokens > 0 && fits.tokens < embedder.contextLength);
  });

  liveTest("packed Embed: float32 equals the per-input vectors in at most 2 messages, int8 and float16 close", async (t) => {
    const embedder = served.embedder;
    if (!embedder) return unavailable(t, "the server has no embedding model");
    const model = embedder.name;
    const plain = await client.embed({ model, inputs: seventy });
    const packed = await client.embedPacked({ model, inputs: seventy });
    assert.equal(packed.type, EmbeddingType.FLOAT32);
    assert.equal(packed.vectors.length, 70);
    assert.equal(packed.dimensions, embedder.embeddingDimensions);
    assert.ok(packed.messages >= 1 && packed.messages <= 2, `${packed.messages} messages`);
    assert.deepEqual(packed.vectors, plain.map((r) => Float32Array.from(r.embedding)), "the same float32 values");
    assert.deepEqual(packed.tokens, plain.map((r) => r.tokens));

    const int8 = await client.embedPacked({ model, inputs: seventy, embeddingType: "int8" });
    assert.equal(int8.type, EmbeddingType.INT8);
    assert.ok(int8.messages <= 2);
    if (int8.type !== EmbeddingType.INT8) return;
    assert.equal(int8.scales.length, 70);
    embeddingFloats(int8).forEach((v, i) => {
      const c = cosineSimilarity(v, plain[i].embedding);
      assert.ok(c >= 0.999, `input ${i}: int8 cosine ${c}`);
    });

    const half = await client.embedPacked({ model, inputs: seventy, embeddingType: EmbeddingType.FLOAT16 });
    assert.equal(half.type, EmbeddingType.FLOAT16);
    (half.vectors as Float32Array[]).forEach((v, i) =>
      v.forEach((x, j) => assert.ok(Math.abs(x - plain[i].embedding[j]) < 1e-3, `input ${i} value ${j}`)),
    );

    const err = await expectError(client.embed({ model, inputs: seventy.slice(0, 2), embeddingType: EmbeddingType.INT8 }));
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["embedding_type"]);
  });

  liveTest("packed Embed ubinary: the signs of the float32 values, 100 dimensions in 13 bytes", async (t) => {
    const embedder = served.embedder;
    if (!embedder) return unavailable(t, "the server has no embedding model");
    const inputs = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."];
    const plain = await client.embed({ model: embedder.name, inputs, dimensions: 100 });
    const bits = await client.embedPacked({ model: embedder.name, inputs, dimensions: 100, embeddingType: "ubinary" });
    assert.deepEqual([bits.type, bits.dimensions, bits.messages], [EmbeddingType.UBINARY, 100, 1]);
    const vectors = bits.vectors as Uint8Array[];
    vectors.forEach((v, i) => {
      assert.equal(v.length, 13);
      assert.equal(v[12] & 0x0f, 0, "unused low bits zero");
      assert.deepEqual(unpackBits(v, 100), Uint8Array.from(plain[i].embedding, (x) => (x > 0 ? 1 : 0)));
    });
    const [food, bread, stocks] = vectors;
    assert.ok(hamming(food, bread) < hamming(food, stocks));
  });

  liveTest("invalid temperature: INVALID_ARGUMENT with BadRequest and ErrorInfo details", async () => {
    const err = await expectError(
      client.generateText({ prompt: { case: "text", value: "hi" }, sampling: { temperature: -1 }, stopping: { maxTokens: 4 } }),
    );
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["sampling.temperature"]);
    assert.equal(d.errorInfo?.domain, "mlxgrpc.v1");
    assert.equal(d.errorInfo?.reason, "INVALID_FIELD");
    assert.equal(d.errorInfo?.metadata["field"], "sampling.temperature");
    assert.equal(d.retryDelayMs, undefined);
  });

  liveTest("unknown model: NOT_FOUND", async () => {
    const gen = await expectError(
      client.generateText({ model: "no-such-model", prompt: { case: "text", value: "hi" }, stopping: { maxTokens: 1 } }),
    );
    assert.equal(gen.code, Code.NotFound);
    const info = await expectError(client.getModelInfo("no-such-model"));
    assert.equal(info.code, Code.NotFound);
    assert.equal(errorDetails(info).errorInfo?.domain, "mlxgrpc.v1");
  });

  liveTest("Cancel RPC ends a long stream with FINISH_REASON_CANCELLED", async () => {
    const call = client.generate(long);
    let deltas = 0;
    let cancelled: boolean | undefined;
    let last: GenerateResponse | undefined;
    for await (const res of call) {
      last = res;
      if (res.event.case === "delta" && ++deltas === 3) cancelled = await call.cancel();
    }
    assert.equal(cancelled, true);
    assert.equal(last?.event.case, "finished");
    if (last?.event.case === "finished") {
      assert.equal(last.event.value.reason, FinishReason.CANCELLED);
      assert.ok((last.event.value.usage?.completionTokens ?? 0) < 2000);
    }
    assert.equal(await client.cancel(call.requestId), false, "nothing left to cancel");
  });

  liveTest("another caller cancels by the client-assigned id before any event arrived", async () => {
    const call = client.generate(long);
    const other = connect(address!, { token, timeoutMs: 30_000 });
    try {
      let found = false;
      for (let i = 0; i < 200 && !found; i++) {
        found = await other.cancel(call.requestId);
        if (!found) await sleep(20);
      }
      assert.ok(found, "the request was found by its id");
      const r = await call.collect();
      assert.equal(r.finished?.reason, FinishReason.CANCELLED);
    } finally {
      other.close();
    }
  });

  liveTest("aborting the call client-side gives CANCELLED", async () => {
    const call = client.generate(long);
    let deltas = 0;
    const err = await expectError(
      (async () => {
        for await (const res of call) if (res.event.case === "delta" && ++deltas === 3) call.abort();
      })(),
    );
    assert.equal(err.code, Code.Canceled);
    assert.equal(deltas, 3);
  });

  liveTest("breaking out of the loop cancels the request on the server", async () => {
    const call = client.generate(long);
    let deltas = 0;
    for await (const res of call) if (res.event.case === "delta" && ++deltas === 2) break;
    // A 2000-token generation runs for seconds; the server drops it as soon as the stream is reset.
    const t0 = Date.now();
    while (await client.cancel(call.requestId)) {
      assert.ok(Date.now() - t0 < 2000, "request still running 2 s after the client dropped it");
      await sleep(25);
    }
  });

  liveTest("Cancel of an unknown request id returns false", async () => {
    assert.equal(await client.cancel("no-such-request"), false);
  });

  liveTest("default deadline applies: DEADLINE_EXCEEDED", async () => {
    const short = connect(address!, { token, timeoutMs: 200 });
    try {
      const err = await expectError(short.generateText(long));
      assert.equal(err.code, Code.DeadlineExceeded);
    } finally {
      short.close();
    }
  });

  liveTest("bearer token is sent as authorization metadata", async () => {
    // A server without tokens takes any; one with tokens takes $MLXGRPC_TOKEN only.
    const sent = token ?? "s3cret";
    const seen: (string | null)[] = [];
    const authed = connect(address!, {
      token: sent,
      interceptors: [
        (next) => (req) => {
          seen.push(req.header.get("authorization"));
          return next(req);
        },
      ],
    });
    try {
      const info = await authed.getModelInfo();
      assert.equal(info.name, generator.name);
      assert.deepEqual(seen, [`Bearer ${sent}`]);
    } finally {
      authed.close();
    }
  });

  liveTest("a server with tokens refuses a call without one or with a wrong one: UNAUTHENTICATED", async (t) => {
    if (!token) {
      t.skip("MLXGRPC_TOKEN is not set: the server may have no tokens");
      return;
    }
    for (const other of [undefined, `${token}-not`]) {
      const stranger = connect(address!, { token: other, timeoutMs: 30_000, maxAttempts: 1 });
      try {
        const err = await stranger.getModelInfo().then(
          () => assert.fail(`token ${other} accepted`),
          (e: unknown) => ConnectError.from(e),
        );
        assert.equal(err.code, Code.Unauthenticated, String(other));
      } finally {
        stranger.close();
      }
    }
  });

  liveTest("GetModelInfo and ListModels describe the served models, the default first", async () => {
    const info = await client.getModelInfo();
    assert.equal(info.name, served.all[0].name);
    assert.equal(info.kind, ModelKind.GENERATION);
    assert.ok(info.vocabSize > 0 && info.contextLength > 0);
    assert.equal(info.capabilities?.generation, true);
    for (const m of served.all) {
      const again = await client.getModelInfo(m.name);
      assert.equal(again.kind, m.kind);
      if (m.kind !== ModelKind.EMBEDDING) continue;
      if (again.capabilities?.rerank || again.capabilities?.classify || again.capabilities?.sparseEmbeddings) {
        assert.equal(again.capabilities.embeddings, false, `${m.name}: a reranker, classifier or SPLADE model does not embed`);
      } else {
        assert.ok(again.embeddingDimensions > 0 && again.capabilities?.embeddings, m.name);
      }
    }
  });

  liveTest("getLoad reports every generation model and counts its tokens", async () => {
    const loads = await client.getLoad();
    const generators = served.all.filter((m) => m.kind === ModelKind.GENERATION).map((m) => m.name);
    assert.deepEqual(loads.map((l) => l.model), generators, "generation models only, the default first");
    const before = loads[0];
    assert.ok(before.maxRunningRequests > 0);
    assert.ok(before.memoryBudgetBytes > 0n);
    await client.generateText({ prompt: { case: "text", value: "Counting for the load report" }, stopping: exact(5) });
    const [after] = await client.getLoad(generator.name);
    assert.ok(after.generatedTokens - before.generatedTokens >= 5n);
    assert.ok(after.generatedTokensPerSecond > 0, "tokens/s right after a generation");
    assert.equal((await expectError(client.getLoad("no-such-model"))).code, Code.NotFound);
    for (const m of served.all.filter((m) => m.kind === ModelKind.EMBEDDING)) {
      assert.equal(errorDetails(await expectError(client.getLoad(m.name))).code, Code.FailedPrecondition);
    }
  });

  liveTest("PlanMemory never plans beyond the model's context", async () => {
    const plan = await client.planMemory(generator.name, 1024n);
    assert.ok(plan && plan.maxSafeContext > 0n && plan.maxSafeContext <= BigInt(generator.contextLength));
  });

  liveTest("a full admission queue is retried after the server's delay", async () => {
    const { running, refusal } = await saturate(client, generator.name);
    const retries: [Code, string, number][] = [];
    const retrying = connect(address!, {
      token,
      timeoutMs: 120_000,
      onRetry: (d, delayMs) => {
        retries.push([d.code, d.errorInfo?.reason ?? "", delayMs]);
        void release(client, running, generator.name); // room for the next attempt
      },
    });
    try {
      const d = errorDetails(refusal);
      assert.equal(d.code, Code.ResourceExhausted);
      assert.equal(d.errorInfo?.reason, "QUEUE_FULL");
      assert.ok((d.retryDelayMs ?? 0) > 0);
      const t0 = Date.now();
      const r = await retrying.generateText({ prompt: { case: "text", value: "Hello" }, stopping: exact(3) });
      assert.deepEqual(retries, [[Code.ResourceExhausted, "QUEUE_FULL", d.retryDelayMs]]);
      assert.ok(Date.now() - t0 >= d.retryDelayMs!, "waited the server's delay");
      assert.equal(r.finished?.reason, FinishReason.LENGTH);
      assert.equal(r.tokenIds.length, 3);
    } finally {
      retrying.close();
      await release(client, running, generator.name);
    }
  });
});
