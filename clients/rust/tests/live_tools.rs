//! Tools against a live server at MLXGRPC_ADDRESS: its model named "tools" (the test
//! fixture's tiny random-weight Qwen3-style model) calls a tool under tool choice
//! REQUIRED and FUNCTION, never under NONE, and takes the results back. A server
//! without a model named "tools" (the default one never has it) skips these: each
//! prints why and passes, even under MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they
//! are skipped like every live test (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, GenerationResult, error_details, pb};
use pb::generate_request::Prompt;
use support::{Live, live};

const WEATHER: &str = r#"{"type": "object", "required": ["city"], "additionalProperties": false,
    "properties": {"city": {"type": "string", "maxLength": 16}}}"#;
const TIME: &str = r#"{"type": "object", "required": ["zone"], "additionalProperties": false,
    "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}}}"#;

/// Each tool and its required argument.
const TOOLS: [(&str, &str, &str); 2] =
    [("get_weather", WEATHER, "city"), ("get_time", TIME, "zone")];

/// The live server when it serves a model named "tools"; `None` (the test then passes
/// after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_tools() -> Option<Live> {
    let s = live().await?;
    let Some(tools) = s.models.iter().find(|m| m.name == "tools") else {
        support::skipped(format!(
            "{} serves no model named \"tools\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    };
    let chat = tools.capabilities.as_ref().and_then(|c| c.chat.clone());
    assert!(
        chat.as_ref().is_some_and(|c| c.tool_calling),
        "model \"tools\" has no tool calling: {chat:?}"
    );
    Some(s)
}

fn turn(
    messages: Vec<pb::ChatMessage>,
    choice: pb::ToolChoice,
    max_tokens: i32,
) -> pb::GenerateRequest {
    pb::GenerateRequest {
        model: "tools".into(),
        prompt: Some(Prompt::Chat(pb::ChatMessages {
            messages,
            tools: TOOLS
                .iter()
                .map(|(name, schema, _)| {
                    pb::Tool::function(*name, format!("{name} of a place"), *schema)
                })
                .collect(),
            tool_choice: Some(choice),
            // One call, then the answer ends: random weights would rather start another.
            parallel_tool_calls: Some(false),
            enable_thinking: Some(false),
            ..Default::default()
        })),
        stopping: Some(pb::StoppingCriteria {
            max_tokens: Some(max_tokens),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ask_weather() -> Vec<pb::ChatMessage> {
    vec![pb::ChatMessage::user("What is the weather in Paris?")]
}

/// Asserts `r` ended with tool calls, each of a given tool (`name`, when given) with a
/// JSON object of arguments holding the tool's required key.
fn check_calls(r: &GenerationResult, name: Option<&str>) {
    assert_eq!(
        (r.finish_reason(), r.tool_calls.is_empty()),
        (pb::FinishReason::ToolCalls, false),
        "text {:?}",
        r.text
    );
    for call in &r.tool_calls {
        let (_, _, key) = TOOLS
            .iter()
            .find(|(tool, _, _)| *tool == call.name)
            .unwrap_or_else(|| panic!("call of an unknown tool: {call:?}"));
        if let Some(name) = name {
            assert_eq!(call.name, name);
        }
        assert!(!call.id.is_empty(), "{call:?}");
        let args: serde_json::Value = serde_json::from_str(&call.arguments_json)
            .unwrap_or_else(|e| panic!("arguments {:?}: {e}", call.arguments_json));
        assert!(
            args.as_object().is_some_and(|a| a.contains_key(*key)),
            "arguments {:?} lack {key:?}",
            call.arguments_json
        );
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn tool_choice_required_calls_a_tool() {
    let Some(s) = with_tools().await else { return };
    let first = s
        .client
        .generate_text(turn(ask_weather(), pb::ToolChoice::required(), 96))
        .await
        .expect("Generate");
    check_calls(&first, None);

    // The calls and their results go back; NONE answers in text.
    let mut history = ask_weather();
    history.push(first.assistant_message());
    for call in &first.tool_calls {
        history.push(pb::ChatMessage::tool_result(
            &call.id,
            r#"{"temperature_c": 21, "sky": "clear"}"#,
        ));
    }
    let answer = s
        .client
        .generate_text(turn(history, pb::ToolChoice::none(), 8))
        .await
        .expect("Generate with the results");
    let prompt = |r: &GenerationResult| r.started.as_ref().map_or(0, |st| st.prompt_tokens);
    assert!(answer.tool_calls.is_empty(), "{:?}", answer.tool_calls);
    assert!(
        prompt(&answer) > prompt(&first) + first.token_ids.len() as i32,
        "second turn: {} prompt tokens after {} + {}",
        prompt(&answer),
        prompt(&first),
        first.token_ids.len()
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn tool_choice_function_calls_that_one() {
    let Some(s) = with_tools().await else { return };
    let r = s
        .client
        .generate_text(turn(
            ask_weather(),
            pb::ToolChoice::function("get_time"),
            96,
        ))
        .await
        .expect("Generate");
    check_calls(&r, Some("get_time"));
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn tool_choice_none_never_calls() {
    let Some(s) = with_tools().await else { return };
    let events = support::events(&s.client, turn(ask_weather(), pb::ToolChoice::none(), 24)).await;
    let (mut pieces, mut calls) = (0, 0);
    for event in &events {
        match event {
            mlx_grpc_client::Event::Delta(d) => {
                pieces += d.tool_call_deltas.len();
                calls += d.tool_calls.len();
            }
            mlx_grpc_client::Event::Finished(f) => {
                assert_ne!(f.reason(), pb::FinishReason::ToolCalls)
            }
            mlx_grpc_client::Event::Started(_) | mlx_grpc_client::Event::PromptLogprobs(_) => {}
        }
    }
    assert_eq!((pieces, calls), (0, 0), "tool choice NONE");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn tools_on_a_model_without_tool_calling_fail_precondition() {
    let Some(s) = live().await else { return };
    let chat = s
        .generator
        .capabilities
        .as_ref()
        .and_then(|c| c.chat.clone());
    if chat.is_some_and(|c| c.tool_calling) {
        support::skipped(format!("{} has tool calling", s.generator.name));
        return;
    }
    let mut req = turn(ask_weather(), pb::ToolChoice::auto(), 8);
    req.model = s.generator.name.clone();
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("tools on a model without tool calling");
    assert_eq!(
        error_details(&status).code,
        Code::FailedPrecondition,
        "{status}"
    );
}
