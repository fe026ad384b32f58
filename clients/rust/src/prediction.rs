//! Predicted outputs: what the answer is expected to mostly repeat (a file being edited, a
//! passage being corrected), as text or token ids. Its tokens are proposed as speculative
//! drafts and verified by the model, so the output is the same as without it, only sooner
//! where it matches; the finished event's usage reports `accepted_prediction_tokens` and
//! `rejected_prediction_tokens` (both counted in `draft_tokens`). It needs a model whose
//! `capabilities.speculation.external_tokens` is set; with speculation `Off` it is
//! INVALID_ARGUMENT.
//!
//! ```
//! use mlx_grpc_client::{pb, text_request};
//!
//! let source = "fn total(xs: &[i32]) -> i32 { xs.iter().sum() }\n";
//! let request = text_request(format!("Rename total to sum in:\n{source}"), 64).with_prediction(source);
//! # assert_eq!(request.prediction, Some(pb::Prediction::text(source)));
//! let by_ids = text_request("...", 64).with_prediction(vec![791, 4062, 13]);
//! # assert_eq!(by_ids.prediction, Some(pb::Prediction::tokens([791, 4062, 13])));
//! ```

use crate::pb;
use pb::prediction::Content;

impl pb::Prediction {
    /// A prediction as text, tokenized by the server with the model's tokenizer (no
    /// special tokens).
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: Some(Content::Text(text.into())),
        }
    }

    /// A prediction as token ids, used as they are (a result's `token_ids`, for one).
    pub fn tokens(ids: impl IntoIterator<Item = i32>) -> Self {
        Self {
            content: Some(Content::Tokens(pb::TokenIds {
                ids: ids.into_iter().collect(),
            })),
        }
    }
}

impl From<&str> for pb::Prediction {
    fn from(text: &str) -> Self {
        Self::text(text)
    }
}

impl From<String> for pb::Prediction {
    fn from(text: String) -> Self {
        Self::text(text)
    }
}

impl From<&String> for pb::Prediction {
    fn from(text: &String) -> Self {
        Self::text(text.as_str())
    }
}

impl From<Vec<i32>> for pb::Prediction {
    fn from(ids: Vec<i32>) -> Self {
        Self {
            content: Some(Content::Tokens(pb::TokenIds { ids })),
        }
    }
}

impl From<&[i32]> for pb::Prediction {
    fn from(ids: &[i32]) -> Self {
        Self::tokens(ids.iter().copied())
    }
}

impl From<pb::TokenIds> for pb::Prediction {
    fn from(ids: pb::TokenIds) -> Self {
        Self {
            content: Some(Content::Tokens(ids)),
        }
    }
}

impl pb::GenerateRequest {
    /// Sets the request's prediction: text (`&str`, `String`), token ids (`Vec<i32>`,
    /// `&[i32]`, [`pb::TokenIds`]) or a [`pb::Prediction`].
    pub fn with_prediction(mut self, prediction: impl Into<pb::Prediction>) -> Self {
        self.prediction = Some(prediction.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text_request;

    #[test]
    fn text_lands_in_the_text_case() {
        let req = text_request("a", 8).with_prediction("def f():\n    return 1\n");
        assert_eq!(
            req.prediction.unwrap().content,
            Some(Content::Text("def f():\n    return 1\n".into()))
        );
        // Set, if empty.
        assert_eq!(
            pb::Prediction::from(String::new()).content,
            Some(Content::Text(String::new()))
        );
        let owned = String::from("b");
        assert_eq!(pb::Prediction::from(&owned), pb::Prediction::text("b"));
    }

    #[test]
    fn token_ids_land_in_the_tokens_case() {
        let want = pb::Prediction {
            content: Some(Content::Tokens(pb::TokenIds { ids: vec![5, 6, 7] })),
        };
        assert_eq!(pb::Prediction::tokens([5, 6, 7]), want);
        assert_eq!(pb::Prediction::from(vec![5, 6, 7]), want);
        assert_eq!(pb::Prediction::from(&[5, 6, 7][..]), want);
        assert_eq!(
            pb::Prediction::from(pb::TokenIds { ids: vec![5, 6, 7] }),
            want
        );
        let req = text_request("a", 8).with_prediction(vec![5, 6, 7]);
        assert_eq!(req.prediction, Some(want.clone()));
        // Another call replaces it; a prediction leaves the rest of the request alone.
        let req = req.with_prediction(want.clone()).with_prediction("x");
        assert_eq!(req.prediction, Some(pb::Prediction::text("x")));
        assert_eq!(req.stopping.and_then(|s| s.max_tokens), Some(8));
    }

    #[test]
    fn the_prediction_is_field_18_on_the_wire() {
        use prost::Message;
        let req = pb::GenerateRequest::default().with_prediction(vec![5]);
        // Field 18, wire type 2: the tag is the varint 18 << 3 | 2 = 146.
        let bytes = req.encode_to_vec();
        assert_eq!(&bytes[..2], &[0x92, 0x01]);
        let back = pb::GenerateRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.prediction, Some(pb::Prediction::tokens([5])));
    }
}
