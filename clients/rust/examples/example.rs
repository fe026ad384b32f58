//! Tour of the client: model info, streaming generation, cancellation, embeddings, an
//! answer constrained by a JSON schema and error details. Run with
//! `MLXGRPC_ADDRESS=host:port cargo run --example example` (MLXGRPC_TOKEN, when set, is
//! the bearer token of every call).
//!
//! With MLXGRPC_IMAGE set to an image file (PNG, JPEG, WebP or GIF), it runs the image
//! step instead: the image and a question go to MLXGRPC_MODEL (default "vision", the
//! test fixture's vision-language model) and the streamed answer is printed.

use std::io::Write;
use std::time::Duration;

use mlx_grpc_client::{Client, ConnectOptions, Event, error_details, pb, text_request};

/// A text prompt that runs its full `max_tokens` (end-of-sequence ignored).
fn long_request(prompt: &str, max_tokens: i32) -> pb::GenerateRequest {
    let mut request = text_request(prompt, max_tokens);
    request.stopping.as_mut().expect("stopping").ignore_eos = true;
    request
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// The image step: the image at `path` (its media type from the file's signature) and a
/// question to `model`, the answer printed as it streams.
async fn describe_image(
    client: &Client,
    model: &str,
    path: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let image = pb::ContentPart::image_file(path)?;
    if let Some(pb::content_part::Part::Image(i)) = &image.part {
        print!(
            "image {path} ({}, {} bytes) to {model:?}: ",
            i.media_type,
            i.data.len()
        );
    }
    let mut request = text_request("", 32);
    request.model = model.into();
    request.prompt = Some(pb::generate_request::Prompt::Chat(pb::ChatMessages {
        messages: vec![pb::ChatMessage::user_parts([
            image,
            pb::ContentPart::text("Describe the image."),
        ])],
        ..Default::default()
    }));
    let mut generation = client.generate(request);
    loop {
        match generation.next_event().await {
            Ok(Some(Event::Started(s))) => print!("[{} prompt tokens] ", s.prompt_tokens),
            Ok(Some(Event::Delta(d))) => print!("{}", d.text),
            Ok(Some(Event::Finished(f))) => println!(
                "\n[finished: {:?}, {} tokens]",
                f.reason(),
                f.usage.map_or(0, |u| u.completion_tokens)
            ),
            Ok(Some(Event::PromptLogprobs(_))) => {}
            Ok(None) => return Ok(()),
            Err(status) => {
                let d = error_details(&status);
                println!(
                    "\nimage refused: {:?} {:?}; reason {}; field violations {:?}",
                    status.code(),
                    status.message(),
                    d.error_info.as_ref().map_or("-", |e| e.reason.as_str()),
                    d.field_violations
                        .iter()
                        .map(|v| v.field.as_str())
                        .collect::<Vec<_>>()
                );
                return Err(status.into());
            }
        }
        std::io::stdout().flush()?;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address =
        std::env::var("MLXGRPC_ADDRESS").unwrap_or_else(|_| "localhost:50051".to_string());
    let mut options = ConnectOptions::default().with_timeout(Duration::from_secs(60));
    // A server with a tokens file: the bearer token of every call.
    options.bearer_token = std::env::var("MLXGRPC_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let client = Client::connect(&address, options).await?;

    if let Ok(path) = std::env::var("MLXGRPC_IMAGE") {
        let model = std::env::var("MLXGRPC_MODEL").unwrap_or_else(|_| "vision".to_string());
        return describe_image(&client, &model, &path).await;
    }

    // 1. Model info.
    let info = client.model_info("").await?;
    println!(
        "model {} ({:?}): vocab {}, context {}, dtype {}, generation {}",
        info.name,
        info.kind(),
        info.vocab_size,
        info.context_length,
        info.dtype,
        info.capabilities.as_ref().is_some_and(|c| c.generation),
    );

    // 2. Stream a generation, printing text deltas as they arrive.
    let mut generation = client.generate(long_request("Once upon a time", 24));
    print!("generate: ");
    while let Some(event) = generation.next_event().await? {
        match event {
            Event::Started(s) => print!("[{} prompt_tokens={}] ", s.request_id, s.prompt_tokens),
            Event::Delta(d) => print!("{}", d.text),
            Event::Finished(f) => println!(
                "\n[finished: {:?}, {} tokens]",
                f.reason(),
                f.usage.map_or(0, |u| u.completion_tokens)
            ),
            Event::PromptLogprobs(_) => {}
        }
        std::io::stdout().flush()?;
    }

    // 3. A long generation cancelled mid-way with the Cancel RPC (its request id is
    // assigned client-side, so it is known before anything is sent).
    let mut long = client.generate(long_request("Tell me a long story", 2000));
    let mut deltas = 0;
    while let Some(event) = long.next_event().await? {
        match event {
            Event::Delta(_) => {
                deltas += 1;
                if deltas == 3 {
                    let found = client.cancel(long.request_id()).await?;
                    println!(
                        "cancel {} after {deltas} deltas: found={found}",
                        long.request_id()
                    );
                }
            }
            Event::Finished(f) => println!(
                "cancelled stream finished: {:?} after {} tokens",
                f.reason(),
                f.usage.map_or(0, |u| u.completion_tokens)
            ),
            Event::Started(_) | Event::PromptLogprobs(_) => {}
        }
    }
    // Dropping a stream cancels the call too.
    let mut dropped = client.generate(long_request("Another story", 2000));
    let _ = dropped.next_event().await?;
    drop(dropped);
    println!("dropped a second long stream (client-side cancel)");

    // 4. Embeddings and cosine similarity.
    let vectors = client
        .embed_texts(["A man is eating food.", "A man is eating a piece of bread."])
        .await?;
    println!(
        "embed: {} vectors of length {}, cosine similarity {:.4}",
        vectors.len(),
        vectors[0].len(),
        cosine(&vectors[0], &vectors[1])
    );

    // 5. Structured output: an answer that validates against a JSON schema.
    let schema = r#"{"type": "object", "additionalProperties": false, "required": ["city", "country"],
        "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}}}"#;
    let mut structured = text_request("", 64);
    structured.prompt = Some(pb::generate_request::Prompt::Chat(pb::ChatMessages {
        messages: vec![pb::ChatMessage::user("Where is the Eiffel Tower?")],
        ..Default::default()
    }));
    structured.response_format = Some(pb::ResponseFormat::json_schema(schema));
    let answer = client.generate_text(structured).await?;
    let reason = answer
        .finished
        .map_or(pb::FinishReason::Unspecified, |f| f.reason());
    println!("json schema: {} [{reason:?}]", answer.text);

    // 6. An invalid request and its google.rpc details.
    let mut bad = long_request("hi", 4);
    bad.sampling = Some(pb::SamplingParams {
        temperature: Some(-1.0),
        ..Default::default()
    });
    let Err(status) = client.generate_text(bad).await else {
        return Err("invalid temperature was accepted".into());
    };
    let details = error_details(&status);
    println!(
        "invalid request: {:?} {:?}; reason {}; field violations {:?}",
        status.code(),
        status.message(),
        details
            .error_info
            .as_ref()
            .map_or("-", |e| e.reason.as_str()),
        details
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect::<Vec<_>>()
    );
    Ok(())
}
