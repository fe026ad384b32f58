// Packed Embed without a live server: PackedEmbeddings messages built by hand with known
// bytes for each element type decode into input order, and embedPacked against an
// in-process server sends packed with the type and gathers its messages.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  EmbeddingType,
  EmbedResponseSchema,
  InferenceService,
  PackedEmbeddingsSchema,
  Truncation,
  connect,
  decodeEmbeddings,
  dequantize,
  embeddingFloats,
  embeddingType,
  halfToFloat,
  hamming,
  unpackBits,
  type EmbedRequest,
  type EmbedResponse,
} from "../index.js";

type PackedInit = MessageInitShape<typeof PackedEmbeddingsSchema>;

const packed = (p: PackedInit): EmbedResponse => create(EmbedResponseSchema, { packed: p });
const hex = (s: string) => Uint8Array.from(Buffer.from(s, "hex"));
const f32le = (...values: number[]) => new Uint8Array(Float32Array.from(values).buffer); // little-endian hosts

test("float32: little-endian IEEE single, UNSPECIFIED read as FLOAT32, gathered by index", () => {
  // 1.0, -2.5 | 0.5, 0.0: the vectors of inputs 1 and 0
  const data = hex("0000803f" + "000020c0" + "0000003f" + "00000000");
  for (const type of [EmbeddingType.FLOAT32, EmbeddingType.UNSPECIFIED]) {
    const e = decodeEmbeddings([packed({ indices: [1, 0], tokens: [4, 5], dimensions: 2, type, data })], 2);
    assert.equal(e.type, EmbeddingType.FLOAT32);
    assert.deepEqual(e.vectors, [Float32Array.from([0.5, 0]), Float32Array.from([1, -2.5])]);
    assert.deepEqual([e.dimensions, e.tokens, e.messages], [2, [5, 4], 1]);
  }
});

test("float16: exact half values", () => {
  // 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800 | 65504 = 0x7bff (largest), 2^-24 = 0x0001
  // (smallest subnormal), 0.333251953125 = 0x3555
  const data = hex("003c" + "00c0" + "0038" + "ff7b" + "0100" + "5535");
  const e = decodeEmbeddings([packed({ indices: [0, 1], tokens: [2, 2], dimensions: 3, type: EmbeddingType.FLOAT16, data })]);
  assert.equal(e.type, EmbeddingType.FLOAT16);
  assert.deepEqual(e.vectors, [Float32Array.from([1, -2, 0.5]), Float32Array.from([65504, 2 ** -24, 0.333251953125])]);
  assert.equal(halfToFloat(0x03ff), 1023 * 2 ** -24);
  assert.equal(halfToFloat(0x0400), 2 ** -14);
  assert.ok(Object.is(halfToFloat(0x8000), -0));
  assert.equal(halfToFloat(0xfc00), -Infinity);
  assert.ok(Number.isNaN(halfToFloat(0x7e00)));
});

test("int8: signed bytes with a scale per vector, dequantized", () => {
  const data = Uint8Array.from([0x7f, 0x81, 0x00, 0x40, 0x01, 0xff, 0x80, 0x00]); // 127 -127 0 64 | 1 -1 -128 0
  const msg: PackedInit = { indices: [0, 1], tokens: [1, 1], dimensions: 4, type: EmbeddingType.INT8, data, scales: [0.5, 0.25] };
  const e = decodeEmbeddings([packed(msg)], 2);
  assert.equal(e.type, EmbeddingType.INT8);
  if (e.type !== EmbeddingType.INT8) return;
  assert.deepEqual(e.vectors, [Int8Array.from([127, -127, 0, 64]), Int8Array.from([1, -1, -128, 0])]);
  assert.deepEqual(e.scales, [0.5, 0.25]);
  assert.deepEqual(dequantize(e.vectors[0], 0.5), Float32Array.from([63.5, -63.5, 0, 32]));
  assert.deepEqual(embeddingFloats(e), [Float32Array.from([63.5, -63.5, 0, 32]), Float32Array.from([0.25, -0.25, -32, 0])]);
  assert.throws(() => decodeEmbeddings([packed({ ...msg, scales: [0.5] })], 2), /scales/);
});

test("ubinary: a bit per value, the first in the most significant bit, 10 dimensions in 2 bytes", () => {
  // unused low bits zero
  const data = Uint8Array.from([0b10110000, 0b01000000, 0b01111111, 0b11000000]);
  const msg: PackedInit = { indices: [0, 1], tokens: [3, 3], dimensions: 10, type: EmbeddingType.UBINARY, data };
  const e = decodeEmbeddings([packed(msg)], 2);
  assert.equal(e.type, EmbeddingType.UBINARY);
  assert.equal(e.dimensions, 10);
  assert.deepEqual(e.vectors, [data.slice(0, 2), data.slice(2)]);
  const [first, second] = e.vectors as Uint8Array[];
  assert.deepEqual(unpackBits(first, 10), Uint8Array.from([1, 0, 1, 1, 0, 0, 0, 0, 0, 1]));
  assert.deepEqual(embeddingFloats(e)[1], Float32Array.from([0, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
  assert.equal(hamming(first, second), 7);
  assert.equal(hamming(first, first), 0);
  assert.throws(() => decodeEmbeddings([packed({ ...msg, data: data.slice(0, 3) })], 2), /bytes of packed data/);
});

test("messages are gathered in input order; malformed ones refused", () => {
  const responses = [
    packed({ indices: [2, 0], tokens: [7, 5], dimensions: 1, type: EmbeddingType.FLOAT32, data: f32le(3, 1) }),
    packed({ indices: [1], tokens: [6], dimensions: 1, type: EmbeddingType.FLOAT32, data: f32le(2) }),
  ];
  const e = decodeEmbeddings(responses, 3);
  assert.deepEqual(e.vectors, [Float32Array.from([1]), Float32Array.from([2]), Float32Array.from([3])]);
  assert.deepEqual([e.tokens, e.messages], [[5, 6, 7], 2]);
  assert.throws(() => decodeEmbeddings(responses, 4), /no vector for input 3/);
  assert.throws(() => decodeEmbeddings([...responses, responses[1]], 3), /repeated/);
  assert.throws(() => decodeEmbeddings([create(EmbedResponseSchema, { index: 0, embedding: [1] })], 1), /not packed/);
  const mixed = packed({ indices: [1], dimensions: 1, type: EmbeddingType.INT8, data: Uint8Array.from([1]), scales: [1] });
  assert.throws(() => decodeEmbeddings([responses[0], mixed], 3), /after/);
  assert.equal(embeddingType("ubinary"), EmbeddingType.UBINARY);
  assert.equal(embeddingType(EmbeddingType.INT8), EmbeddingType.INT8);
  assert.throws(() => embeddingType("int4" as "int8"), /unknown embedding type/);
});

// An in-process server: a packed request's vectors (each its index as a float32) in two
// messages, the later inputs first.
const embeds: EmbedRequest[] = [];
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *embed(req: EmbedRequest) {
          embeds.push(req);
          const order = req.inputs.map((_, i) => i);
          if (!req.packed) {
            for (const i of order) yield { index: i, embedding: [i], tokens: i + 1 };
            return;
          }
          const half = Math.floor(order.length / 2);
          for (const indices of [order.slice(half), order.slice(0, half)]) {
            if (!indices.length) continue;
            const data = f32le(...indices);
            yield { packed: { indices, tokens: indices.map((i) => i + 1), dimensions: 1, type: EmbeddingType.FLOAT32, data } };
          }
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("embedPacked sends packed and the type, and gathers the messages in input order", async () => {
  embeds.length = 0;
  const client = connect(local);
  try {
    const e = await client.embedPacked({ inputs: ["a", "b", "c", "d", "e"], embeddingType: "float32", truncate: Truncation.NONE });
    assert.deepEqual(e.vectors, [0, 1, 2, 3, 4].map((i) => Float32Array.from([i])));
    assert.deepEqual([e.tokens, e.messages], [[1, 2, 3, 4, 5], 2]);
    const three = await client.embedPacked(["x", "y", "z"]);
    assert.equal(three.vectors.length, 3);
    const plain = await client.embed(["a", "b"]); // without packed: one response per input, as before
    assert.deepEqual(plain.map((r) => r.index), [0, 1]);
    assert.deepEqual(embeds.map((r) => [r.packed, r.embeddingType, r.truncate]), [
      [true, EmbeddingType.FLOAT32, Truncation.NONE],
      [true, EmbeddingType.UNSPECIFIED, Truncation.UNSPECIFIED],
      [false, EmbeddingType.UNSPECIFIED, Truncation.UNSPECIFIED],
    ]);
  } finally {
    client.close();
  }
});
