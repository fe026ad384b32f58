//! Classify: [`Client::classify`] scores the labels of each text with a sequence classifier
//! (its `capabilities.classify` is true: a BERT-family `*ForSequenceClassification` model,
//! or a reranker with its one label) and returns [`Classifications`], one per input in
//! input order, each's labels highest first.
//!
//! ```
//! use mlx_grpc_client::{Truncation, pb};
//!
//! let request = pb::ClassifyRequest::new(["I loved this film.", "The food was cold."])
//!     .with_model("classifier")
//!     .with_top_k(1)
//!     .with_truncate(Truncation::None);
//! # assert_eq!(request.truncate(), pb::Truncation::None);
//! # assert_eq!(request.inputs.len(), 2);
//! ```

use tonic::{IntoRequest, Request, Status};

use crate::pooling_builders::pooling_builders;
use crate::{Client, pb};

pooling_builders!(pb::ClassifyRequest, model: "The classifying model (empty: the server's first classifier, else its first reranker).", truncate: "What to do with an input longer than the model's input limit.");

impl pb::ClassifyRequest {
    /// Classifies `inputs` (at least one) with the default classifying model; the
    /// `with_*` methods set the rest.
    pub fn new<S: Into<String>>(inputs: impl IntoIterator<Item = S>) -> Self {
        Self {
            inputs: inputs.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Return only each input's `top_k` highest scored labels (0: all of them).
    pub fn with_top_k(mut self, top_k: i32) -> Self {
        self.top_k = top_k;
        self
    }
}

/// The inputs' label scores ([`Client::classify`]), in input order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Classifications {
    /// The model that classified them.
    pub model: String,
    /// One per input, in the order of the request's `inputs`.
    pub results: Vec<ClassifiedText>,
}

/// One input's label scores.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassifiedText {
    /// The input's position in the request's `inputs`.
    pub index: usize,
    /// Its labels, highest score first (or the `top_k` highest).
    pub labels: Vec<ScoredLabel>,
    /// Tokens the input used (after truncation).
    pub tokens: i32,
}

/// One label's score: a softmax probability for a single-label classifier (an input's
/// sum to 1), the label's sigmoid for a multi-label one or a reranker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScoredLabel {
    /// The label's name (the model's `id2label`, `LABEL_i` where it names none).
    pub label: String,
    /// Its score, in `0..=1`.
    pub score: f32,
}

impl ClassifiedText {
    /// The highest scored label, when the response holds any.
    pub fn top(&self) -> Option<&ScoredLabel> {
        self.labels.first()
    }

    /// The score of `label`, when the response holds it.
    pub fn score(&self, label: &str) -> Option<f32> {
        self.labels
            .iter()
            .find(|l| l.label == label)
            .map(|l| l.score)
    }
}

impl Classifications {
    fn from_response(response: pb::ClassifyResponse) -> Result<Self, Status> {
        let results = response
            .results
            .into_iter()
            .map(|r| {
                let index = usize::try_from(r.index).map_err(|_| {
                    Status::internal(format!("Classify returned the index {}", r.index))
                })?;
                let labels = r
                    .labels
                    .into_iter()
                    .map(|l| ScoredLabel {
                        label: l.label,
                        score: l.score,
                    })
                    .collect();
                Ok(ClassifiedText {
                    index,
                    labels,
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
    /// Scores the labels of each of the request's inputs (a classifying model: empty
    /// `model` selects the server's first classifier, else its first reranker), results
    /// in input order. Retried like the other unary calls; a request without a priority
    /// gets the client's default. A model that does not classify is
    /// FAILED_PRECONDITION; an input over the limit under [`Truncation::None`](crate::Truncation::None) is
    /// INVALID_ARGUMENT.
    pub async fn classify(
        &self,
        request: impl IntoRequest<pb::ClassifyRequest>,
    ) -> Result<Classifications, Status> {
        let r = self
            .unary(self.classify_request(request), |mut raw, r| async move {
                raw.classify(r).await
            })
            .await?;
        Classifications::from_response(r.into_inner())
    }

    /// `request` as [`Client::classify`] sends it: with a priority.
    pub(crate) fn classify_request(
        &self,
        request: impl IntoRequest<pb::ClassifyRequest>,
    ) -> Request<pb::ClassifyRequest> {
        self.with_default_priority(request.into_request())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Truncation;

    #[test]
    fn builders_set_the_fields() {
        let request = pb::ClassifyRequest::new(["a", "b"])
            .with_model("classifier")
            .with_top_k(2)
            .with_truncate(Truncation::None)
            .with_request_id("c-1")
            .with_priority(-5);
        assert_eq!(
            request,
            pb::ClassifyRequest {
                model: "classifier".into(),
                inputs: vec!["a".into(), "b".into()],
                top_k: 2,
                truncate: pb::Truncation::None as i32,
                request_id: "c-1".into(),
                priority: -5,
            }
        );
        // Unset, the request leaves truncation to the server (TRUNCATION_UNSPECIFIED: END).
        let plain = pb::ClassifyRequest::new(vec![String::from("x")]);
        assert_eq!(plain.truncate(), pb::Truncation::Unspecified);
        assert_eq!((plain.top_k, plain.priority), (0, 0));
    }

    #[test]
    fn responses_become_classifications() {
        let label = |label: &str, score| pb::LabelScore {
            label: label.into(),
            score,
        };
        let classified = Classifications::from_response(pb::ClassifyResponse {
            model: "classifier".into(),
            results: vec![
                pb::Classification {
                    index: 0,
                    labels: vec![label("positive", 0.75), label("negative", 0.25)],
                    tokens: 7,
                },
                pb::Classification {
                    index: 1,
                    labels: vec![],
                    tokens: 3,
                },
            ],
        })
        .expect("classifications");
        assert_eq!(classified.model, "classifier");
        let first = &classified.results[0];
        assert_eq!((first.index, first.tokens), (0, 7));
        assert_eq!(first.top().map(|l| l.label.as_str()), Some("positive"));
        assert_eq!(first.score("negative"), Some(0.25));
        assert_eq!(first.score("neutral"), None);
        assert_eq!(classified.results[1].top(), None);

        let bad = Classifications::from_response(pb::ClassifyResponse {
            model: "classifier".into(),
            results: vec![pb::Classification {
                index: -1,
                ..Default::default()
            }],
        })
        .expect_err("a negative index");
        assert_eq!(bad.code(), tonic::Code::Internal);
    }
}
