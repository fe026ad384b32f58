// Models at run time. Offline (an in-process server): loadModel reports each step and
// resolves to the served model, a refusal before the first step is retried, a stream
// without SERVING rejects, unloadModel and modelStatuses send and return what they should,
// keepAliveSeconds reaches Generate and Embed. Live: the fixture's "llama" directory loaded
// again from the server's --model-root as "ts-llama", used, listed and unloaded. A server
// without a model named "llama" (the default one never has it) skips that, even under
// MLXGRPC_REQUIRE_LIVE=1; one where LoadModel cannot run (no admin role, no --model-root)
// skips it too, and fails it under MLXGRPC_REQUIRE_LIVE=1 (see support.ts).
import { after, before, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  EmbedResponseSchema,
  FinishReason,
  GenerateResponseSchema,
  InferenceService,
  LoadModelResponseSchema,
  LoadStage,
  ModelKind,
  ModelState,
  RetryInfoSchema,
  connect,
  errorDetails,
  type EmbedRequest,
  type GenerateRequest,
  type LoadModelRequest,
  type LoadModelResponse,
  type MlxClient,
  type ModelInfo,
  type ModelStatus,
  type UnloadModelRequest,
} from "../index.js";
import { address, discover, exact, liveTest, token, unavailable } from "./support.js";

const STAGES = [LoadStage.RESOLVING, LoadStage.PLANNING, LoadStage.READING, LoadStage.READING, LoadStage.WARMING, LoadStage.SERVING];

// An in-process server that records the requests: the first LoadModel is refused with
// RetryInfo; source "partial" ends after RESOLVING, without SERVING.
const loads: LoadModelRequest[] = [];
const unloads: UnloadModelRequest[] = [];
const generates: GenerateRequest[] = [];
const embeds: EmbedRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *loadModel(req: LoadModelRequest) {
          loads.push(req);
          if (loads.length === 1) {
            const retryDelay = { seconds: 0n, nanos: 50_000_000 };
            throw new ConnectError("no room", Code.ResourceExhausted, undefined, [{ desc: RetryInfoSchema, value: { retryDelay } }]);
          }
          for (const [i, stage] of STAGES.entries()) {
            yield create(LoadModelResponseSchema, {
              stage,
              elapsedSeconds: 0.1 * i,
              evicted: stage === LoadStage.PLANNING ? ["idle-one"] : [],
              done: stage === LoadStage.READING ? BigInt(5 * (i - 1)) : 0n,
              total: stage === LoadStage.READING ? 10n : 0n,
              model: stage === LoadStage.SERVING ? { name: req.name, kind: req.kind } : undefined,
            });
            if (req.source === "partial") return;
          }
        },
        unloadModel(req: UnloadModelRequest) {
          unloads.push(req);
          return { name: req.name, freedBytes: 1234n, state: ModelState.UNLOADED };
        },
        listModels() {
          return {
            models: [{ name: "ready" }],
            statuses: [
              { name: "ready", state: ModelState.READY, residentBytes: 10n },
              { name: "lazy", state: ModelState.UNLOADED, onDemand: true, keepAliveSeconds: 30 },
            ],
          };
        },
        async *generate(req: GenerateRequest) {
          generates.push(req);
          yield create(GenerateResponseSchema, { event: { case: "finished", value: { reason: FinishReason.LENGTH } } });
        },
        async *embed(req: EmbedRequest) {
          embeds.push(req);
          yield create(EmbedResponseSchema, { embedding: [1] });
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("loadModel reports each step and resolves to the model (retried before the first); unloadModel; modelStatuses", async () => {
  const retries: number[] = [];
  const client = connect(local, { token: "adm", timeoutMs: 30_000, onRetry: (_, delayMs) => retries.push(delayMs) });
  try {
    const steps: LoadModelResponse[] = [];
    const request = { name: "m", source: "dir/m", kind: ModelKind.EMBEDDING, options: { contextLength: 512 }, keepAliveSeconds: 0 };
    const info = await client.loadModel(request, (step) => {
      steps.push(step);
    });
    assert.deepEqual([info.name, info.kind], ["m", ModelKind.EMBEDDING]);
    assert.deepEqual(steps.map((s) => s.stage), STAGES);
    assert.deepEqual(steps[1].evicted, ["idle-one"]);
    assert.deepEqual([steps[2].done, steps[2].total], [5n, 10n]);
    assert.deepEqual(retries, [50], "refused once with RetryInfo: retried after the server's delay");
    assert.equal(loads.length, 2);
    assert.deepEqual(loads[1], loads[0], "the same request for every attempt");
    assert.deepEqual([loads[0].name, loads[0].source, loads[0].kind, loads[0].options?.contextLength], ["m", "dir/m", ModelKind.EMBEDDING, 512]);
    assert.equal(loads[0].keepAliveSeconds, 0, "keepAliveSeconds 0 (unload once idle) arrives set");

    // An async onProgress is awaited; the raw steps; a stream without SERVING; leaving early.
    const heard: LoadStage[] = [];
    const n = await client.loadModel({ name: "n", source: "dir/n" }, async (step) => {
      await new Promise((r) => setTimeout(r, 1));
      heard.push(step.stage);
    });
    assert.equal(n.name, "n");
    assert.deepEqual(heard, STAGES);
    const stages: LoadStage[] = [];
    for await (const step of client.loadModelProgress({ name: "p", source: "dir/p", keepAliveSeconds: -1 })) stages.push(step.stage);
    assert.deepEqual(stages, STAGES);
    assert.equal(loads.at(-1)?.keepAliveSeconds, -1);
    await assert.rejects(client.loadModel({ name: "q", source: "partial" }), (err: unknown) => {
      const ce = ConnectError.from(err);
      return ce.code === Code.Internal && /without SERVING/.test(ce.message);
    });
    for await (const _ of client.loadModelProgress({ name: "r", source: "dir/r" })) break;
    assert.equal(loads.at(-1)?.name, "r");
    assert.equal(loads.find((l) => l.name === "n")?.keepAliveSeconds, undefined, "unset: kept");

    const gone = await client.unloadModel("m", { cancelRequests: true });
    assert.deepEqual([gone.name, gone.freedBytes, gone.state], ["m", 1234n, ModelState.UNLOADED]);
    await client.unloadModel("n");
    assert.deepEqual(unloads.map((u) => [u.name, u.cancelRequests]), [["m", true], ["n", false]]);

    const statuses = await client.modelStatuses();
    assert.deepEqual(statuses.map((s) => [s.name, s.state]), [["ready", ModelState.READY], ["lazy", ModelState.UNLOADED]]);
    assert.deepEqual([statuses[1].onDemand, statuses[1].keepAliveSeconds], [true, 30]);
    assert.deepEqual((await client.listModels()).map((m) => m.name), ["ready"]);

    // keepAliveSeconds per request: the generated field in the init object.
    await client.generateText({ prompt: { case: "text", value: "hi" }, keepAliveSeconds: 90 });
    await client.generateText({ prompt: { case: "text", value: "hi" } });
    await client.embed({ inputs: ["a"], keepAliveSeconds: 300 });
    assert.deepEqual(generates.map((g) => g.keepAliveSeconds), [90, undefined]);
    assert.equal(embeds[0].keepAliveSeconds, 300);
  } finally {
    client.close();
  }
});

// Live: the fixture's "llama" loaded again at run time.

const NO_LLAMA = 'the server has no model named "llama" (the fixture server serves one; the default server never has one)';

/** Skips (fails, under MLXGRPC_REQUIRE_LIVE=1) when `err` says this server loads nothing at run time. */
function loadingUnavailable(t: TestContext, err: unknown): boolean {
  const d = errorDetails(err);
  if (d.code === Code.PermissionDenied && d.errorInfo?.reason === "ADMIN_ROLE_REQUIRED") {
    unavailable(t, "LoadModel needs the admin role here (PERMISSION_DENIED ADMIN_ROLE_REQUIRED): no token with it, and no --admin-loopback");
    return true;
  }
  if (d.code === Code.FailedPrecondition && d.errorInfo?.reason === "MODEL_ROOT_UNSET") {
    unavailable(t, "the server has no --model-root: LoadModel is FAILED_PRECONDITION MODEL_ROOT_UNSET");
    return true;
  }
  return false;
}

async function statusOf(client: MlxClient, name: string): Promise<ModelStatus | undefined> {
  return (await client.modelStatuses()).find((s) => s.name === name);
}

liveTest("load a model from the model root, generate with it, list it and unload it", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    const llama = (await discover(client)).all.find((m) => m.name === "llama");
    if (!llama) return t.skip(NO_LLAMA);
    const steps: LoadModelResponse[] = [];
    let info: ModelInfo;
    try {
      info = await client.loadModel({ name: "ts-llama", source: "llama" }, (step) => {
        steps.push(step);
      });
    } catch (err) {
      if (loadingUnavailable(t, err)) return;
      throw err;
    }
    let unloaded = false;
    try {
      assert.deepEqual([info.name, info.kind, info.vocabSize], ["ts-llama", ModelKind.GENERATION, llama.vocabSize]);
      const stages = steps.map((s) => s.stage);
      assert.deepEqual(stages, [...stages].sort((a, b) => a - b), `stages in order: ${stages.map((s) => LoadStage[s])}`);
      assert.equal(stages.at(-1), LoadStage.SERVING);
      assert.equal(stages.indexOf(LoadStage.SERVING), stages.length - 1, "SERVING once, last");
      assert.equal(steps.at(-1)?.model?.name, "ts-llama");

      const prompt = { case: "text" as const, value: "Hello" };
      const out = await client.generateText({ model: "ts-llama", prompt, stopping: exact(4) });
      assert.equal(out.tokenIds.length, 4);
      assert.equal(out.started?.model, "ts-llama");
      const status = await statusOf(client, "ts-llama");
      assert.equal(status?.state, ModelState.READY, `status ${JSON.stringify(status?.state)}`);
      assert.equal(status?.onDemand, false);

      const gone = await client.unloadModel("ts-llama");
      unloaded = true;
      assert.equal(gone.name, "ts-llama");
      const after = await statusOf(client, "ts-llama");
      assert.ok(after === undefined || after.state !== ModelState.READY, `after unloading: ${after && ModelState[after.state]}`);
      const refused = await client.generateText({ model: "ts-llama", prompt, stopping: exact(4) }).then(
        () => assert.fail("a Generate on the unloaded model succeeded"),
        (err: unknown) => errorDetails(err),
      );
      assert.equal(refused.code, Code.NotFound, refused.message);
    } finally {
      if (!unloaded) await client.unloadModel("ts-llama", { cancelRequests: true }).catch(() => undefined);
    }
  } finally {
    client.close();
  }
});

liveTest("loading a source outside the model root is INVALID_ARGUMENT", async (t) => {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  try {
    if (!(await discover(client)).all.some((m) => m.name === "llama")) return t.skip(NO_LLAMA);
    const err = await client.loadModel({ name: "ts-escape", source: "../escape" }).then(
      () => assert.fail("a source outside the root loaded"),
      (e: unknown) => e,
    );
    if (loadingUnavailable(t, err)) return;
    const d = errorDetails(err);
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["source"]);
    assert.equal(await statusOf(client, "ts-escape"), undefined);
  } finally {
    client.close();
  }
});
