// Adapters against a live server at MLXGRPC_ADDRESS (skipped when unset): it starts
// with adapter "tone" on "llama"; MLXGRPC_ADAPTER_DIR is another adapter directory there.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { AdapterKind, Code, ConnectError, FinishReason, connect, errorDetails, type MlxClient } from "../index.js";

const address = process.env.MLXGRPC_ADDRESS;
const adapterDir = process.env.MLXGRPC_ADAPTER_DIR;

describe("adapters", () => {
  let client: MlxClient;
  before(() => {
    if (address) client = connect(address, { timeoutMs: 120_000 });
  });
  after(() => client?.close());

  const prompt = { case: "text" as const, value: "The quick brown fox" };

  test("Generate with an adapter changes the output", { skip: address ? false : "MLXGRPC_ADDRESS is not set" }, async () => {
    const listed = await client.listAdapters();
    assert.equal(listed.model, "llama");
    assert.ok(listed.adapters.some((a) => a.name === "tone"));
    const base = await client.generateText({ prompt, stopping: { maxTokens: 8 } });
    const tuned = await client.generateText({ prompt, adapter: "tone", stopping: { maxTokens: 8 } });
    assert.equal(tuned.finished?.reason, FinishReason.LENGTH);
    assert.equal(tuned.tokenIds.length, 8);
    assert.notDeepEqual(tuned.tokenIds, base.tokenIds);
    try {
      await client.generateText({ prompt, adapter: "no-such-adapter", stopping: { maxTokens: 2 } });
      assert.fail("an unknown adapter must fail");
    } catch (err) {
      const d = errorDetails(err);
      assert.equal(ConnectError.from(err).code, Code.NotFound);
      assert.equal(d.errorInfo?.reason, "ADAPTER_NOT_FOUND");
    }
  });

  test("load, use and unload an adapter", { skip: address && adapterDir ? false : "no live server or adapter dir" }, async () => {
    const loaded = await client.loadAdapter("ts-client", adapterDir!);
    assert.equal(loaded.adapter?.name, "ts-client");
    assert.equal(loaded.adapter?.kind, AdapterKind.LORA);
    assert.ok((loaded.adapter?.bytes ?? 0n) > 0n);
    const out = await client.generateText({ prompt, adapter: "ts-client", stopping: { maxTokens: 4 } });
    assert.equal(out.tokenIds.length, 4);
    assert.equal((await client.unloadAdapter("ts-client")).name, "ts-client");
    assert.ok(!(await client.listAdapters()).adapters.some((a) => a.name === "ts-client"));
    try {
      await client.loadAdapter("nothing", "/nonexistent/adapter");
      assert.fail("a directory without an adapter must fail");
    } catch (err) {
      assert.deepEqual(errorDetails(err).fieldViolations.map((v) => v.field), ["path"]);
    }
  });
});
