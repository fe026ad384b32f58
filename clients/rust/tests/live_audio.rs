//! Audio in the prompt against a live server at MLXGRPC_ADDRESS with a model named "omni"
//! (the test fixture's tiny Qwen3-Omni, which takes audio and images): GetModelInfo says
//! "omni" takes audio and the image-only "vision" does not; clients/testdata/speech.wav (2 s)
//! then a question streams an answer on "omni" whose prompt holds at least 26 tokens more
//! than the question alone (2 s at about 13 tokens a second, and the 2 markers); the WAV declared audio/mpeg is
//! INVALID_ARGUMENT (a field violation on `...audio.media_type`), and on "vision"
//! FAILED_PRECONDITION (reason UNSUPPORTED_OPERATION, "does not take audio"). A server without
//! a model named "omni" (the default one never has it) skips these: each prints why and
//! passes, even under MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they are skipped like
//! every live test (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, Event, error_details, media_type, pb};
use pb::generate_request::Prompt;
use support::{Live, live};

const SPEECH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/speech.wav");
const QUESTION: &str = "What is said in the recording?";

/// The live server when it serves a model named "omni"; `None` (the test then passes after
/// saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_omni() -> Option<Live> {
    let s = live().await?;
    if !s.models.iter().any(|m| m.name == "omni") {
        support::skipped(format!(
            "{} serves no model named \"omni\" (the test fixture does; the default \
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

fn speech() -> pb::ContentPart {
    pb::ContentPart::audio_file(SPEECH).expect("clients/testdata/speech.wav")
}

/// The recording then the question to `model`.
fn about_the_speech(model: &str) -> pb::GenerateRequest {
    ask(model, vec![speech(), pb::ContentPart::text(QUESTION)])
}

/// Streams `request`: the tokens it generated and its started and finished events.
async fn stream(
    s: &Live,
    request: pb::GenerateRequest,
) -> (usize, pb::GenerationStarted, pb::GenerationFinished) {
    let mut generation = s.client.generate(request);
    let (mut tokens, mut started, mut finished) = (0, None, None);
    while let Some(event) = generation.next_event().await.expect("stream") {
        match event {
            Event::Started(e) => started = Some(e),
            Event::Delta(d) => tokens += d.token_ids.len(),
            Event::Finished(f) => finished = Some(f),
            _ => {}
        }
    }
    (
        tokens,
        started.expect("a started event"),
        finished.expect("a finished event"),
    )
}

fn takes_audio(info: &pb::ModelInfo) -> bool {
    info.capabilities
        .as_ref()
        .and_then(|c| c.media.as_ref())
        .is_some_and(|m| m.audio)
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn model_info_says_which_models_take_audio() {
    let Some(s) = with_omni().await else { return };
    let omni = s
        .client
        .model_info("omni")
        .await
        .expect("GetModelInfo omni");
    assert!(takes_audio(&omni), "{:?}", omni.capabilities);
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
    assert!(!takes_audio(&vision), "{:?}", vision.capabilities);
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn audio_on_the_omni_model_streams_an_answer() {
    let Some(s) = with_omni().await else { return };
    let (tokens, started, finished) = stream(&s, about_the_speech("omni")).await;
    assert_eq!(tokens, 4, "{finished:?}");
    assert_eq!(finished.reason(), pb::FinishReason::Length, "{finished:?}");
    let with_audio = started.prompt_tokens;

    let (_, text_only, _) = stream(&s, ask("omni", vec![pb::ContentPart::text(QUESTION)])).await;
    let without = text_only.prompt_tokens;
    // 2 s of audio at about 13 tokens a second (at least 12), between the two audio markers
    // (the fixture's processor makes it 26 + 2).
    assert!(
        with_audio >= without + 2 * 12 + 2,
        "the recording added {} prompt tokens ({with_audio} with it, {without} without)",
        with_audio - without
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn wav_declared_as_mpeg_is_invalid_argument() {
    let Some(s) = with_omni().await else { return };
    let wav = std::fs::read(SPEECH).expect("clients/testdata/speech.wav");
    let request = ask(
        "omni",
        vec![
            pb::ContentPart::audio(wav, media_type::MP3),
            pb::ContentPart::text(QUESTION),
        ],
    );
    let status = s
        .client
        .generate_text(request)
        .await
        .expect_err("WAV bytes as audio/mpeg");
    let d = error_details(&status);
    assert_eq!(d.code, Code::InvalidArgument, "{status}");
    assert!(
        d.field_violations
            .iter()
            .any(|v| v.field == "chat.messages[0].parts[0].audio.media_type"),
        "a field violation on chat.messages[0].parts[0].audio.media_type: {:?}",
        d.field_violations
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn audio_on_an_image_only_model_is_failed_precondition() {
    let Some(s) = with_omni().await else { return };
    let status = s
        .client
        .generate_text(about_the_speech("vision"))
        .await
        .expect_err("audio to vision");
    let d = error_details(&status);
    assert_eq!(d.code, Code::FailedPrecondition, "{status}");
    assert!(status.message().contains("does not take audio"), "{status}");
    assert_eq!(
        d.error_info.map(|i| i.reason).as_deref(),
        Some("UNSUPPORTED_OPERATION"),
        "{status}"
    );
}
