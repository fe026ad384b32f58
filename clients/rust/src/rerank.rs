//! Rerank and truncation: [`Client::rerank`] scores documents against a query with a
//! reranking model (a cross-encoder: its `capabilities.rerank` is true, its `embeddings`
//! false) and returns a [`Ranking`], most relevant first; [`Truncation`] says what Embed
//! and Rerank do with an input longer than the model's input limit.
//!
//! ```
//! use mlx_grpc_client::{Truncation, pb};
//!
//! let request = pb::RerankRequest::new("What is the capital of France?", ["Paris is.", "Berlin is."])
//!     .with_model("reranker")
//!     .with_top_n(1)
//!     .with_truncate(Truncation::None);
//! # assert_eq!(request.truncate(), pb::Truncation::None);
//! let embed = pb::EmbedRequest::new(["a long text"]).with_truncate(Truncation::None);
//! # assert_eq!(embed.inputs, ["a long text"]);
//! ```

use tonic::{IntoRequest, Request, Status};

use crate::pooling_builders::pooling_builders;
use crate::{Client, pb};

pooling_builders!(pb::EmbedRequest, model: "The embedding model (empty: the server's default one).", truncate: "What to do with an input longer than the model's input limit.");

pooling_builders!(pb::RerankRequest, model: "The reranking model (empty: the server's default one).", truncate: "What to do with a query and document longer together than the model's input limit.");

/// What Embed, Rerank, Classify and EmbedSparse do with an input longer than the model's input limit
/// (`ModelInfo::context_length`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Truncation {
    /// Keep the tokens that fit, from the start (the default; a reranked pair cuts the
    /// longer of query and document first). The result's `tokens` says how many were used.
    #[default]
    End,
    /// Refuse the request: INVALID_ARGUMENT naming the input (`inputs[i]`, `documents[i]`)
    /// in the error's field violation, with its length and the limit.
    None,
}

impl From<Truncation> for pb::Truncation {
    fn from(t: Truncation) -> Self {
        match t {
            Truncation::End => pb::Truncation::End,
            Truncation::None => pb::Truncation::None,
        }
    }
}

impl pb::EmbedRequest {
    /// Embeds `inputs` with the default embedding model; the `with_*` methods set the rest.
    pub fn new<S: Into<String>>(inputs: impl IntoIterator<Item = S>) -> Self {
        Self {
            inputs: inputs.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }
}

impl pb::RerankRequest {
    /// Scores `documents` (at least one) against `query` with the default reranking
    /// model; the `with_*` methods set the rest.
    pub fn new<S: Into<String>>(
        query: impl Into<String>,
        documents: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            query: query.into(),
            documents: documents.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Return only the `top_n` highest scored documents (0: all of them).
    pub fn with_top_n(mut self, top_n: i32) -> Self {
        self.top_n = top_n;
        self
    }
}

/// The documents' scores ([`Client::rerank`]), most relevant first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ranking {
    /// The model that scored them.
    pub model: String,
    /// One per document (or the `top_n` highest), by descending score.
    pub results: Vec<RankedDocument>,
}

/// One document's score.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankedDocument {
    /// The document's position in the request's `documents`.
    pub index: usize,
    /// The model's relevance logit for the query and this document: higher is more relevant.
    pub score: f32,
    /// Tokens the query and document used together (after truncation).
    pub tokens: i32,
}

impl RankedDocument {
    /// The score as a probability: the logistic function of the logit.
    pub fn probability(&self) -> f32 {
        1.0 / (1.0 + (-self.score).exp())
    }
}

impl Ranking {
    /// The documents' positions, most relevant first.
    pub fn indices(&self) -> Vec<usize> {
        self.results.iter().map(|r| r.index).collect()
    }

    fn from_response(response: pb::RerankResponse) -> Result<Self, Status> {
        let results = response
            .results
            .into_iter()
            .map(|r| {
                let index = usize::try_from(r.index).map_err(|_| {
                    Status::internal(format!("Rerank returned the index {}", r.index))
                })?;
                Ok(RankedDocument {
                    index,
                    score: r.score,
                    tokens: r.tokens,
                })
            })
            .collect::<Result<_, Status>>()?;
        Ok(Self {
            model: response.model,
            results,
        })
    }
}

impl Client {
    /// Scores the request's documents against its query (a reranking model: empty
    /// `model` selects the server's first), most relevant first. Retried like the other
    /// unary calls; a request without a priority gets the client's default. A model that
    /// does not rerank is FAILED_PRECONDITION; an input over the limit under
    /// [`Truncation::None`] is INVALID_ARGUMENT.
    pub async fn rerank(
        &self,
        request: impl IntoRequest<pb::RerankRequest>,
    ) -> Result<Ranking, Status> {
        let r = self
            .unary(self.rerank_request(request), |mut raw, r| async move {
                raw.rerank(r).await
            })
            .await?;
        Ranking::from_response(r.into_inner())
    }

    /// `request` as [`Client::rerank`] sends it: with a priority.
    pub(crate) fn rerank_request(
        &self,
        request: impl IntoRequest<pb::RerankRequest>,
    ) -> Request<pb::RerankRequest> {
        self.with_default_priority(request.into_request())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_maps_to_the_proto_enum() {
        assert_eq!(Truncation::default(), Truncation::End);
        assert_eq!(pb::Truncation::from(Truncation::End), pb::Truncation::End);
        assert_eq!(pb::Truncation::from(Truncation::None), pb::Truncation::None);
        // Unset, the request leaves it to the server (TRUNCATION_UNSPECIFIED: END).
        assert_eq!(
            pb::RerankRequest::new("q", ["d"]).truncate(),
            pb::Truncation::Unspecified
        );
    }

    #[test]
    fn builders_set_the_fields() {
        let rerank = pb::RerankRequest::new("query", ["a", "b"])
            .with_model("reranker")
            .with_top_n(1)
            .with_truncate(Truncation::None)
            .with_request_id("r-1")
            .with_priority(-5);
        assert_eq!(
            rerank,
            pb::RerankRequest {
                model: "reranker".into(),
                query: "query".into(),
                documents: vec!["a".into(), "b".into()],
                top_n: 1,
                truncate: pb::Truncation::None as i32,
                request_id: "r-1".into(),
                priority: -5,
            }
        );
        let embed = pb::EmbedRequest::new(vec![String::from("x")])
            .with_model("all-minilm-l6-v2")
            .with_truncate(Truncation::End)
            .with_request_id("e-1")
            .with_priority(3);
        assert_eq!(
            embed,
            pb::EmbedRequest {
                model: "all-minilm-l6-v2".into(),
                inputs: vec!["x".into()],
                truncate: pb::Truncation::End as i32,
                request_id: "e-1".into(),
                priority: 3,
                ..Default::default()
            }
        );
    }

    #[test]
    fn responses_become_rankings() {
        let result = |index, score, tokens| pb::RerankResult {
            index,
            score,
            tokens,
        };
        let ranking = Ranking::from_response(pb::RerankResponse {
            model: "reranker".into(),
            results: vec![result(2, 1.5, 9), result(0, 0.0, 7), result(1, -3.0, 8)],
        })
        .expect("ranking");
        assert_eq!(ranking.model, "reranker");
        assert_eq!(ranking.indices(), [2, 0, 1]);
        assert_eq!(
            ranking.results[0],
            RankedDocument {
                index: 2,
                score: 1.5,
                tokens: 9
            }
        );
        assert_eq!(ranking.results[1].probability(), 0.5);
        assert!(ranking.results[0].probability() > 0.8);
        assert!(ranking.results[2].probability() < 0.05);

        let bad = Ranking::from_response(pb::RerankResponse {
            model: "reranker".into(),
            results: vec![result(-1, 0.0, 1)],
        })
        .expect_err("a negative index");
        assert_eq!(bad.code(), tonic::Code::Internal);
    }
}
