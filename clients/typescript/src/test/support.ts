// Shared by the live tests: the server (MLXGRPC_ADDRESS) and its token (MLXGRPC_TOKEN,
// when set), the models it serves (discovered with ListModels), and filling its
// admission queue.
import { test, type TestContext } from "node:test";

import { Code, ConnectError, ModelKind, type MlxClient, type ModelInfo } from "../index.js";

export const address = process.env.MLXGRPC_ADDRESS;
/** The live server's bearer token (a server with a tokens file), sent by every live client. */
export const token = process.env.MLXGRPC_TOKEN || undefined;
/** The tenant this caller's requests count under: its token's (without tokens: the empty name). */
export const tenant = process.env.MLXGRPC_TENANT ?? "";
/** CI sets MLXGRPC_REQUIRE_LIVE=1: a live test that cannot run fails instead of skipping. */
export const requireLive = process.env.MLXGRPC_REQUIRE_LIVE === "1";

/** A live test: skipped without MLXGRPC_ADDRESS (a failure under MLXGRPC_REQUIRE_LIVE). */
export function liveTest(name: string, fn: (t: TestContext) => Promise<void>): void {
  const skip = address || requireLive ? false : "MLXGRPC_ADDRESS is not set";
  test(name, { skip }, async (t) => {
    if (!address) throw new Error("MLXGRPC_ADDRESS is not set (MLXGRPC_REQUIRE_LIVE=1)");
    await fn(t);
  });
}

/** Skips the running test for a reason the server gives, or fails it under MLXGRPC_REQUIRE_LIVE. */
export function unavailable(t: TestContext, reason: string): void {
  if (requireLive) throw new Error(`${reason} (MLXGRPC_REQUIRE_LIVE=1)`);
  t.skip(reason);
}

export interface Served {
  generator?: ModelInfo;
  embedder?: ModelInfo;
  /** The model named "reranker" when it reranks (the fixture server's cross-encoder). */
  reranker?: ModelInfo;
  /** The model named "classifier" when it classifies (the fixture server's three-label classifier). */
  classifier?: ModelInfo;
  /** The model named "splade" when it gives sparse embeddings (the fixture server's SPLADE model). */
  splade?: ModelInfo;
  all: ModelInfo[];
}

/**
 * The default generation model (listed first), the first embedding model that embeds (a
 * reranker, a classifier or a SPLADE model is an embedding-kind model that does not) and the
 * models named "reranker", "classifier" and "splade".
 */
export async function discover(client: MlxClient): Promise<Served> {
  const all = await client.listModels();
  return {
    all,
    generator: all.find((m) => m.kind === ModelKind.GENERATION),
    embedder: all.find((m) => m.kind === ModelKind.EMBEDDING && m.capabilities?.embeddings),
    reranker: all.find((m) => m.name === "reranker" && m.capabilities?.rerank),
    classifier: all.find((m) => m.name === "classifier" && m.capabilities?.classify),
    splade: all.find((m) => m.name === "splade" && m.capabilities?.sparseEmbeddings),
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Settings that produce exactly `maxTokens` tokens on any model. */
export const exact = (maxTokens: number) => ({ maxTokens, ignoreEos: true });

interface Filler {
  controller: AbortController;
  refusal?: ConnectError;
  ended: boolean;
}

function startFiller(client: MlxClient, model: string): Filler {
  const filler: Filler = { controller: new AbortController(), ended: false };
  void (async () => {
    try {
      const req = { model, prompt: { case: "text" as const, value: "Count:" }, stopping: exact(4000) };
      for await (const _ of client.raw.generate(req, { signal: filler.controller.signal, timeoutMs: 600_000 }));
    } catch (err) {
      const ce = ConnectError.from(err);
      if (ce.code === Code.ResourceExhausted) filler.refusal = ce;
    } finally {
      filler.ended = true;
    }
  })();
  return filler;
}

/**
 * Opens long generations (raw client: no retries) in batches until the server
 * refuses one with RESOURCE_EXHAUSTED; returns the running ones and the refusal.
 */
export async function saturate(client: MlxClient, model: string): Promise<{ running: Filler[]; refusal: ConnectError }> {
  const running: Filler[] = [];
  while (running.length < 256) {
    const batch = Array.from({ length: 8 }, () => startFiller(client, model));
    for (let waited = 0; waited < 1000 && !batch.some((f) => f.ended); waited += 50) await sleep(50);
    running.push(...batch.filter((f) => !f.ended));
    const refused = batch.find((f) => f.refusal);
    if (refused?.refusal) return { running, refusal: refused.refusal };
  }
  await release(client, running, model);
  throw new Error("256 concurrent generations and no RESOURCE_EXHAUSTED");
}

/** Aborts the fillers and waits until the server admits requests again. */
export async function release(client: MlxClient, fillers: Filler[], model: string): Promise<void> {
  for (const f of fillers) f.controller.abort();
  for (let i = 0; i < 300; i++) {
    try {
      const probe = { model, prompt: { case: "text" as const, value: "x" }, stopping: { maxTokens: 1 } };
      for await (const _ of client.raw.generate(probe, { timeoutMs: 30_000 }));
      return;
    } catch (err) {
      if (ConnectError.from(err).code !== Code.ResourceExhausted) throw err;
    }
    await sleep(100);
  }
}
