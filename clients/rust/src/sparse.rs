//! EmbedSparse: [`Client::embed_sparse`] embeds each text as a sparse vector over the
//! vocabulary of a SPLADE model (its `capabilities.sparse_embeddings` is true: a BERT
//! `*ForMaskedLM` checkpoint) and returns [`SparseEmbeddings`], one [`SparseVector`] per
//! input in input order, its ids ascending with their weights (each above 0).
//!
//! ```
//! use mlx_grpc_client::{SparseVector, Truncation, pb};
//!
//! let request = pb::EmbedSparseRequest::new(["Where do rivers flow?", "Rivers flow into lakes."])
//!     .with_model("splade")
//!     .with_top_k(64)
//!     .with_truncate(Truncation::None);
//! # assert_eq!(request.truncate(), pb::Truncation::None);
//! let query = SparseVector { index: 0, tokens: 3, token_ids: vec![4, 9], weights: vec![0.5, 2.0] };
//! let doc = SparseVector { index: 1, tokens: 5, token_ids: vec![9, 11], weights: vec![1.5, 1.0] };
//! assert_eq!(query.dot(&doc), 3.0);
//! assert_eq!(query.weight(4), 0.5);
//! ```

use std::collections::HashMap;

use tonic::{IntoRequest, Request, Status};

use crate::pooling_builders::pooling_builders;
use crate::{Client, pb};

pooling_builders!(pb::EmbedSparseRequest, model: "The SPLADE model (empty: the server's first).", truncate: "What to do with an input longer than the model's input limit.");

impl pb::EmbedSparseRequest {
    /// Embeds `inputs` (at least one) with the default SPLADE model; the `with_*` methods
    /// set the rest.
    pub fn new<S: Into<String>>(inputs: impl IntoIterator<Item = S>) -> Self {
        Self {
            inputs: inputs.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Keep only each input's `top_k` heaviest weights (0: every nonzero one).
    pub fn with_top_k(mut self, top_k: i32) -> Self {
        self.top_k = top_k;
        self
    }
}

/// The inputs' sparse vectors ([`Client::embed_sparse`]), in input order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseEmbeddings {
    /// The model that embedded them.
    pub model: String,
    /// One per input, in the order of the request's `inputs`.
    pub vectors: Vec<SparseVector>,
}

/// One input's sparse vector: `token_ids` (vocabulary ids, ascending) and their `weights`
/// in the same order; every other id weighs 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseVector {
    /// The input's position in the request's `inputs`.
    pub index: usize,
    /// Tokens the input used (after truncation).
    pub tokens: i32,
    /// The vocabulary ids with a nonzero weight (or the `top_k` heaviest), ascending.
    pub token_ids: Vec<u32>,
    /// Their weights, each above 0.
    pub weights: Vec<f32>,
}

impl SparseVector {
    /// The weight of `id` (0 when the vector does not list it).
    pub fn weight(&self, id: u32) -> f32 {
        self.token_ids
            .binary_search(&id)
            .map_or(0.0, |i| self.weights[i])
    }

    /// The vector as id -> weight.
    pub fn to_map(&self) -> HashMap<u32, f32> {
        self.token_ids
            .iter()
            .copied()
            .zip(self.weights.iter().copied())
            .collect()
    }

    /// The dot product with `other` (a query's vector against a document's).
    pub fn dot(&self, other: &SparseVector) -> f32 {
        let (mut i, mut j, mut sum) = (0, 0, 0.0);
        while i < self.token_ids.len() && j < other.token_ids.len() {
            match self.token_ids[i].cmp(&other.token_ids[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += self.weights[i] * other.weights[j];
                    (i, j) = (i + 1, j + 1);
                }
            }
        }
        sum
    }
}

impl SparseEmbeddings {
    fn from_response(response: pb::EmbedSparseResponse) -> Result<Self, Status> {
        let mut vectors = response
            .embeddings
            .into_iter()
            .map(|e| {
                let index = usize::try_from(e.index).map_err(|_| {
                    Status::internal(format!("EmbedSparse returned the index {}", e.index))
                })?;
                let token_ids = e
                    .token_ids
                    .iter()
                    .map(|&id| u32::try_from(id))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| Status::internal("EmbedSparse returned a negative token id"))?;
                Ok(SparseVector {
                    index,
                    tokens: e.tokens,
                    token_ids,
                    weights: e.weights,
                })
            })
            .collect::<Result<Vec<_>, Status>>()?;
        vectors.sort_by_key(|v| v.index);
        Ok(Self {
            model: response.model,
            vectors,
        })
    }
}

impl Client {
    /// Embeds each of the request's inputs as a sparse vector (a SPLADE model: empty
    /// `model` selects the server's first), vectors in input order. Retried like the other
    /// unary calls; a request without a priority gets the client's default. A model that
    /// is not a SPLADE model is FAILED_PRECONDITION; an input over the limit under
    /// [`Truncation::None`](crate::Truncation::None) is INVALID_ARGUMENT.
    pub async fn embed_sparse(
        &self,
        request: impl IntoRequest<pb::EmbedSparseRequest>,
    ) -> Result<SparseEmbeddings, Status> {
        let r = self
            .unary(
                self.embed_sparse_request(request),
                |mut raw, r| async move { raw.embed_sparse(r).await },
            )
            .await?;
        SparseEmbeddings::from_response(r.into_inner())
    }

    /// `request` as [`Client::embed_sparse`] sends it: with a priority.
    pub(crate) fn embed_sparse_request(
        &self,
        request: impl IntoRequest<pb::EmbedSparseRequest>,
    ) -> Request<pb::EmbedSparseRequest> {
        self.with_default_priority(request.into_request())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Truncation;

    #[test]
    fn builders_set_the_fields() {
        let request = pb::EmbedSparseRequest::new(["a", "b"])
            .with_model("splade")
            .with_top_k(8)
            .with_truncate(Truncation::None)
            .with_request_id("s-1")
            .with_priority(-5);
        assert_eq!(
            request,
            pb::EmbedSparseRequest {
                model: "splade".into(),
                inputs: vec!["a".into(), "b".into()],
                top_k: 8,
                truncate: pb::Truncation::None as i32,
                request_id: "s-1".into(),
                priority: -5,
            }
        );
        let plain = pb::EmbedSparseRequest::new(vec![String::from("x")]);
        assert_eq!(plain.truncate(), pb::Truncation::Unspecified);
        assert_eq!((plain.top_k, plain.priority), (0, 0));
    }

    #[test]
    fn responses_become_vectors_in_input_order() {
        let embedded = SparseEmbeddings::from_response(pb::EmbedSparseResponse {
            model: "splade".into(),
            embeddings: vec![
                pb::SparseEmbedding {
                    index: 1,
                    token_ids: vec![5, 7],
                    weights: vec![3.0, 1.0],
                    tokens: 3,
                },
                pb::SparseEmbedding {
                    index: 0,
                    token_ids: vec![2, 5, 9],
                    weights: vec![0.5, 1.0, 2.0],
                    tokens: 4,
                },
            ],
        })
        .expect("vectors");
        assert_eq!(embedded.model, "splade");
        let (first, second) = (&embedded.vectors[0], &embedded.vectors[1]);
        assert_eq!((first.index, first.tokens, second.index), (0, 4, 1));
        assert_eq!(first.token_ids, [2, 5, 9]);
        assert_eq!((first.weight(9), first.weight(3)), (2.0, 0.0));
        assert_eq!(first.to_map().get(&5), Some(&1.0));
        assert_eq!(first.dot(second), 3.0);

        let bad = SparseEmbeddings::from_response(pb::EmbedSparseResponse {
            model: "splade".into(),
            embeddings: vec![pb::SparseEmbedding {
                index: -1,
                ..Default::default()
            }],
        })
        .expect_err("a negative index");
        assert_eq!(bad.code(), tonic::Code::Internal);
    }
}
