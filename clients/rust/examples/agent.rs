//! One turn of an agent loop: the model calls a get_weather tool (tool choice REQUIRED),
//! the call runs here, its result goes back as a "tool" message, and the model answers
//! (tool choice NONE). The server comes from MLXGRPC_ADDRESS (default localhost:50051),
//! the model from MLXGRPC_MODEL (default "tools", the test fixture's tool-capable
//! model), the bearer token, when the server needs one, from MLXGRPC_TOKEN. Exits
//! non-zero unless the first turn ended with FINISH_REASON_TOOL_CALLS and a call. Run with `MLXGRPC_ADDRESS=host:port cargo run --example agent`.

use std::time::Duration;

use mlx_grpc_client::{Client, ConnectOptions, GenerationResult, pb};

/// The tool, run locally: a fake forecast for the city, as JSON text.
fn weather(city: &str) -> String {
    serde_json::json!({"city": city, "temperature_c": 21, "sky": "clear"}).to_string()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address =
        std::env::var("MLXGRPC_ADDRESS").unwrap_or_else(|_| "localhost:50051".to_string());
    let model = std::env::var("MLXGRPC_MODEL").unwrap_or_else(|_| "tools".to_string());
    let mut options = ConnectOptions::default().with_timeout(Duration::from_secs(60));
    options.bearer_token = std::env::var("MLXGRPC_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let client = Client::connect(&address, options).await?;

    let info = client.model_info(&model).await?;
    let chat = info.capabilities.and_then(|c| c.chat).unwrap_or_default();
    println!(
        "model {:?}: tool calling={} (parser {:?}, enforced={}), thinking={}",
        info.name,
        chat.tool_calling,
        chat.tool_parser,
        chat.tool_choice_enforced,
        !chat.reasoning_start.is_empty()
    );

    let get_weather = pb::Tool::function(
        "get_weather",
        "The current weather in a city",
        r#"{"type": "object", "required": ["city"], "additionalProperties": false,
            "properties": {"city": {"type": "string", "maxLength": 16}}}"#,
    );
    let mut messages = vec![pb::ChatMessage::user("What is the weather in Paris?")];
    let turn = |messages: &[pb::ChatMessage], choice: pb::ToolChoice, max_tokens: i32| {
        let request = pb::GenerateRequest {
            model: model.clone(),
            prompt: Some(pb::generate_request::Prompt::Chat(pb::ChatMessages {
                messages: messages.to_vec(),
                tools: vec![get_weather.clone()],
                tool_choice: Some(choice),
                parallel_tool_calls: Some(false), // one call, then the answer ends
                enable_thinking: Some(false),     // no reasoning before the call
                ..Default::default()
            })),
            stopping: Some(pb::StoppingCriteria {
                max_tokens: Some(max_tokens),
                ..Default::default()
            }),
            ..Default::default()
        };
        client.generate_text(request)
    };

    // 1. The model must call the tool (the grammar enforces the call's arguments).
    let first: GenerationResult = turn(&messages, pb::ToolChoice::required(), 96).await?;
    println!(
        "turn 1: {:?}, {} call(s)",
        first.finish_reason(),
        first.tool_calls.len()
    );
    if first.finish_reason() != pb::FinishReason::ToolCalls || first.tool_calls.is_empty() {
        return Err(format!(
            "turn 1 did not end with a tool call (text {:?})",
            first.text
        )
        .into());
    }

    // 2. Run each call here and send its result back, after the assistant's message.
    messages.push(first.assistant_message());
    for call in &first.tool_calls {
        println!("  call {}: {}({})", call.id, call.name, call.arguments_json);
        let args: serde_json::Value = serde_json::from_str(&call.arguments_json)?;
        let result = weather(args["city"].as_str().unwrap_or_default());
        println!("  result: {result}");
        messages.push(pb::ChatMessage::tool_result(&call.id, result));
    }

    // 3. The answer, with no more calls.
    let answer = turn(&messages, pb::ToolChoice::none(), 32).await?;
    println!("turn 2: {:?} [{:?}]", answer.text, answer.finish_reason());
    Ok(())
}
