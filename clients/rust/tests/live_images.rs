//! Images against a live server at MLXGRPC_ADDRESS with a model named "vision" (the test
//! fixture's tiny vision-language model): clients/testdata/gradient.png with "Describe the
//! image." is FAILED_PRECONDITION (reason UNSUPPORTED_OPERATION) on the text-only "llama",
//! streams tokens on "vision", and is INVALID_ARGUMENT there declared as image/jpeg. A
//! server without a model named "vision" (the default one never has it) skips these: each
//! prints why and passes, even under MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they
//! are skipped like every live test (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, Event, error_details, media_type, pb};
use pb::generate_request::Prompt;
use support::{Live, live};

const GRADIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/gradient.png");

/// The live server when it serves a model named "vision"; `None` (the test then passes
/// after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_vision() -> Option<Live> {
    let s = live().await?;
    if !s.models.iter().any(|m| m.name == "vision") {
        support::skipped(format!(
            "{} serves no model named \"vision\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    }
    Some(s)
}

/// Greedy, at most 4 tokens: `image` and "Describe the image." to `model`.
fn describe(model: &str, image: pb::ContentPart) -> pb::GenerateRequest {
    pb::GenerateRequest {
        model: model.into(),
        prompt: Some(Prompt::Chat(pb::ChatMessages {
            messages: vec![pb::ChatMessage::user_parts([
                image,
                pb::ContentPart::text("Describe the image."),
            ])],
            ..Default::default()
        })),
        sampling: Some(pb::SamplingParams {
            temperature: Some(0.0),
            ..Default::default()
        }),
        stopping: Some(pb::StoppingCriteria {
            max_tokens: Some(4),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn gradient() -> pb::ContentPart {
    pb::ContentPart::image_file(GRADIENT).expect("clients/testdata/gradient.png")
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn image_on_a_text_only_model_is_failed_precondition() {
    let Some(s) = with_vision().await else { return };
    let status = s
        .client
        .generate_text(describe("llama", gradient()))
        .await
        .expect_err("an image to llama");
    let d = error_details(&status);
    assert_eq!(d.code, Code::FailedPrecondition, "{status}");
    assert_eq!(
        d.error_info.map(|i| i.reason).as_deref(),
        Some("UNSUPPORTED_OPERATION"),
        "{status}"
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn image_on_the_vision_model_streams_tokens() {
    let Some(s) = with_vision().await else { return };
    let mut generation = s.client.generate(describe("vision", gradient()));
    let (mut tokens, mut finished) = (0, None);
    while let Some(event) = generation.next_event().await.expect("stream") {
        match event {
            Event::Delta(d) => tokens += d.token_ids.len(),
            Event::Finished(f) => finished = Some(f.reason()),
            _ => {}
        }
    }
    assert!(tokens >= 1, "{tokens} tokens");
    assert!(
        finished.is_some_and(|r| r != pb::FinishReason::Unspecified),
        "finished {finished:?}"
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn png_declared_as_jpeg_is_invalid_argument() {
    let Some(s) = with_vision().await else { return };
    let png = std::fs::read(GRADIENT).expect("clients/testdata/gradient.png");
    let status = s
        .client
        .generate_text(describe(
            "vision",
            pb::ContentPart::image(png, media_type::JPEG),
        ))
        .await
        .expect_err("PNG bytes as image/jpeg");
    let d = error_details(&status);
    assert_eq!(d.code, Code::InvalidArgument, "{status}");
    assert!(
        !d.field_violations.is_empty(),
        "a field violation: {status}"
    );
}
