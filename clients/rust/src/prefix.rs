//! The prefix cache: [`Client::prefetch`] brings the longest stored prefix of a prompt
//! into the cache's memory tier ahead of a Generate, and [`Client::close_session`] ends a
//! session's eviction affinity.
//!
//! ```
//! use mlx_grpc_client::{pb, text_request};
//!
//! let mut generate = text_request("A long shared system prompt ...", 64);
//! generate.session_id = "chat-42".into();
//! // The same prompt, model, session and adapter as that Generate:
//! let prefetch = pb::PrefetchRequest::from(&generate);
//! # assert_eq!(prefetch, pb::PrefetchRequest::text("A long shared system prompt ...").with_session_id("chat-42"));
//! ```

use tonic::{IntoRequest, Status};

use crate::{Client, pb};
use pb::prefetch_request::Prompt;

impl pb::PrefetchRequest {
    /// Prefetches raw text (tokenized as a Generate's `text` prompt, no chat template).
    pub fn text(text: impl Into<String>) -> Self {
        Self::with_prompt(Prompt::Text(text.into()))
    }

    /// Prefetches token ids, used as they are.
    pub fn tokens(ids: impl IntoIterator<Item = i32>) -> Self {
        Self::with_prompt(Prompt::Tokens(pb::TokenIds {
            ids: ids.into_iter().collect(),
        }))
    }

    /// Prefetches chat messages, rendered with the model's chat template as Generate would.
    pub fn chat(chat: pb::ChatMessages) -> Self {
        Self::with_prompt(Prompt::Chat(chat))
    }

    fn with_prompt(prompt: Prompt) -> Self {
        Self {
            prompt: Some(prompt),
            ..Default::default()
        }
    }

    /// The generation model (empty: the default one).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The session the prompt belongs to: the entry brought into memory takes its affinity.
    pub fn with_session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = session_id.into();
        self
    }

    /// The loaded adapter the later Generate will name (prefixes are kept per adapter).
    pub fn with_adapter(mut self, adapter: impl Into<String>) -> Self {
        self.adapter = adapter.into();
        self
    }
}

impl From<&pb::GenerateRequest> for pb::PrefetchRequest {
    /// The prompt, model, session and adapter `request` would send.
    fn from(request: &pb::GenerateRequest) -> Self {
        use pb::generate_request::Prompt as Given;
        Self {
            model: request.model.clone(),
            session_id: request.session_id.clone(),
            prompt: request.prompt.clone().map(|p| match p {
                Given::Text(text) => Prompt::Text(text),
                Given::Tokens(ids) => Prompt::Tokens(ids),
                Given::Chat(chat) => Prompt::Chat(chat),
            }),
            adapter: request.adapter.clone(),
        }
    }
}

impl Client {
    /// Brings the longest stored prefix of the request's prompt into the prefix cache's
    /// memory tier (from the disk tier if need be) ahead of a Generate; nothing is
    /// generated. The response has `prompt_tokens`, `cached_tokens` (at most
    /// `prompt_tokens - 1`) and `tier()`: `pb::CacheTier::Memory`, `Disk`, or
    /// `Unspecified` when nothing of the prompt is stored. A request without a prompt is
    /// INVALID_ARGUMENT; the prefix cache switched off is FAILED_PRECONDITION. Build the
    /// request with [`pb::PrefetchRequest::text`] (`tokens`, `chat`) and its `with_*`
    /// methods, or from the `pb::GenerateRequest` it precedes.
    pub async fn prefetch(
        &self,
        request: impl IntoRequest<pb::PrefetchRequest>,
    ) -> Result<pb::PrefetchResponse, Status> {
        let r = self
            .unary(request, |mut raw, r| async move { raw.prefetch(r).await })
            .await?;
        Ok(r.into_inner())
    }

    /// Ends session `session_id` (the `session_id` its Generate requests named) on
    /// `model` (empty: the default generation model): the prefix-cache entries its
    /// requests stored lose their eviction affinity; nothing is deleted. Returns how
    /// many entries did (0: no such open session).
    pub async fn close_session(&self, model: &str, session_id: &str) -> Result<i32, Status> {
        let req = pb::CloseSessionRequest {
            model: model.to_string(),
            session_id: session_id.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.close_session(r).await })
            .await?;
        Ok(r.into_inner().entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_set_the_fields() {
        let chat = pb::ChatMessages {
            messages: vec![pb::ChatMessage::user("hi")],
            ..Default::default()
        };
        assert_eq!(
            pb::PrefetchRequest::chat(chat.clone())
                .with_model("m")
                .with_session_id("s-1")
                .with_adapter("tone"),
            pb::PrefetchRequest {
                model: "m".into(),
                session_id: "s-1".into(),
                prompt: Some(Prompt::Chat(chat)),
                adapter: "tone".into(),
            }
        );
        assert_eq!(
            pb::PrefetchRequest::tokens([1, 2]).prompt,
            Some(Prompt::Tokens(pb::TokenIds { ids: vec![1, 2] }))
        );
        assert_eq!(
            pb::PrefetchRequest::text("x").prompt,
            Some(Prompt::Text("x".into()))
        );
    }

    #[test]
    fn a_generate_request_gives_its_prompt_model_session_and_adapter() {
        let mut generate = crate::text_request("some text", 4);
        generate.model = "m".into();
        generate.session_id = "s-2".into();
        generate.adapter = "tone".into();
        generate.request_id = "r-1".into();
        assert_eq!(
            pb::PrefetchRequest::from(&generate),
            pb::PrefetchRequest::text("some text")
                .with_model("m")
                .with_session_id("s-2")
                .with_adapter("tone")
        );
        let none = pb::PrefetchRequest::from(&pb::GenerateRequest::default());
        assert_eq!(none.prompt, None); // the server refuses it: INVALID_ARGUMENT
    }
}
