// Adapters against a live server at MLXGRPC_ADDRESS: the default generation model's
// first loaded adapter (from ListAdapters) is used, and loaded again from its directory
// under another name. A server with no adapter loaded skips these (a failure under
// MLXGRPC_REQUIRE_LIVE=1).
import { after, before, describe, type TestContext } from "node:test";
import assert from "node:assert/strict";

import { Code, ConnectError, FinishReason, connect, errorDetails, type AdapterInfo, type MlxClient } from "../index.js";
import { address, discover, exact, liveTest, token, unavailable } from "./support.js";

describe("adapters", () => {
  let client: MlxClient;
  let generator = "";
  before(async () => {
    if (!address) return;
    client = connect(address, { token, timeoutMs: 120_000 });
    generator = (await discover(client)).generator?.name ?? "";
  });
  after(() => client?.close());

  const prompt = { case: "text" as const, value: "The quick brown fox" };

  /** The default generation model's first adapter, or undefined (the test is then skipped). */
  async function loaded(t: TestContext): Promise<AdapterInfo | undefined> {
    const listed = await client.listAdapters();
    assert.equal(listed.model, generator);
    assert.ok(listed.maxAdapters > 0);
    if (listed.adapters.length === 0) {
      unavailable(t, `model ${generator} has no adapter loaded (serve it with --adapter NAME=DIR)`);
      return undefined;
    }
    return listed.adapters[0];
  }

  liveTest("Generate with an adapter changes the output", async (t) => {
    const adapter = await loaded(t);
    if (!adapter) return;
    const base = await client.generateText({ prompt, stopping: exact(8) });
    const tuned = await client.generateText({ prompt, adapter: adapter.name, stopping: exact(8) });
    assert.equal(tuned.finished?.reason, FinishReason.LENGTH);
    assert.equal(tuned.tokenIds.length, 8);
    assert.notDeepEqual(tuned.tokenIds, base.tokenIds);
    try {
      await client.generateText({ prompt, adapter: "no-such-adapter", stopping: exact(2) });
      assert.fail("an unknown adapter must fail");
    } catch (err) {
      assert.equal(ConnectError.from(err).code, Code.NotFound);
      assert.equal(errorDetails(err).errorInfo?.reason, "ADAPTER_NOT_FOUND");
    }
  });

  liveTest("load, use and unload an adapter", async (t) => {
    const adapter = await loaded(t);
    if (!adapter) return;
    const res = await client.loadAdapter("ts-client", adapter.source);
    assert.equal(res.adapter?.name, "ts-client");
    assert.equal(res.adapter?.kind, adapter.kind);
    assert.equal(res.adapter?.bytes, adapter.bytes);
    const again = await client.generateText({ prompt, adapter: "ts-client", stopping: exact(8) });
    const first = await client.generateText({ prompt, adapter: adapter.name, stopping: exact(8) });
    assert.deepEqual(again.tokenIds, first.tokenIds, "the same weights under another name");
    assert.equal((await client.unloadAdapter("ts-client")).name, "ts-client");
    assert.ok(!(await client.listAdapters()).adapters.some((a) => a.name === "ts-client"));
    try {
      await client.loadAdapter("nothing", "/nonexistent/adapter");
      assert.fail("a directory without an adapter must fail");
    } catch (err) {
      assert.equal(ConnectError.from(err).code, Code.InvalidArgument);
      assert.deepEqual(errorDetails(err).fieldViolations.map((v) => v.field), ["path"]);
    }
  });
});
