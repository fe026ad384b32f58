// EmbedSparse: the requests embedSparse sends and the SparseVectors it returns, against an
// in-process server (offline), and a live server's "splade" model (see support.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  InferenceService,
  Truncation,
  connect,
  errorDetails,
  sparseDot,
  sparseMap,
  type EmbedSparseRequest,
  type MlxClient,
  type SparseEmbeddings,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

// An in-process server that records the requests and gives each input its distinct characters'
// codes, ascending, each weighing its count (the topK heaviest), answering in reverse order.
const requests: EmbedSparseRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        embedSparse(req: EmbedSparseRequest) {
          requests.push(req);
          const embeddings = req.inputs.map((text, index) => {
            const counts = new Map<number, number>();
            for (const ch of text) counts.set(ch.charCodeAt(0), (counts.get(ch.charCodeAt(0)) ?? 0) + 1);
            let ids = [...counts.keys()].sort((a, b) => counts.get(b)! - counts.get(a)! || a - b);
            if (req.topK) ids = ids.slice(0, req.topK);
            ids.sort((a, b) => a - b);
            return { index, tokens: text.length + 2, tokenIds: ids, weights: ids.map((id) => counts.get(id)!) };
          });
          return { model: req.model || "splade", embeddings: embeddings.reverse() };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("embedSparse sends the inputs and options; the vectors come back in input order", async () => {
  requests.length = 0;
  const client = connect(local, { priority: -20 });
  try {
    const all = await client.embedSparse(["abca", "b"]);
    assert.equal(all.model, "splade");
    assert.deepEqual(all.vectors, [
      { index: 0, tokens: 6, tokenIds: [97, 98, 99], weights: [2, 1, 1] },
      { index: 1, tokens: 3, tokenIds: [98], weights: [1] },
    ]);
    assert.equal(sparseDot(all.vectors[0], all.vectors[1]), 1);
    assert.deepEqual([...sparseMap(all.vectors[0])], [[97, 2], [98, 1], [99, 1]]);
    const top: SparseEmbeddings = await client.embedSparse({
      model: "my-splade",
      inputs: ["abbcc"],
      topK: 2,
      truncate: Truncation.NONE,
      requestId: "s-1",
      priority: 30,
    });
    assert.equal(top.model, "my-splade");
    assert.deepEqual(top.vectors[0].tokenIds, [98, 99]);
    const [plain, full] = requests;
    assert.deepEqual(
      [plain.model, plain.inputs, plain.topK, plain.truncate, plain.requestId, plain.priority],
      ["", ["abca", "b"], 0, Truncation.UNSPECIFIED, "", -20],
      "unset: the server's defaults, the client's priority",
    );
    assert.deepEqual(
      [full.model, full.inputs, full.topK, full.truncate, full.requestId, full.priority],
      ["my-splade", ["abbcc"], 2, Truncation.NONE, "s-1", 30],
    );
  } finally {
    client.close();
  }
});

// Live: a server whose ListModels has a model named "splade" with capabilities.sparseEmbeddings
// (the CI fixture server's SPLADE model, random weights: its weights mean nothing, their form does).

const NO_SPLADE = 'the server has no model named "splade" (the fixture server\'s; the default server never has one)';
const texts = ["Where do rivers flow?", "Rivers flow into lakes and oceans.", "def add(a, b): return a + b"];

async function expectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  assert.fail("expected the call to fail");
}

async function withClient(fn: (client: MlxClient) => Promise<void>): Promise<void> {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    await fn(client);
  } finally {
    client.close();
  }
}

/** One vector per input, in input order: ids ascending within the vocabulary, weights above 0. */
function check(res: SparseEmbeddings, inputs: number, vocab: number): void {
  assert.equal(res.model, "splade");
  assert.deepEqual(res.vectors.map((v) => v.index), [...Array(inputs).keys()], "in input order");
  for (const v of res.vectors) {
    assert.ok(v.tokens > 0 && v.tokenIds.length > 0 && v.tokenIds.length === v.weights.length);
    v.tokenIds.forEach((id, i) => assert.ok(id < vocab && (i === 0 || v.tokenIds[i - 1] < id), "ascending"));
    v.weights.forEach((w) => assert.ok(w > 0, String(w)));
  }
}

liveTest("EmbedSparse: vectors in input order, ids ascending; topK the heaviest", async (t) =>
  withClient(async (client) => {
    const { splade, embedder } = await discover(client);
    if (!splade) return t.skip(NO_SPLADE);
    assert.equal(splade.capabilities?.embeddings, false, "a SPLADE model does not embed");
    assert.equal(splade.embeddingDimensions, 0);
    const full = await client.embedSparse({ model: splade.name, inputs: texts });
    check(full, texts.length, splade.vocabSize);
    const top = await client.embedSparse({ model: splade.name, inputs: texts, topK: 3, priority: 10, requestId: "ts-sparse" });
    check(top, texts.length, splade.vocabSize);
    top.vectors.forEach((v, i) => {
      const all = full.vectors[i];
      const heaviest = all.tokenIds
        .map((id, j) => [all.weights[j], id])
        .sort((a, b) => b[0] - a[0] || a[1] - b[1])
        .slice(0, 3)
        .map(([, id]) => id)
        .sort((a, b) => a - b);
      assert.deepEqual(v.tokenIds, heaviest);
    });
    if (embedder) {
      const err = await expectError(client.embedSparse({ model: embedder.name, inputs: texts }));
      assert.equal(err.code, Code.FailedPrecondition, err.message);
    }
  }),
);

liveTest("EmbedSparse truncation and wrong calls: a long input is cut, or refused with Truncation.NONE; bad topK", async (t) =>
  withClient(async (client) => {
    const { splade } = await discover(client);
    if (!splade) return t.skip(NO_SPLADE);
    const inputs = [texts[0], "word ".repeat(2 * splade.contextLength)];
    const cut = await client.embedSparse({ model: splade.name, inputs });
    assert.equal(cut.vectors[1].tokens, splade.contextLength, "cut to the model's limit (Truncation.END, the default)");
    let d = errorDetails(await expectError(client.embedSparse({ model: splade.name, inputs, truncate: Truncation.NONE })));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["inputs[1]"], "names the long input");
    d = errorDetails(await expectError(client.embedSparse({ model: splade.name, inputs: texts, topK: -1 })));
    assert.deepEqual([d.code, d.fieldViolations.map((v) => v.field)], [Code.InvalidArgument, ["top_k"]]);
    d = errorDetails(await expectError(client.embedSparse({ model: splade.name, inputs: [] })));
    assert.deepEqual([d.code, d.fieldViolations.map((v) => v.field)], [Code.InvalidArgument, ["inputs"]]);
    const err = await expectError(client.embed({ model: splade.name, inputs: ["x"] }));
    assert.equal(err.code, Code.FailedPrecondition, "a SPLADE model does not embed");
  }),
);
