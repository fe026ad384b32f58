// Priority: the client's default and a request's own reach an in-process server
// (offline), and against a live server a priority never changes the output.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  FinishReason,
  InferenceService,
  MAX_PRIORITY,
  connect,
  cosineSimilarity,
  type EmbedRequest,
  type GenerateRequest,
  type TenantLoad,
} from "../index.js";
import { address, discover, exact, liveTest, tenant, token } from "./support.js";

const seen: number[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *generate(req: GenerateRequest) {
          seen.push(req.priority);
          yield { event: { case: "finished", value: { reason: FinishReason.LENGTH } } };
        },
        async *embed(req: EmbedRequest) {
          seen.push(req.priority);
          yield { index: 0, embedding: [1] };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("the client's default priority fills requests that set none; a request's own wins", async () => {
  seen.length = 0;
  const low = connect(local, { priority: -20 });
  const plain = connect(local);
  try {
    const text = { case: "text" as const, value: "hi" };
    await low.generateText({ prompt: text });
    await low.generateText({ prompt: text, priority: 30 });
    await low.embed(["a"]);
    await low.embed({ inputs: ["a"], priority: 5 });
    await plain.generateText({ prompt: text });
    assert.deepEqual(seen, [-20, 30, -20, 5, 0]);
  } finally {
    low.close();
    plain.close();
  }
  assert.throws(() => connect(local, { priority: MAX_PRIORITY + 1 }), /priority/);
  assert.throws(() => connect(local, { priority: 1.5 }), /priority/);
});

liveTest("a priority never changes the output; GetLoad reports this caller's tenant", async () => {
  const client = connect(address ?? "", { token, timeoutMs: 120_000 });
  try {
    const { generator } = await discover(client);
    assert.ok(generator, "the server serves a generation model");
    const req = { model: generator.name, prompt: { case: "text" as const, value: "The quick brown fox" }, stopping: exact(8) };
    const plain = await client.generateText(req);
    for (const priority of [10, -10]) {
      const r = await client.generateText({ ...req, priority });
      assert.deepEqual([r.tokenIds, r.text], [plain.tokenIds, plain.text]);
    }
    const [load] = await client.getLoad(generator.name);
    // This caller counts under its token's tenant (without tokens: the empty name), and sees it.
    const mine: TenantLoad[] = load.tenants.filter((t) => t.tenant === tenant);
    assert.equal(mine.length, 1);
    assert.ok(mine[0].generatedTokens >= 24n, String(mine[0].generatedTokens));
    const { embedder } = await discover(client);
    if (embedder) {
      const [a] = await client.embed({ model: embedder.name, inputs: ["A man is eating food."], priority: -50 });
      const [b] = await client.embed({ model: embedder.name, inputs: ["A man is eating food."] });
      assert.ok(cosineSimilarity(a.embedding, b.embedding) > 0.999);
    }
  } finally {
    client.close();
  }
});
