// Retries against an in-process gRPC server (Connect's Node adapter) that refuses
// Generate and Cancel the way mlx-grpc does: no live server needed.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  ErrorInfoSchema,
  FinishReason,
  InferenceService,
  RetryInfoSchema,
  connect,
  type GenerateRequest,
} from "../index.js";

/** What the server does with the next calls. */
const server = { refusals: 0, code: Code.ResourceExhausted, delayMs: 200 as number | undefined, afterStarted: false, ids: [] as string[] };

function refusal(): ConnectError {
  const details = [{ desc: ErrorInfoSchema, value: { reason: "QUEUE_FULL", domain: "mlxgrpc.v1" } }];
  const delay = server.delayMs;
  if (delay !== undefined) {
    const retryDelay = { seconds: BigInt(Math.floor(delay / 1000)), nanos: (delay % 1000) * 1e6 };
    return new ConnectError("refused for now", server.code, undefined, [...details, { desc: RetryInfoSchema, value: { retryDelay } }]);
  }
  return new ConnectError("refused for now", server.code, undefined, details);
}

let h2: http2.Http2Server;
let address = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *generate(req: GenerateRequest) {
          server.ids.push(req.requestId);
          if (server.afterStarted) yield { event: { case: "started", value: { requestId: req.requestId } } };
          if (server.refusals-- > 0) throw refusal();
          yield { event: { case: "finished", value: { reason: FinishReason.LENGTH } } };
        },
        async cancel() {
          server.ids.push("cancel");
          if (server.refusals-- > 0) throw refusal();
          return { cancelled: true };
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  address = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

function reset(refusals: number, changes: Partial<typeof server> = {}) {
  Object.assign(server, { refusals, code: Code.ResourceExhausted, delayMs: 200, afterStarted: false, ids: [] }, changes);
}

test("refusals with RetryInfo are retried after the delay, with the same request id", async () => {
  reset(2);
  const retries: [string, number][] = [];
  const client = connect(address, { onRetry: (d, ms) => retries.push([d.errorInfo?.reason ?? "", ms]) });
  try {
    const t0 = Date.now();
    const r = await client.generateText({ requestId: "same-id", prompt: { case: "text", value: "hi" } });
    assert.equal(r.finished?.reason, FinishReason.LENGTH);
    assert.deepEqual(retries, [["QUEUE_FULL", 200], ["QUEUE_FULL", 200]]);
    assert.deepEqual(server.ids, ["same-id", "same-id", "same-id"]);
    assert.ok(Date.now() - t0 >= 400);
    reset(1, { code: Code.Unavailable });
    assert.equal(await client.cancel("x"), true); // unary calls too
    assert.deepEqual(server.ids, ["cancel", "cancel"]);
  } finally {
    client.close();
  }
});

for (const [name, setup, attempts, timeoutMs, expected] of [
  ["without RetryInfo", { delayMs: undefined }, 3, 30_000, 1],
  ["once the attempts are spent", {}, 3, 30_000, 3],
  ["past the deadline", { delayMs: 5000, code: Code.Unavailable }, 3, 1000, 1],
  ["after the first event", { afterStarted: true }, 3, 30_000, 1],
  ["with maxAttempts 1", {}, 1, 30_000, 1],
] as const) {
  test(`no retry ${name}`, async () => {
    reset(5, setup);
    const client = connect(address, { maxAttempts: attempts, timeoutMs });
    try {
      const t0 = Date.now();
      const err = await client.generateText({ prompt: { case: "text", value: "hi" } }).then(
        () => assert.fail("expected a refusal"),
        (e: unknown) => ConnectError.from(e),
      );
      assert.ok([Code.ResourceExhausted, Code.Unavailable].includes(err.code), String(err));
      assert.equal(server.ids.length, expected);
      assert.ok(Date.now() - t0 < 200 * expected + 1000);
    } finally {
      client.close();
    }
  });
}
