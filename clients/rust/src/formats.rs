//! Structured output: builders for [`pb::GenerateRequest::response_format`].
//!
//! A complete output ends with `FINISH_REASON_STOP`; `FINISH_REASON_LENGTH` means
//! `max_tokens` cut it short (JSON may then not parse).
//!
//! ```
//! use mlx_grpc_client::pb;
//!
//! let schema = r#"{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}"#;
//! let request = pb::GenerateRequest {
//!     response_format: Some(pb::ResponseFormat::json_schema(schema)),
//!     ..Default::default()
//! };
//! # assert!(request.response_format.is_some());
//! ```

use crate::pb::ResponseFormat;
use crate::pb::response_format::{Choice, Format};

impl ResponseFormat {
    /// JSON that validates against a JSON Schema document (its text, e.g. from `serde_json::to_string`).
    pub fn json_schema(schema: impl Into<String>) -> Self {
        Self::of(Format::JsonSchema(schema.into()))
    }

    /// Any JSON object.
    pub fn json_object() -> Self {
        Self::of(Format::JsonObject(true))
    }

    /// Text the whole of which matches `pattern` (Rust regex syntax).
    pub fn regex(pattern: impl Into<String>) -> Self {
        Self::of(Format::Regex(pattern.into()))
    }

    /// Text matching a Lark grammar (start rule `start`).
    pub fn grammar(lark: impl Into<String>) -> Self {
        Self::of(Format::Grammar(lark.into()))
    }

    /// Exactly one of `options`.
    pub fn choice<S: Into<String>>(options: impl IntoIterator<Item = S>) -> Self {
        Self::of(Format::Choice(Choice {
            options: options.into_iter().map(Into::into).collect(),
        }))
    }

    fn of(format: Format) -> Self {
        Self {
            format: Some(format),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_set_one_field_of_the_oneof() {
        assert_eq!(
            ResponseFormat::json_schema("{}").format,
            Some(Format::JsonSchema("{}".into()))
        );
        assert_eq!(
            ResponseFormat::json_object().format,
            Some(Format::JsonObject(true))
        );
        assert_eq!(
            ResponseFormat::regex("a+").format,
            Some(Format::Regex("a+".into()))
        );
        assert_eq!(
            ResponseFormat::grammar("start: \"x\"").format,
            Some(Format::Grammar("start: \"x\"".into()))
        );
        let choice = ResponseFormat::choice(["a", "b"]);
        assert_eq!(
            choice.format,
            Some(Format::Choice(Choice {
                options: vec!["a".into(), "b".into()]
            }))
        );
    }
}
