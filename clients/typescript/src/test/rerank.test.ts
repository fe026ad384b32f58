// Rerank and truncation: the requests rerank and embed send and the typed response, against
// an in-process server (offline), and a live server's "reranker" model (see support.ts).
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
  type EmbedRequest,
  type MlxClient,
  type RerankRequest,
  type RerankResponse,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

// An in-process server that records the requests and scores each document by its length.
const reranks: RerankRequest[] = [];
const embeds: EmbedRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        rerank(req: RerankRequest) {
          reranks.push(req);
          const results = req.documents
            .map((d, index) => ({ index, score: d.length / 2, tokens: d.length + 3 }))
            .sort((a, b) => b.score - a.score);
          return { model: req.model || "reranker", results: req.topN ? results.slice(0, req.topN) : results };
        },
        async *embed(req: EmbedRequest) {
          embeds.push(req);
          yield { index: 0, embedding: [1], tokens: 1 };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("rerank sends the query, documents and options; the results come back typed, most relevant first", async () => {
  reranks.length = 0;
  const client = connect(local, { priority: -20 });
  try {
    const documents = ["a", "abcd", "ab"];
    const all = await client.rerank({ query: "q", documents });
    assert.equal(all.model, "reranker");
    assert.deepEqual(all.results.map((r) => [r.index, r.score, r.tokens]), [[1, 2, 7], [2, 1, 5], [0, 0.5, 4]]);
    const top: RerankResponse = await client.rerank({
      model: "my-reranker",
      query: "q",
      documents,
      topN: 2,
      truncate: Truncation.NONE,
      requestId: "rr-1",
      priority: 30,
    });
    assert.equal(top.model, "my-reranker");
    assert.deepEqual(top.results.map((r) => r.index), [1, 2]);
    const [plain, full] = reranks;
    assert.deepEqual(
      [plain.model, plain.query, plain.documents, plain.topN, plain.truncate, plain.requestId, plain.priority],
      ["", "q", documents, 0, Truncation.UNSPECIFIED, "", -20],
      "unset: the server's defaults, the client's priority",
    );
    assert.deepEqual(
      [full.model, full.query, full.documents, full.topN, full.truncate, full.requestId, full.priority],
      ["my-reranker", "q", documents, 2, Truncation.NONE, "rr-1", 30],
    );
  } finally {
    client.close();
  }
});

test("embed sends truncate: unset (the server's default, END), END or NONE", async () => {
  embeds.length = 0;
  const client = connect(local);
  try {
    await client.embed(["a"]);
    await client.embed({ inputs: ["a"], truncate: Truncation.END });
    await client.embed({ inputs: ["a"], truncate: Truncation.NONE });
    assert.deepEqual(embeds.map((r) => r.truncate), [Truncation.UNSPECIFIED, Truncation.END, Truncation.NONE]);
  } finally {
    client.close();
  }
});

// Live: a server whose ListModels has a model named "reranker" with capabilities.rerank (the
// CI fixture server's cross-encoder, random weights: its scores mean nothing, their order does).

const NO_RERANKER = 'the server has no reranking model named "reranker" (the fixture server\'s cross-encoder; the default server never has one)';

const query = "Where does the cat sleep?";
const documents = [
  "The cat sleeps on the warm windowsill every afternoon.",
  "Stock markets fell sharply after the announcement.",
  "A recipe for bread needs flour, water, salt and yeast.",
  "Cats often sleep in boxes and baskets.",
  "The train to the airport leaves every ten minutes.",
];

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

liveTest("Rerank: every document once, by descending score; topN the first of the full ranking", async (t) =>
  withClient(async (client) => {
    const { reranker, embedder } = await discover(client);
    if (!reranker) return t.skip(NO_RERANKER);
    assert.equal(reranker.capabilities?.embeddings, false, "a reranker does not embed");
    const full = await client.rerank({ model: reranker.name, query, documents });
    assert.equal(full.model, reranker.name);
    assert.equal(full.results.length, documents.length);
    assert.deepEqual(full.results.map((r) => r.index).sort((a, b) => a - b), documents.map((_, i) => i), "a permutation of the documents");
    for (let i = 1; i < full.results.length; i++) {
      assert.ok(full.results[i - 1].score >= full.results[i].score, `sorted by score: ${full.results.map((r) => r.score)}`);
    }
    for (const r of full.results) {
      assert.ok(Number.isFinite(r.score), String(r.score));
      assert.ok(r.tokens > 0 && r.tokens <= reranker.contextLength, `tokens ${r.tokens}`);
    }
    const top = await client.rerank({ model: reranker.name, query, documents, topN: 2, priority: 10 });
    assert.deepEqual(top.results.map((r) => r.index), full.results.slice(0, 2).map((r) => r.index));
    top.results.forEach((r, i) => assert.ok(Math.abs(r.score - full.results[i].score) < 1e-4, `${r.score} vs ${full.results[i].score}`));
    // Rerank needs a reranker: an embedding model is refused.
    if (embedder) {
      const err = await expectError(client.rerank({ model: embedder.name, query, documents }));
      assert.equal(err.code, Code.FailedPrecondition, err.message);
    }
  }),
);

liveTest("Rerank truncation: a long document is cut by default, refused with Truncation.NONE", async (t) =>
  withClient(async (client) => {
    const { reranker } = await discover(client);
    if (!reranker) return t.skip(NO_RERANKER);
    // Two words a token at least: twice the model's input limit, within its byte limit.
    const docs = [documents[0], "word ".repeat(2 * reranker.contextLength)];
    const cut = await client.rerank({ model: reranker.name, query, documents: docs, requestId: "ts-rerank-cut" });
    const long = cut.results.find((r) => r.index === 1);
    assert.equal(long?.tokens, reranker.contextLength, "cut to the model's limit (Truncation.END, the default)");
    const err = await expectError(client.rerank({ model: reranker.name, query, documents: docs, truncate: Truncation.NONE }));
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["documents[1]"], "names the long document");
    const fits = await client.rerank({ model: reranker.name, query, documents: docs.slice(0, 1), truncate: Truncation.NONE });
    assert.equal(fits.results.length, 1);
  }),
);
