//! Transcribe against a live server at MLXGRPC_ADDRESS with a speech model named "whisper"
//! (the test fixture's tiny English-only Whisper, random weights): GetModelInfo says it is a
//! speech model that transcribes and does not generate; clients/testdata/speech.wav (2 s of
//! 16 kHz audio) with a request id comes back as a transcript echoing the id and the model,
//! 2 s long, of at least one segment (indexed from 0, as many as the finished event counts)
//! in English, and streams started, segments, finished in that order; the WAV declared
//! audio/mpeg is INVALID_ARGUMENT (a field violation on `audio.media_type`), Transcribe on
//! the text model "llama" FAILED_PRECONDITION and on an unknown model NOT_FOUND. A server
//! without a model named "whisper" (the default one never has it) skips these: each prints
//! why and passes, even under MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they are
//! skipped like every live test (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, TranscriptionEvent, error_details, media_type, pb};
use support::{Live, live};

const SPEECH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/speech.wav");

/// The live server when it serves a model named "whisper"; `None` (the test then passes
/// after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_whisper() -> Option<Live> {
    let s = live().await?;
    if !s.models.iter().any(|m| m.name == "whisper") {
        support::skipped(format!(
            "{} serves no model named \"whisper\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    }
    Some(s)
}

fn speech() -> pb::Audio {
    pb::Audio::file(SPEECH).expect("clients/testdata/speech.wav")
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn model_info_says_whisper_is_a_speech_model() {
    let Some(s) = with_whisper().await else {
        return;
    };
    let info = s
        .client
        .model_info("whisper")
        .await
        .expect("GetModelInfo whisper");
    assert_eq!(info.kind(), pb::ModelKind::Speech, "{info:?}");
    let capabilities = info.capabilities.unwrap_or_default();
    assert!(capabilities.transcription, "{capabilities:?}");
    assert!(!capabilities.generation, "{capabilities:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn transcribe_returns_the_transcript_of_the_wav() {
    let Some(s) = with_whisper().await else {
        return;
    };
    let audio = speech();
    assert_eq!(audio.media_type, media_type::WAV);
    let request = pb::TranscribeRequest::new(audio)
        .with_model("whisper")
        .with_request_id("rs-speech-1")
        .with_priority(10);
    let transcript = s.client.transcribe(request).await.expect("Transcribe");
    assert_eq!(transcript.request_id, "rs-speech-1");
    assert_eq!(transcript.model, "whisper");
    assert!(
        (transcript.audio_seconds - 2.0).abs() <= 0.05,
        "{} audio seconds",
        transcript.audio_seconds
    );
    assert!(!transcript.segments.is_empty(), "{transcript:?}");
    // Random weights: the segments' times and text mean nothing, their order does.
    let indices: Vec<i32> = transcript.segments.iter().map(|g| g.index).collect();
    assert_eq!(
        indices,
        (0..transcript.segments.len() as i32).collect::<Vec<_>>()
    );
    assert_eq!(
        transcript.segment_count as usize,
        transcript.segments.len(),
        "{transcript:?}"
    );
    assert_eq!(transcript.language, "en");
    assert!(transcript.seconds >= 0.0, "{transcript:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn transcribe_stream_sends_started_segments_then_finished() {
    let Some(s) = with_whisper().await else {
        return;
    };
    let mut transcription = s
        .client
        .transcribe_stream(pb::TranscribeRequest::new(speech()).with_model("whisper"));
    let id = transcription.request_id().to_string();
    assert!(!id.is_empty(), "a client-side id, known at once");
    let mut events = Vec::new();
    while let Some(event) = transcription.next_event().await.expect("stream") {
        events.push(event);
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            TranscriptionEvent::Started(_) => "started",
            TranscriptionEvent::Segment(_) => "segment",
            TranscriptionEvent::Finished(_) => "finished",
        })
        .collect();
    assert!(
        kinds.len() >= 3
            && kinds[0] == "started"
            && kinds[kinds.len() - 1] == "finished"
            && kinds[1..kinds.len() - 1].iter().all(|k| *k == "segment"),
        "{kinds:?}"
    );
    match &events[0] {
        TranscriptionEvent::Started(started) => assert_eq!(started.request_id, id),
        other => panic!("{other:?}"),
    }
    let transcript = mlx_grpc_client::Transcript::from_events(events).expect("a transcript");
    assert_eq!(
        (transcript.request_id.as_str(), transcript.model.as_str()),
        (id.as_str(), "whisper")
    );
    assert_eq!(transcript.segment_count as usize, kinds.len() - 2);
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn wav_declared_as_mpeg_is_invalid_argument() {
    let Some(s) = with_whisper().await else {
        return;
    };
    let wav = std::fs::read(SPEECH).expect("clients/testdata/speech.wav");
    let request =
        pb::TranscribeRequest::new(pb::Audio::new(wav, media_type::MP3)).with_model("whisper");
    let status = s
        .client
        .transcribe(request)
        .await
        .expect_err("WAV bytes as audio/mpeg");
    let d = error_details(&status);
    assert_eq!(d.code, Code::InvalidArgument, "{status}");
    assert!(
        d.field_violations
            .iter()
            .any(|v| v.field == "audio.media_type"),
        "a field violation on audio.media_type: {:?}",
        d.field_violations
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn transcribe_on_a_text_model_is_failed_precondition() {
    let Some(s) = with_whisper().await else {
        return;
    };
    let status = s
        .client
        .transcribe(pb::TranscribeRequest::new(speech()).with_model("llama"))
        .await
        .expect_err("Transcribe on llama");
    let d = error_details(&status);
    assert_eq!(d.code, Code::FailedPrecondition, "{status}");
    assert_eq!(
        d.error_info.map(|i| i.reason).as_deref(),
        Some("UNSUPPORTED_OPERATION"),
        "{status}"
    );

    let status = s
        .client
        .transcribe(pb::TranscribeRequest::new(speech()).with_model("no-such-model"))
        .await
        .expect_err("an unknown model");
    assert_eq!(status.code(), Code::NotFound, "{status}");
}
