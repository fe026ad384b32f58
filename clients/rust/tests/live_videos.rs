//! Videos against a live server at MLXGRPC_ADDRESS with a model named "video" (the test
//! fixture's tiny Qwen2.5-VL): GetModelInfo says "video" takes videos and "vision" does not;
//! clients/testdata/clip.mp4 then "What happens in the video?" streams an answer on "video"
//! whose prompt holds at least 5 tokens more than the text alone (3 pairs of frames and the
//! two tokens around them); declared as video/webm it is INVALID_ARGUMENT (a field
//! violation on `...video.media_type`), and on the image-only "vision" FAILED_PRECONDITION
//! (reason UNSUPPORTED_OPERATION). A server without a model named "video" (the default one
//! never has it) skips these: each prints why and passes, even under
//! MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they are skipped like every live test
//! (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, Event, error_details, media_type, pb};
use pb::generate_request::Prompt;
use support::{Live, live};

const CLIP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/clip.mp4");
const QUESTION: &str = "What happens in the video?";

/// The live server when it serves a model named "video"; `None` (the test then passes
/// after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_video() -> Option<Live> {
    let s = live().await?;
    if !s.models.iter().any(|m| m.name == "video") {
        support::skipped(format!(
            "{} serves no model named \"video\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    }
    Some(s)
}

/// Greedy, exactly 4 tokens: `parts` in one user message to `model`.
fn ask(model: &str, parts: Vec<pb::ContentPart>) -> pb::GenerateRequest {
    pb::GenerateRequest {
        model: model.into(),
        prompt: Some(Prompt::Chat(pb::ChatMessages {
            messages: vec![pb::ChatMessage::user_parts(parts)],
            ..Default::default()
        })),
        sampling: Some(pb::SamplingParams {
            temperature: Some(0.0),
            ..Default::default()
        }),
        stopping: Some(pb::StoppingCriteria {
            max_tokens: Some(4),
            ignore_eos: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn clip() -> pb::ContentPart {
    pb::ContentPart::video_file(CLIP).expect("clients/testdata/clip.mp4")
}

/// The clip then the question to `model`.
fn about_the_clip(model: &str) -> pb::GenerateRequest {
    ask(model, vec![clip(), pb::ContentPart::text(QUESTION)])
}

/// Streams `request`: the tokens it generated and its finished event.
async fn stream(s: &Live, request: pb::GenerateRequest) -> (usize, pb::GenerationFinished) {
    let mut generation = s.client.generate(request);
    let (mut tokens, mut finished) = (0, None);
    while let Some(event) = generation.next_event().await.expect("stream") {
        match event {
            Event::Delta(d) => tokens += d.token_ids.len(),
            Event::Finished(f) => finished = Some(f),
            _ => {}
        }
    }
    (tokens, finished.expect("a finished event"))
}

fn takes_video(info: &pb::ModelInfo) -> bool {
    info.capabilities
        .as_ref()
        .and_then(|c| c.media.as_ref())
        .is_some_and(|m| m.video)
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn model_info_says_which_models_take_video() {
    let Some(s) = with_video().await else { return };
    let video = s
        .client
        .model_info("video")
        .await
        .expect("GetModelInfo video");
    assert!(takes_video(&video), "{:?}", video.capabilities);
    let vision = s
        .client
        .model_info("vision")
        .await
        .expect("GetModelInfo vision");
    assert!(
        vision
            .capabilities
            .as_ref()
            .is_some_and(|c| c.media.is_some()),
        "vision takes images: {:?}",
        vision.capabilities
    );
    assert!(!takes_video(&vision), "{:?}", vision.capabilities);
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn video_on_the_video_model_streams_an_answer() {
    let Some(s) = with_video().await else { return };
    let (tokens, finished) = stream(&s, about_the_clip("video")).await;
    assert!(tokens >= 1, "{tokens} tokens");
    assert_eq!(finished.reason(), pb::FinishReason::Length, "{finished:?}");
    let with_video = finished.usage.expect("usage").prompt_tokens;

    let (_, text_only) = stream(&s, ask("video", vec![pb::ContentPart::text(QUESTION)])).await;
    let without = text_only.usage.expect("usage").prompt_tokens;
    // The clip's frames are part of the prompt: 3 s at 2 frames a second is 3 pairs of at
    // least one <|video_pad|> token each, between <|vision_start|> and <|vision_end|> (the
    // fixture's tiny processor makes each pair exactly one: 5 tokens).
    assert!(
        with_video >= without + 3 + 2,
        "the clip added {} prompt tokens ({with_video} with it, {without} without)",
        with_video - without
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn mp4_declared_as_webm_is_invalid_argument() {
    let Some(s) = with_video().await else { return };
    let mp4 = std::fs::read(CLIP).expect("clients/testdata/clip.mp4");
    let request = ask(
        "video",
        vec![
            pb::ContentPart::video(mp4, media_type::WEBM),
            pb::ContentPart::text(QUESTION),
        ],
    );
    let status = s
        .client
        .generate_text(request)
        .await
        .expect_err("MP4 bytes as video/webm");
    let d = error_details(&status);
    assert_eq!(d.code, Code::InvalidArgument, "{status}");
    assert!(
        d.field_violations
            .iter()
            .any(|v| v.field.ends_with(".video.media_type")),
        "a field violation on .video.media_type: {:?}",
        d.field_violations
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn video_on_an_image_only_model_is_failed_precondition() {
    let Some(s) = with_video().await else { return };
    let status = s
        .client
        .generate_text(about_the_clip("vision"))
        .await
        .expect_err("a video to vision");
    let d = error_details(&status);
    assert_eq!(d.code, Code::FailedPrecondition, "{status}");
    assert_eq!(
        d.error_info.map(|i| i.reason).as_deref(),
        Some("UNSUPPORTED_OPERATION"),
        "{status}"
    );
}
