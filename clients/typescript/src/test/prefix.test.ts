// Prefetch and CloseSession: the requests prefetch and closeSession send, retried like the
// other unary calls, against an in-process server (offline), and against a live server a
// session's Generate leaves a prefix that Prefetch finds in memory (see support.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  CacheTier,
  Code,
  ConnectError,
  InferenceService,
  RetryInfoSchema,
  connect,
  errorDetails,
  type CloseSessionRequest,
  type PrefetchRequest,
  type PrefetchResponse,
} from "../index.js";
import { address, exact, liveTest, token } from "./support.js";

// An in-process server that records the requests, refusing the first Prefetch with RetryInfo.
const prefetches: PrefetchRequest[] = [];
const closes: CloseSessionRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        prefetch(req: PrefetchRequest) {
          prefetches.push(req);
          if (prefetches.length === 1) {
            const retryDelay = { seconds: 0n, nanos: 50_000_000 };
            throw new ConnectError("queue full", Code.ResourceExhausted, undefined, [{ desc: RetryInfoSchema, value: { retryDelay } }]);
          }
          return { promptTokens: 10, cachedTokens: 8, tier: CacheTier.DISK };
        },
        closeSession(req: CloseSessionRequest) {
          closes.push(req);
          return { entries: req.sessionId === "open" ? 2 : 0 };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("prefetch sends the prompt, model, session and adapter (retried); closeSession the session", async () => {
  const retries: number[] = [];
  const client = connect(local, { onRetry: (_, delayMs) => retries.push(delayMs) });
  try {
    const chat = { messages: [{ role: "user", content: "hi" }] };
    const r: PrefetchResponse = await client.prefetch({
      model: "m",
      sessionId: "open",
      adapter: "tone",
      prompt: { case: "chat", value: chat },
    });
    assert.deepEqual([r.promptTokens, r.cachedTokens, r.tier], [10, 8, CacheTier.DISK]);
    await client.prefetch({ prompt: { case: "tokens", value: { ids: [1, 2] } } });
    assert.deepEqual(retries, [50], "refused once with RetryInfo: retried after the server's delay");
    const [first, again, tokens] = prefetches;
    assert.equal(prefetches.length, 3);
    assert.deepEqual([first.model, first.sessionId, first.adapter, first.prompt.case], ["m", "open", "tone", "chat"]);
    assert.deepEqual(again, first, "the same request for every attempt");
    assert.equal(first.prompt.case === "chat" && first.prompt.value.messages[0].content, "hi");
    assert.deepEqual([tokens.model, tokens.sessionId, tokens.prompt.case === "tokens" && tokens.prompt.value.ids], ["", "", [1, 2]]);
    assert.equal(await client.closeSession("open"), 2);
    assert.equal(await client.closeSession("other", "m"), 0);
    assert.deepEqual(closes.map((c) => [c.model, c.sessionId]), [["", "open"], ["m", "other"]]);
  } finally {
    client.close();
  }
});

// About forty words: a prompt whose prefix the prefix cache keeps after a Generate.
const sessionPrompt =
  "The old lighthouse keeper climbed the winding stairs every evening at dusk, trimmed the wick, " +
  "polished the great lens and watched the fishing boats return along the rocky coast, writing " +
  "each name in a worn leather logbook that his grandfather had started long ago.";

liveTest("Prefetch finds a session's prefix in memory; CloseSession releases its entries once", async () => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const sessionId = `ts-${randomUUID()}`;
    const prompt = { case: "text" as const, value: sessionPrompt };
    const generated = await client.generateText({ prompt, sessionId, stopping: exact(4) });
    assert.equal(generated.tokenIds.length, 4);
    const p = await client.prefetch({ prompt, sessionId });
    assert.equal(p.promptTokens, generated.started?.promptTokens, "the prompt read as Generate reads it");
    assert.equal(p.tier, CacheTier.MEMORY, `tier ${CacheTier[p.tier]}`);
    assert.ok(p.cachedTokens > 0 && p.cachedTokens <= p.promptTokens - 1, `cached ${p.cachedTokens} of ${p.promptTokens}`);
    const entries = await client.closeSession(sessionId);
    assert.ok(entries >= 1, `closed ${entries} entries`);
    assert.equal(await client.closeSession(sessionId), 0, "no longer open");
    const refused = await client.prefetch({ sessionId }).then(
      () => assert.fail("a Prefetch without a prompt succeeded"),
      (err: unknown) => errorDetails(err),
    );
    assert.equal(refused.code, Code.InvalidArgument, refused.message);
  } finally {
    client.close();
  }
});
