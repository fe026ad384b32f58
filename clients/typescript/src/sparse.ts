// EmbedSparse's answer as plain values: one SparseVector per input, in input order, its
// vocabulary ids ascending with their weights (each above 0; every other id weighs 0).
import type { MessageInitShape } from "@bufbuild/protobuf";

import type { EmbedSparseRequestSchema, EmbedSparseResponse } from "./gen/mlxgrpc/v1/inference_service_pb.js";

export type EmbedSparseRequestInit = MessageInitShape<typeof EmbedSparseRequestSchema>;

/** One input's sparse vector over the model's vocabulary. */
export interface SparseVector {
  /** The input's position in the request's inputs. */
  index: number;
  /** Tokens the input used, after truncation. */
  tokens: number;
  /** Vocabulary ids with a nonzero weight, ascending. */
  tokenIds: number[];
  /** Their weights, in the same order, each above 0. */
  weights: number[];
}

/** EmbedSparse's answer: the model that embedded and a vector per input, in input order. */
export interface SparseEmbeddings {
  model: string;
  vectors: SparseVector[];
}

/** The response as SparseEmbeddings, its vectors in input order. */
export function sparseEmbeddings(res: EmbedSparseResponse): SparseEmbeddings {
  const vectors = res.embeddings
    .map((e) => ({ index: e.index, tokens: e.tokens, tokenIds: [...e.tokenIds], weights: [...e.weights] }))
    .sort((a, b) => a.index - b.index);
  return { model: res.model, vectors };
}

/** The vector as a Map of token id to weight. */
export function sparseMap(v: SparseVector): Map<number, number> {
  return new Map(v.tokenIds.map((id, i) => [id, v.weights[i]]));
}

/** The dot product of two sparse vectors (a query's against a document's). */
export function sparseDot(a: SparseVector, b: SparseVector): number {
  let sum = 0;
  for (let i = 0, j = 0; i < a.tokenIds.length && j < b.tokenIds.length; ) {
    if (a.tokenIds[i] < b.tokenIds[j]) i++;
    else if (a.tokenIds[i] > b.tokenIds[j]) j++;
    else sum += a.weights[i++] * b.weights[j++];
  }
  return sum;
}
