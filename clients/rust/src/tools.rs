//! Tools: builders for [`pb::Tool`], [`pb::ToolChoice`] and the chat messages of an
//! agent loop, and the assistant message of a [`GenerationResult`].
//!
//! Give [`pb::ChatMessages`] the tools and a tool choice; the model's calls come back in
//! [`GenerationResult::tool_calls`] (streaming: each delta's `tool_call_deltas` as they
//! are written, its `tool_calls` once complete) and the answer ends with
//! `FINISH_REASON_TOOL_CALLS`. Run them, append [`GenerationResult::assistant_message`]
//! and a [`pb::ChatMessage::tool_result`] per call, and generate again. A model's
//! `capabilities.chat.tool_calling` says whether it can (tools on one that cannot are
//! FAILED_PRECONDITION).
//!
//! ```
//! use mlx_grpc_client::{json_string, pb};
//!
//! let weather = pb::Tool::function(
//!     "get_weather",
//!     "The current weather in a city",
//!     r#"{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}"#,
//! );
//! let chat = pb::ChatMessages {
//!     messages: vec![pb::ChatMessage::user("What is the weather in Paris?")],
//!     tools: vec![weather],
//!     tool_choice: Some(pb::ToolChoice::required()),
//!     parallel_tool_calls: Some(false),
//!     enable_thinking: Some(false),
//!     template_kwargs: [("reasoning_effort".to_string(), json_string("low"))].into(),
//! };
//! # assert_eq!(chat.template_kwargs["reasoning_effort"], r#""low""#);
//! ```

use crate::generation::GenerationResult;
use crate::pb;

impl pb::Tool {
    /// A function the model may call. `parameters_json_schema` is the JSON Schema (its
    /// text, e.g. from `serde_json::to_string`) of its arguments, an object; empty for none.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters_json_schema: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters_json_schema: parameters_json_schema.into(),
        }
    }
}

impl pb::ToolChoice {
    /// The model answers or calls tools, as it chooses (the default).
    pub fn auto() -> Self {
        Self::of(pb::ToolChoiceMode::Auto, "")
    }

    /// The model does not call tools (they are still shown to it).
    pub fn none() -> Self {
        Self::of(pb::ToolChoiceMode::None, "")
    }

    /// The model calls at least one tool, enforced by the grammar: the arguments
    /// validate against the tool's parameters.
    pub fn required() -> Self {
        Self::of(pb::ToolChoiceMode::Required, "")
    }

    /// The model calls the tool named `name`, enforced by the grammar.
    pub fn function(name: impl Into<String>) -> Self {
        Self::of(pb::ToolChoiceMode::Function, name)
    }

    fn of(mode: pb::ToolChoiceMode, name: impl Into<String>) -> Self {
        Self {
            mode: mode as i32,
            function_name: name.into(),
        }
    }
}

impl pb::ChatMessage {
    /// A message of `role` ("system", "user", "assistant") with text `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    /// A "system" message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A "user" message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// The "tool" message answering the call with id `call_id` (a [`pb::ToolCall`]'s
    /// `id`): `content` is the tool's output, usually JSON text.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: call_id.into(),
            ..Self::new("tool", content)
        }
    }
}

impl GenerationResult {
    /// The assistant message of this result, to append to the conversation before the
    /// next turn: its text, reasoning and tool calls.
    pub fn assistant_message(&self) -> pb::ChatMessage {
        pb::ChatMessage {
            reasoning: self.reasoning.clone(),
            tool_calls: self.tool_calls.clone(),
            ..pb::ChatMessage::new("assistant", self.text.clone())
        }
    }

    /// Why the generation ended (`ToolCalls` after tool calls); `Unspecified` when the
    /// stream ended without a finished event.
    pub fn finish_reason(&self) -> pb::FinishReason {
        self.finished
            .as_ref()
            .map_or(pb::FinishReason::Unspecified, |f| f.reason())
    }
}

/// `text` as a JSON string (quoted and escaped), for a `template_kwargs` value, each of
/// which is JSON text: `json_string("low")` is `"low"` with its quotes.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;

    #[test]
    fn builders_set_the_fields() {
        let tool = pb::Tool::function("get_weather", "The weather", r#"{"type": "object"}"#);
        assert_eq!(
            tool,
            pb::Tool {
                name: "get_weather".into(),
                description: "The weather".into(),
                parameters_json_schema: r#"{"type": "object"}"#.into(),
            }
        );
        assert_eq!(pb::ToolChoice::auto().mode(), pb::ToolChoiceMode::Auto);
        assert_eq!(pb::ToolChoice::none().mode(), pb::ToolChoiceMode::None);
        assert_eq!(
            pb::ToolChoice::required().mode(),
            pb::ToolChoiceMode::Required
        );
        assert_eq!(
            pb::ToolChoice::function("get_time"),
            pb::ToolChoice {
                mode: pb::ToolChoiceMode::Function as i32,
                function_name: "get_time".into()
            }
        );
        assert_eq!(
            pb::ChatMessage::user("hi"),
            pb::ChatMessage {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            }
        );
        assert_eq!(pb::ChatMessage::system("be brief").role, "system");
        let result = pb::ChatMessage::tool_result("call_1", r#"{"temperature": 21}"#);
        assert_eq!(
            (
                result.role.as_str(),
                result.tool_call_id.as_str(),
                result.content.as_str()
            ),
            ("tool", "call_1", r#"{"temperature": 21}"#)
        );
        assert_eq!(json_string("low"), r#""low""#);
        assert_eq!(json_string("a \"b\"\\\n\u{1}é"), r#""a \"b\"\\\n\u0001é""#);
    }

    fn delta(d: pb::TokenDelta) -> Event {
        Event::Delta(d)
    }

    #[test]
    fn results_keep_each_choice_and_the_prompt_logprobs() {
        let text = |t: &str, id| {
            delta(pb::TokenDelta {
                token_ids: vec![id],
                text: t.into(),
                ..Default::default()
            })
        };
        let finished = |reason: pb::FinishReason| {
            Event::Finished(pb::GenerationFinished {
                reason: reason as i32,
                ..Default::default()
            })
        };
        let prompt = vec![pb::TokenLogprob {
            token_id: 5,
            logprob: -1.5,
            ..Default::default()
        }];
        let mut r = GenerationResult::default();
        r.record(
            0,
            Event::PromptLogprobs(pb::PromptLogprobs {
                tokens: prompt.clone(),
            }),
        );
        r.record(1, text("a", 1));
        r.record(0, text("b", 2));
        r.record(1, text("c", 3));
        r.record(0, finished(pb::FinishReason::Eos));
        r.record(1, finished(pb::FinishReason::Length));
        assert_eq!(r.prompt_logprobs, prompt);
        let choices: Vec<_> = r
            .choices
            .iter()
            .map(|c| {
                (
                    c.index,
                    c.token_ids.clone(),
                    c.text.as_str(),
                    c.finished.clone().map(|f| f.reason()),
                )
            })
            .collect();
        assert_eq!(
            choices,
            [
                (0, vec![2], "b", Some(pb::FinishReason::Eos)),
                (1, vec![1, 3], "ac", Some(pb::FinishReason::Length))
            ]
        );
        assert_eq!((r.token_ids.as_slice(), r.text.as_str()), (&[2][..], "b"));
        assert_eq!(r.finish_reason(), pb::FinishReason::Eos);
    }

    #[test]
    fn results_join_reasoning_and_complete_calls() {
        let call = pb::ToolCall {
            id: "call_0".into(),
            name: "get_weather".into(),
            arguments_json: r#"{"city": "Paris"}"#.into(),
        };
        let other = pb::ToolCall {
            id: "call_1".into(),
            name: "get_time".into(),
            arguments_json: "{}".into(),
        };
        let piece = |index, id: &str, name: &str, arguments: &str| pb::ToolCallDelta {
            index,
            id: id.into(),
            name: name.into(),
            arguments_json: arguments.into(),
        };
        let events = [
            Event::Started(pb::GenerationStarted {
                prompt_tokens: 12,
                ..Default::default()
            }),
            delta(pb::TokenDelta {
                token_ids: vec![1, 2],
                reasoning: "The user wants ".into(),
                ..Default::default()
            }),
            delta(pb::TokenDelta {
                token_ids: vec![3],
                reasoning: "the weather.".into(),
                text: "Let me look.".into(),
                ..Default::default()
            }),
            delta(pb::TokenDelta {
                token_ids: vec![4],
                tool_call_deltas: vec![piece(0, "call_0", "get_weather", r#"{"city": "#)],
                ..Default::default()
            }),
            delta(pb::TokenDelta {
                token_ids: vec![5],
                tool_call_deltas: vec![piece(0, "", "", r#""Paris"}"#)],
                tool_calls: vec![call.clone()],
                ..Default::default()
            }),
            delta(pb::TokenDelta {
                token_ids: vec![6],
                tool_call_deltas: vec![piece(1, "call_1", "get_time", "{}")],
                tool_calls: vec![other.clone()],
                ..Default::default()
            }),
            Event::Finished(pb::GenerationFinished {
                reason: pb::FinishReason::ToolCalls as i32,
                ..Default::default()
            }),
        ];
        let mut r = GenerationResult::default();
        assert_eq!(r.finish_reason(), pb::FinishReason::Unspecified);
        for event in events {
            r.record(0, event);
        }
        assert_eq!(r.token_ids, [1, 2, 3, 4, 5, 6]);
        assert_eq!(
            (r.text.as_str(), r.reasoning.as_str()),
            ("Let me look.", "The user wants the weather.")
        );
        // The complete calls, once each: the deltas are only their pieces.
        assert_eq!(r.tool_calls, [call.clone(), other.clone()]);
        assert_eq!(r.finish_reason(), pb::FinishReason::ToolCalls);
        assert_eq!(
            r.assistant_message(),
            pb::ChatMessage {
                role: "assistant".into(),
                content: "Let me look.".into(),
                reasoning: "The user wants the weather.".into(),
                tool_calls: vec![call, other],
                ..Default::default()
            }
        );

        let mut plain = GenerationResult::default();
        plain.record(
            0,
            delta(pb::TokenDelta {
                token_ids: vec![7],
                text: "Sunny.".into(),
                ..Default::default()
            }),
        );
        assert_eq!(
            plain.assistant_message(),
            pb::ChatMessage::new("assistant", "Sunny.")
        );
    }
}
