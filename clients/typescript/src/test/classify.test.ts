// Classify: the requests classify sends and the typed response, against an in-process server
// (offline), and a live server's "classifier", "classifier-multi" and "reranker" models (see
// support.ts).
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
  type ClassifyRequest,
  type ClassifyResponse,
  type MlxClient,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

// An in-process server that records the requests and gives each input two labels: "long"
// scores its length / 10 (at most 1), "short" the rest of 1.
const requests: ClassifyRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        classify(req: ClassifyRequest) {
          requests.push(req);
          const results = req.inputs.map((text, index) => {
            const long = Math.min(text.length / 10, 1);
            const labels = [{ label: "long", score: long }, { label: "short", score: 1 - long }].sort((a, b) => b.score - a.score);
            return { index, tokens: text.length + 2, labels: req.topK ? labels.slice(0, req.topK) : labels };
          });
          return { model: req.model || "classifier", results };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("classify sends the inputs and options; the results come back typed, in input order", async () => {
  requests.length = 0;
  const client = connect(local, { priority: -20 });
  try {
    const all = await client.classify(["0123456789ab", "ab"]);
    assert.equal(all.model, "classifier");
    assert.deepEqual(all.results.map((r) => [r.index, r.tokens, r.labels.map((l) => l.label)]), [
      [0, 14, ["long", "short"]],
      [1, 4, ["short", "long"]],
    ]);
    assert.ok(Math.abs(all.results[1].labels[0].score - 0.8) < 1e-6);
    const top: ClassifyResponse = await client.classify({
      model: "my-classifier",
      inputs: ["ab"],
      topK: 1,
      truncate: Truncation.NONE,
      requestId: "c-1",
      priority: 30,
    });
    assert.equal(top.model, "my-classifier");
    assert.deepEqual(top.results[0].labels.map((l) => l.label), ["short"]);
    const [plain, full] = requests;
    assert.deepEqual(
      [plain.model, plain.inputs, plain.topK, plain.truncate, plain.requestId, plain.priority],
      ["", ["0123456789ab", "ab"], 0, Truncation.UNSPECIFIED, "", -20],
      "unset: the server's defaults, the client's priority",
    );
    assert.deepEqual(
      [full.model, full.inputs, full.topK, full.truncate, full.requestId, full.priority],
      ["my-classifier", ["ab"], 1, Truncation.NONE, "c-1", 30],
    );
  } finally {
    client.close();
  }
});

// Live: a server whose ListModels has a model named "classifier" with capabilities.classify (the
// CI fixture server's three-label classifier, random weights: its scores mean nothing, their
// sums and order do).

const NO_CLASSIFIER = 'the server has no model named "classifier" (the fixture server\'s; the default server never has one)';
const texts = ["I loved this film.", "The service was slow and the food cold.", "Rivers flow into lakes and oceans."];

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

/** The sums of each result's scores, after checking the results' order and labels. */
function check(res: ClassifyResponse, model: string, inputs: number, labels: number): number[] {
  assert.equal(res.model, model);
  assert.deepEqual(res.results.map((r) => r.index), [...Array(inputs).keys()], "in input order");
  return res.results.map((r) => {
    assert.equal(r.labels.length, labels);
    assert.ok(r.tokens > 0, `tokens ${r.tokens}`);
    for (let i = 1; i < r.labels.length; i++) assert.ok(r.labels[i - 1].score >= r.labels[i].score, "highest first");
    r.labels.forEach((l) => assert.ok(l.score >= 0 && l.score <= 1, `${l.label} ${l.score}`));
    return r.labels.reduce((sum, l) => sum + l.score, 0);
  });
}

liveTest("Classify: softmax scores sum to 1, multi-label and reranker scores are sigmoids; topK the head", async (t) =>
  withClient(async (client) => {
    const { classifier, embedder, all } = await discover(client);
    if (!classifier) return t.skip(NO_CLASSIFIER);
    assert.equal(classifier.capabilities?.embeddings, false, "a classifier does not embed");
    const full = await client.classify({ model: classifier.name, inputs: texts });
    check(full, classifier.name, texts.length, 3).forEach((sum) => assert.ok(Math.abs(sum - 1) < 1e-5, String(sum)));
    const top = await client.classify({ model: classifier.name, inputs: texts, topK: 1, priority: 10, requestId: "ts-classify" });
    assert.deepEqual(top.results.map((r) => r.labels.map((l) => l.label)), full.results.map((r) => [r.labels[0].label]));
    if (all.some((m) => m.name === "classifier-multi")) {
      const multi = await client.classify({ model: "classifier-multi", inputs: texts });
      assert.ok(check(multi, "classifier-multi", texts.length, 3).some((sum) => Math.abs(sum - 1) > 1e-3), "independent sigmoids");
    }
    if (all.some((m) => m.name === "reranker")) {
      check(await client.classify({ model: "reranker", inputs: texts }), "reranker", texts.length, 1);
    }
    if (embedder) {
      const err = await expectError(client.classify({ model: embedder.name, inputs: texts }));
      assert.equal(err.code, Code.FailedPrecondition, err.message);
    }
  }),
);

liveTest("Classify truncation and wrong calls: a long input is cut, or refused with Truncation.NONE; bad topK", async (t) =>
  withClient(async (client) => {
    const { classifier } = await discover(client);
    if (!classifier) return t.skip(NO_CLASSIFIER);
    const inputs = [texts[0], "word ".repeat(2 * classifier.contextLength)];
    const cut = await client.classify({ model: classifier.name, inputs });
    assert.equal(cut.results[1].tokens, classifier.contextLength, "cut to the model's limit (Truncation.END, the default)");
    let d = errorDetails(await expectError(client.classify({ model: classifier.name, inputs, truncate: Truncation.NONE })));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["inputs[1]"], "names the long input");
    d = errorDetails(await expectError(client.classify({ model: classifier.name, inputs: texts, topK: -1 })));
    assert.deepEqual([d.code, d.fieldViolations.map((v) => v.field)], [Code.InvalidArgument, ["top_k"]]);
    d = errorDetails(await expectError(client.classify({ model: classifier.name, inputs: [] })));
    assert.deepEqual([d.code, d.fieldViolations.map((v) => v.field)], [Code.InvalidArgument, ["inputs"]]);
    const err = await expectError(client.embed({ model: classifier.name, inputs: ["x"] }));
    assert.equal(err.code, Code.FailedPrecondition, "a classifier does not embed");
  }),
);
