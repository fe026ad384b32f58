// Packed Embed responses (EmbedRequest.packed) decoded into typed arrays.
//
// A packed response message carries up to 64 inputs' vectors as one little-endian byte
// string of one element type (PackedEmbeddings): float32 (4 bytes a value), float16 (2
// bytes, IEEE half), int8 (1 signed byte a value, with a scale per vector: value ~ int8 x
// scale) or ubinary (a bit per value, 1 where the value is above 0, the first value in the
// most significant bit of the first byte, ceil(dimensions / 8) bytes a vector).

import { EmbeddingType, type EmbedResponse, type PackedEmbeddings } from "./gen/mlxgrpc/v1/inference_service_pb.js";

/** An embedding type by name, as `embedPacked` takes it beside an EmbeddingType. */
export type EmbeddingTypeName = "float32" | "float16" | "int8" | "ubinary";

const TYPES: Record<EmbeddingTypeName, EmbeddingType> = {
  float32: EmbeddingType.FLOAT32,
  float16: EmbeddingType.FLOAT16,
  int8: EmbeddingType.INT8,
  ubinary: EmbeddingType.UBINARY,
};

/** The EmbeddingType a name (or an EmbeddingType) stands for. */
export function embeddingType(type: EmbeddingTypeName | EmbeddingType): EmbeddingType {
  if (typeof type === "number") return type;
  const found = TYPES[type];
  if (found === undefined) throw new TypeError(`unknown embedding type "${type}" (one of ${Object.keys(TYPES).join(", ")})`);
  return found;
}

interface EmbeddingsBase {
  /** Values per vector (ubinary: bits). */
  dimensions: number;
  /** Tokens each input used (after truncation to the model's limit). */
  tokens: number[];
  /** Response messages the server sent (up to 64 vectors each). */
  messages: number;
}

/**
 * The vectors of a packed Embed call, in the order of the request's inputs; `type` says
 * what `vectors` holds: `Float32Array`s (FLOAT32, FLOAT16), `Int8Array`s with a scale each
 * (INT8: value ~ int8 x scale) or `Uint8Array`s of packed bits (UBINARY).
 */
export type Embeddings =
  | (EmbeddingsBase & { type: EmbeddingType.FLOAT32 | EmbeddingType.FLOAT16; vectors: Float32Array[] })
  | (EmbeddingsBase & { type: EmbeddingType.INT8; vectors: Int8Array[]; scales: number[] })
  | (EmbeddingsBase & { type: EmbeddingType.UBINARY; vectors: Uint8Array[] });

/** Bytes one vector of `dimensions` values takes in PackedEmbeddings.data. */
function vectorBytes(type: EmbeddingType, dimensions: number): number {
  switch (type) {
    case EmbeddingType.FLOAT32:
      return 4 * dimensions;
    case EmbeddingType.FLOAT16:
      return 2 * dimensions;
    case EmbeddingType.INT8:
      return dimensions;
    case EmbeddingType.UBINARY:
      return Math.ceil(dimensions / 8);
    default:
      throw new Error(`unknown embedding type ${type}`);
  }
}

/** An IEEE 754 half-precision value (its 16 bits) as a number, exactly. */
export function halfToFloat(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24; // zero or subnormal
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

const kindOf = (type: EmbeddingType) => (type === EmbeddingType.UNSPECIFIED ? EmbeddingType.FLOAT32 : type);

function decodeVector(type: EmbeddingType, data: Uint8Array, offset: number, dimensions: number): Float32Array | Int8Array | Uint8Array {
  const view = new DataView(data.buffer, data.byteOffset + offset, vectorBytes(type, dimensions));
  switch (type) {
    case EmbeddingType.FLOAT32: {
      const v = new Float32Array(dimensions);
      for (let i = 0; i < dimensions; i++) v[i] = view.getFloat32(4 * i, true);
      return v;
    }
    case EmbeddingType.FLOAT16: {
      const v = new Float32Array(dimensions);
      for (let i = 0; i < dimensions; i++) v[i] = halfToFloat(view.getUint16(2 * i, true));
      return v;
    }
    case EmbeddingType.INT8:
      return new Int8Array(data.slice(offset, offset + dimensions).buffer);
    default:
      return data.slice(offset, offset + vectorBytes(type, dimensions));
  }
}

/**
 * Gathers the packed responses of an Embed call (`embed` with `packed: true`) into input
 * order; `inputs`, the request's number of inputs, must be covered exactly (left out: as
 * many as the responses hold). Throws on a response that is not packed, data of the wrong
 * size, mixed types or dimensions, or an index out of range, repeated or missing.
 */
export function decodeEmbeddings(responses: EmbedResponse[], inputs?: number): Embeddings {
  const packed: PackedEmbeddings[] = responses.map((r) => {
    if (!r.packed) throw new Error(`embed response for input ${r.index} is not packed`);
    return r.packed;
  });
  const type = packed.length ? kindOf(packed[0].type) : EmbeddingType.FLOAT32;
  const dimensions = packed.length ? packed[0].dimensions : 0;
  const count = inputs ?? packed.reduce((n, p) => n + p.indices.length, 0);
  const size = vectorBytes(type, dimensions);
  const vectors: (Float32Array | Int8Array | Uint8Array | undefined)[] = new Array(count).fill(undefined);
  const tokens: number[] = new Array(count).fill(0);
  const scales: number[] = new Array(count).fill(0);
  for (const p of packed) {
    if (kindOf(p.type) !== type || p.dimensions !== dimensions) {
      throw new Error(`packed embeddings of ${EmbeddingType[kindOf(p.type)]} x ${p.dimensions} after ${EmbeddingType[type]} x ${dimensions}`);
    }
    const n = p.indices.length;
    if (p.data.length !== n * size) {
      throw new Error(`${p.data.length} bytes of packed data for ${n} vectors of ${dimensions} ${EmbeddingType[type]} values`);
    }
    if (p.tokens.length !== 0 && p.tokens.length !== n) throw new Error(`${p.tokens.length} token counts for ${n} packed vectors`);
    if (type === EmbeddingType.INT8 && p.scales.length !== n) throw new Error(`${p.scales.length} scales for ${n} int8 vectors`);
    p.indices.forEach((index, j) => {
      if (index < 0 || index >= count || vectors[index] !== undefined) {
        throw new Error(`packed embeddings: index ${index} out of range or repeated`);
      }
      vectors[index] = decodeVector(type, p.data, j * size, dimensions);
      tokens[index] = p.tokens[j] ?? 0;
      if (type === EmbeddingType.INT8) scales[index] = p.scales[j];
    });
  }
  const missing = vectors.findIndex((v) => v === undefined);
  if (missing >= 0) throw new Error(`packed embeddings: no vector for input ${missing}`);
  const base = { dimensions, tokens, messages: responses.length };
  switch (type) {
    case EmbeddingType.INT8:
      return { ...base, type, vectors: vectors as Int8Array[], scales };
    case EmbeddingType.UBINARY:
      return { ...base, type, vectors: vectors as Uint8Array[] };
    default:
      return { ...base, type: type as EmbeddingType.FLOAT32 | EmbeddingType.FLOAT16, vectors: vectors as Float32Array[] };
  }
}

/** An int8 vector's approximate values: v[i] x scale. */
export function dequantize(v: Int8Array, scale: number): Float32Array {
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = v[i] * scale;
  return out;
}

/** A ubinary vector's first `dimensions` bits, one 0 or 1 a value (1: it was above 0), first value first. */
export function unpackBits(v: Uint8Array, dimensions: number): Uint8Array {
  const out = new Uint8Array(dimensions);
  for (let i = 0; i < dimensions; i++) out[i] = (v[i >> 3] >> (7 - (i & 7))) & 1;
  return out;
}

/** The number of bits in which two ubinary vectors of the same length differ. */
export function hamming(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) throw new RangeError(`ubinary vectors of ${a.length} and ${b.length} bytes`);
  let n = 0;
  for (let i = 0; i < a.length; i++) {
    let x = a[i] ^ b[i];
    while (x) {
      x &= x - 1;
      n++;
    }
  }
  return n;
}

/** Every vector as float values: float32 and float16 as they are, int8 dequantized, ubinary as 0/1 bits. */
export function embeddingFloats(e: Embeddings): Float32Array[] {
  switch (e.type) {
    case EmbeddingType.INT8:
      return e.vectors.map((v, i) => dequantize(v, e.scales[i]));
    case EmbeddingType.UBINARY:
      return e.vectors.map((v) => Float32Array.from(unpackBits(v, e.dimensions)));
    default:
      return e.vectors;
  }
}
