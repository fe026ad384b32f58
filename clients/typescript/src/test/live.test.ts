// Tests against a live server at MLXGRPC_ADDRESS; skipped when it is unset.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  Code,
  ConnectError,
  FinishReason,
  ModelKind,
  connect,
  cosineSimilarity,
  errorDetails,
  type GenerateResponse,
  type MlxClient,
} from "../index.js";

const address = process.env.MLXGRPC_ADDRESS;
const skip = address ? false : "MLXGRPC_ADDRESS is not set";
/** A test that is skipped (not failed) when no server address is given. */
const liveTest = (name: string, fn: () => Promise<void>) => test(name, { skip }, fn);

async function events(client: MlxClient, maxTokens: number, prompt = "The quick brown fox"): Promise<GenerateResponse[]> {
  const out: GenerateResponse[] = [];
  for await (const res of client.generate({ prompt: { case: "text", value: prompt }, stopping: { maxTokens } })) {
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("live server", () => {
  let client: MlxClient;
  before(() => {
    if (address) client = connect(address, { timeoutMs: 120_000 });
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
      assert.equal(first.value.model, "llama");
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
    assert.ok(ids[0].every((id) => id >= 0 && id < 640));
  });

  liveTest("generateText collects the same tokens and text as the deltas' detokenization", async () => {
    const r = await client.generateText({ prompt: { case: "text", value: "The quick brown fox" }, stopping: { maxTokens: 8 } });
    const evs = await events(client, 8);
    const ids = evs.flatMap((e) => (e.event.case === "delta" ? e.event.value.tokenIds : []));
    assert.deepEqual(r.tokenIds, ids);
    assert.equal(r.finished?.reason, FinishReason.LENGTH);
    const detok = await client.raw.detokenize({ tokenIds: r.tokenIds });
    assert.equal(r.text, detok.text);
  });

  liveTest("seeded sampling is reproducible; chat prompts are templated", async () => {
    const req = {
      prompt: { case: "chat" as const, value: { messages: [{ role: "user", content: "Hi there" }] } },
      sampling: { temperature: 1.0, seed: 1234n },
      stopping: { maxTokens: 6 },
    };
    const a = await client.generateText(req);
    const b = await client.generateText(req);
    assert.equal(a.tokenIds.length, 6);
    assert.deepEqual(a.tokenIds, b.tokenIds);
    const tok = await client.raw.tokenize({ text: "Hi there" });
    assert.ok((a.started?.promptTokens ?? 0) > tok.tokenIds.length, "chat template adds tokens");
  });

  liveTest("Tokenize then Detokenize round-trips a text", async () => {
    const text = "Hello world, this is a test.";
    const t = await client.raw.tokenize({ text });
    assert.ok(t.tokenIds.length > 0);
    assert.equal(t.tokens.length, t.tokenIds.length);
    const d = await client.raw.detokenize({ tokenIds: t.tokenIds });
    assert.equal(d.text, text);
  });

  liveTest("Embed: one response per input, 384 normalized floats, semantic similarity", async () => {
    const inputs = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."];
    const res = await client.embed(inputs);
    assert.equal(res.length, 3);
    assert.deepEqual(res.map((r) => r.index), [0, 1, 2]);
    for (const r of res) {
      assert.equal(r.embedding.length, 384);
      const norm = Math.sqrt(r.embedding.reduce((s, x) => s + x * x, 0));
      assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
      assert.ok(r.tokens > 0);
    }
    const similar = cosineSimilarity(res[0].embedding, res[1].embedding);
    const unrelated = cosineSimilarity(res[0].embedding, res[2].embedding);
    assert.ok(similar > 0.7, `similar cosine ${similar}`);
    assert.ok(unrelated < 0.2, `unrelated cosine ${unrelated}`);
  });

  liveTest("Embed dimensions truncates and re-normalizes", async () => {
    const [r] = await client.embed({ inputs: ["A man is eating food."], dimensions: 64 });
    assert.equal(r.embedding.length, 64);
    const norm = Math.sqrt(r.embedding.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
  });

  liveTest("invalid temperature: INVALID_ARGUMENT with BadRequest and ErrorInfo details", async () => {
    const err = await expectError(
      client.generateText({ prompt: { case: "text", value: "hi" }, sampling: { temperature: -1 }, stopping: { maxTokens: 4 } }),
    );
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument);
    assert.ok(d.fieldViolations.some((v) => v.field === "sampling.temperature"), JSON.stringify(d.fieldViolations));
    assert.equal(d.errorInfo?.domain, "mlxgrpc.v1");
    assert.equal(d.errorInfo?.reason, "INVALID_FIELD");
    assert.equal(d.errorInfo?.metadata["field"], "sampling.temperature");
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
    const call = client.generate({ prompt: { case: "text", value: "Once upon a time" }, stopping: { maxTokens: 2000 } });
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

  liveTest("aborting the call client-side gives CANCELLED", async () => {
    const call = client.generate({ prompt: { case: "text", value: "Once upon a time" }, stopping: { maxTokens: 2000 } });
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
    const call = client.generate({ prompt: { case: "text", value: "Once upon a time" }, stopping: { maxTokens: 4000 } });
    let deltas = 0;
    for await (const res of call) if (res.event.case === "delta" && ++deltas === 2) break;
    // A 4000-token generation runs for seconds; the server drops it as soon as the stream is reset.
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
    const short = connect(address!, { timeoutMs: 200 });
    try {
      const err = await expectError(
        short.generateText({ prompt: { case: "text", value: "Once upon a time" }, stopping: { maxTokens: 4000 } }),
      );
      assert.equal(err.code, Code.DeadlineExceeded);
    } finally {
      short.close();
    }
  });

  liveTest("bearer token is sent as authorization metadata", async () => {
    const seen: (string | null)[] = [];
    const authed = connect(address!, {
      token: "s3cret",
      interceptors: [
        (next) => (req) => {
          seen.push(req.header.get("authorization"));
          return next(req);
        },
      ],
    });
    try {
      const info = await authed.getModelInfo();
      assert.equal(info.name, "llama");
      assert.deepEqual(seen, ["Bearer s3cret"]);
    } finally {
      authed.close();
    }
  });

  liveTest("GetModelInfo describes the generation and embedding models", async () => {
    const info = await client.getModelInfo();
    assert.equal(info.name, "llama");
    assert.equal(info.kind, ModelKind.GENERATION);
    assert.equal(info.vocabSize, 640);
    assert.equal(info.contextLength, 4096);
    assert.equal(info.capabilities?.generation, true);
    assert.equal(info.hasChatTemplate, true);
    const emb = await client.getModelInfo("all-minilm-l6-v2");
    assert.equal(emb.kind, ModelKind.EMBEDDING);
    assert.equal(emb.embeddingDimensions, 384);
    assert.equal(emb.capabilities?.embeddings, true);
  });

  liveTest("getLoad reports the generation model and counts its tokens", async () => {
    const [before] = await client.getLoad();
    assert.equal(before.model, "llama");
    assert.equal(before.maxRunningRequests, 4);
    assert.ok(before.memoryBudgetBytes > 0n);
    await client.generateText({ prompt: { case: "text", value: "Counting for the load report" },
      stopping: { maxTokens: 5 } });
    const [after] = await client.getLoad("llama");
    assert.ok(after.generatedTokens - before.generatedTokens >= 5n);
    await assert.rejects(client.getLoad("all-minilm-l6-v2"),
      (err: unknown) => errorDetails(err).code === Code.FailedPrecondition);
  });

  liveTest("ListModels lists both models, the default generation model first", async () => {
    const res = await client.raw.listModels({});
    const names = res.models.map((m) => m.name);
    assert.equal(names[0], "llama");
    assert.ok(names.includes("all-minilm-l6-v2"), names.join(","));
  });
});
