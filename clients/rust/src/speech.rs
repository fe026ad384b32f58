//! Speech to text: [`Client::transcribe`] sends a recording to a speech model (a
//! Whisper-class model: its `kind` is `MODEL_KIND_SPEECH`, its `capabilities.transcription`
//! true) and returns a [`Transcript`]; [`Client::transcribe_stream`] gives the same call as
//! a [`Stream`] of [`TranscriptionEvent`]s (`Started`, one `Segment` per piece of the
//! transcript in time order, then `Finished`).
//!
//! [`pb::Audio::file`] reads an audio file and detects its media type from its signature
//! ([`audio_media_type_of`]); [`pb::Audio::new`] takes bytes you already have with their
//! media type, sent as given. [`pb::TranscribeRequest::new`] and its `with_*` methods
//! build the request (model, language, task, prompt, request id, priority). Audio whose
//! media type does not match its bytes, one too long, cut short or empty is
//! INVALID_ARGUMENT with a BadRequest field violation on `audio.media_type` or
//! `audio.data`; a language the model does not know is INVALID_ARGUMENT (`language`); a
//! model that is not a speech model FAILED_PRECONDITION (ErrorInfo reason
//! `UNSUPPORTED_OPERATION`); an unknown model NOT_FOUND.
//!
//! ```
//! use mlx_grpc_client::{media_type, pb};
//!
//! let wav = b"RIFF\x24\0\0\0WAVEfmt ".to_vec();
//! let request = pb::TranscribeRequest::new(pb::Audio::new(wav, media_type::WAV)) // or pb::Audio::file(path)?
//!     .with_model("whisper")
//!     .with_language("en")
//!     .with_task(pb::TranscriptionTask::Transcribe)
//!     .with_request_id("meeting-1");
//! # assert_eq!(request.task(), pb::TranscriptionTask::Transcribe);
//! # assert_eq!(request.audio.unwrap().media_type, "audio/wav");
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{self, BoxStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{IntoRequest, Request, Status, Streaming};

use crate::retry::Attempts;
use crate::{Client, RawClient, media_type, pb};

/// One event of a Transcribe stream: `Started` once the audio is decoded and admitted (the
/// request id, the model, the audio's duration), a `Segment` per piece of the transcript in
/// time order, then `Finished` (the whole text, the language, the segments sent, the time
/// taken).
pub use pb::transcribe_response::Event as TranscriptionEvent;

/// Why an audio file could not become a [`pb::Audio`] or a message part
/// ([`pb::ContentPart::audio_file`]).
#[derive(Debug)]
pub enum AudioError {
    /// The file could not be read.
    Io(PathBuf, std::io::Error),
    /// The bytes do not start like a WAV, MP3, FLAC or Ogg file: their first bytes.
    UnknownType(Vec<u8>),
}

impl fmt::Display for AudioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(path, err) => write!(f, "reading audio {}: {err}", path.display()),
            Self::UnknownType(head) => {
                write!(f, "not a WAV, MP3, FLAC or Ogg audio file (first bytes")?;
                if head.is_empty() {
                    write!(f, " none")?;
                }
                for b in head {
                    write!(f, " {b:02x}")?;
                }
                write!(f, ")")
            }
        }
    }
}

impl std::error::Error for AudioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(_, err) => Some(err),
            Self::UnknownType(_) => None,
        }
    }
}

/// The media type of an encoded audio file from its signature: `RIFF` then `WAVE` at offset
/// 8 is WAV, `fLaC` FLAC, `OggS` Ogg, `ID3` (a tag) or an MPEG frame sync (`FF`, then a
/// byte whose top three bits are set) MP3; [`AudioError::UnknownType`] otherwise.
pub fn audio_media_type_of(data: &[u8]) -> Result<&'static str, AudioError> {
    if data.starts_with(b"RIFF") && data.get(8..12) == Some(b"WAVE") {
        Ok(media_type::WAV)
    } else if data.starts_with(b"fLaC") {
        Ok(media_type::FLAC)
    } else if data.starts_with(b"OggS") {
        Ok(media_type::OGG)
    } else if data.starts_with(b"ID3") || matches!(data, [0xFF, b, ..] if b & 0xE0 == 0xE0) {
        Ok(media_type::MP3)
    } else {
        Err(AudioError::UnknownType(data[..data.len().min(12)].to_vec()))
    }
}

impl pb::Audio {
    /// An encoded audio file's bytes with its media type ([`media_type::WAV`], ...), sent
    /// as given: the server checks it against the bytes.
    pub fn new(data: impl Into<Vec<u8>>, media_type: impl Into<String>) -> Self {
        Self {
            data: data.into(),
            media_type: media_type.into(),
        }
    }

    /// The audio file at `path`, its media type detected from its signature
    /// ([`audio_media_type_of`]).
    pub fn file(path: impl AsRef<Path>) -> Result<Self, AudioError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| AudioError::Io(path.to_path_buf(), e))?;
        let media_type = audio_media_type_of(&data)?;
        Ok(Self::new(data, media_type))
    }
}

impl pb::TranscribeRequest {
    /// Transcribes `audio` with the server's first speech model, the language detected
    /// (or English for an English-only model); the `with_*` methods set the rest.
    pub fn new(audio: pb::Audio) -> Self {
        Self {
            audio: Some(audio),
            ..Default::default()
        }
    }

    /// The speech model (empty: the server's first one).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The spoken language as an ISO 639-1 code (`"en"`, `"de"`, ...); empty: detected
    /// from the first 30 seconds by a multilingual model, English for an English-only one.
    /// One the model does not know is INVALID_ARGUMENT.
    pub fn with_language(mut self, language: impl Into<String>) -> Self {
        self.language = language.into();
        self
    }

    /// Transcribe (the default: the speech as text in its own language) or translate into
    /// English (multilingual models only).
    pub fn with_task(mut self, task: pb::TranscriptionTask) -> Self {
        self.set_task(task);
        self
    }

    /// Text the model reads before the first window: names, vocabulary, spelling, style
    /// (at most half the model's text window, 224 tokens on Whisper).
    pub fn with_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = prompt.into();
        self
    }

    /// A client-chosen id for Cancel and logs (empty: the client assigns one).
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = request_id.into();
        self
    }

    /// Scheduling priority, `-100..=100` (0: the client's default).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}

/// A whole transcription ([`Client::transcribe`], [`Transcription::collect`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    /// The request's id (the client's, or the one assigned to it).
    pub request_id: String,
    /// The model that transcribed it.
    pub model: String,
    /// The audio's duration in seconds.
    pub audio_seconds: f64,
    /// The transcript's pieces in time order, as the model timed them: each with its
    /// `index` (from 0), `start_seconds`, `end_seconds`, `text`, `token_ids` (text and
    /// timestamp tokens), `avg_logprob`, `no_speech_prob` and `compression_ratio`.
    pub segments: Vec<pb::TranscriptSegment>,
    /// The whole transcript: every segment's text.
    pub text: String,
    /// The spoken language (ISO 639-1): the request's, or the one the model detected.
    pub language: String,
    /// The segments the server says it sent (`TranscriptionFinished::segments`).
    pub segment_count: i32,
    /// Seconds from admission to the transcript.
    pub seconds: f64,
}

impl Transcript {
    /// Assembles a transcript from a Transcribe stream's events, in order: the `Started`
    /// event's id, model and duration, the segments, and the `Finished` event's text,
    /// language, segment count and time. A stream without a `Started` or a `Finished`
    /// event is INTERNAL.
    pub fn from_events(
        events: impl IntoIterator<Item = TranscriptionEvent>,
    ) -> Result<Self, Status> {
        let mut transcript = Self::default();
        let (mut started, mut finished) = (false, false);
        for event in events {
            match event {
                TranscriptionEvent::Started(s) => {
                    started = true;
                    transcript.request_id = s.request_id;
                    transcript.model = s.model;
                    transcript.audio_seconds = s.audio_seconds;
                }
                TranscriptionEvent::Segment(s) => transcript.segments.push(s),
                TranscriptionEvent::Finished(f) => {
                    finished = true;
                    transcript.text = f.text;
                    transcript.language = f.language;
                    transcript.segment_count = f.segments;
                    transcript.seconds = f.seconds;
                }
            }
        }
        match (started, finished) {
            (true, true) => Ok(transcript),
            (false, _) => Err(Status::internal("Transcribe ended without a started event")),
            (true, false) => Err(Status::internal(
                "Transcribe ended without a finished event",
            )),
        }
    }
}

/// A Transcribe call: a [`Stream`] of [`TranscriptionEvent`]s. Nothing is sent until it is
/// first polled; dropping it cancels the call.
pub struct Transcription {
    request_id: String,
    events: BoxStream<'static, Result<TranscriptionEvent, Status>>,
}

enum State {
    Start(RawClient, Box<Attempts<pb::TranscribeRequest>>),
    Streaming(Streaming<pb::TranscribeResponse>),
}

type Step = (Option<Result<TranscriptionEvent, Status>>, Option<State>);

impl Transcription {
    pub(crate) fn new(
        raw: RawClient,
        attempts: Attempts<pb::TranscribeRequest>,
        request_id: String,
    ) -> Self {
        let start = State::Start(raw, Box::new(attempts));
        let events = stream::unfold(Some(start), |state| async move {
            let (item, next) = match state? {
                State::Start(raw, attempts) => open(raw, *attempts).await,
                State::Streaming(mut s) => match next_event(&mut s).await {
                    Ok(Some(event)) => (Some(Ok(event)), Some(State::Streaming(s))),
                    Ok(None) => return None,
                    Err(status) => (Some(Err(status)), None),
                },
            };
            Some((item?, next))
        });
        Self {
            request_id,
            events: Box::pin(events),
        }
    }

    /// The request id (the request's own, or one assigned client-side), for
    /// [`Client::cancel`] from anywhere, at once.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The next event, or `None` when the stream has ended.
    pub async fn next_event(&mut self) -> Result<Option<TranscriptionEvent>, Status> {
        self.events.next().await.transpose()
    }

    /// Reads the whole stream into a [`Transcript`] ([`Transcript::from_events`]).
    pub async fn collect(mut self) -> Result<Transcript, Status> {
        let mut events = Vec::new();
        while let Some(event) = self.next_event().await? {
            events.push(event);
        }
        Transcript::from_events(events)
    }
}

/// Starts the call and reads its first event, retrying refusals.
async fn open(mut raw: RawClient, mut attempts: Attempts<pb::TranscribeRequest>) -> Step {
    loop {
        let first = match raw.transcribe(attempts.request()).await {
            Ok(response) => {
                let mut s = response.into_inner();
                next_event(&mut s).await.map(|e| (e, s))
            }
            Err(status) => Err(status),
        };
        match first {
            Ok((Some(event), s)) => return (Some(Ok(event)), Some(State::Streaming(s))),
            Ok((None, _)) => return (None, None),
            Err(status) if attempts.wait(&status).await => continue,
            Err(status) => return (Some(Err(status)), None),
        }
    }
}

async fn next_event(
    s: &mut Streaming<pb::TranscribeResponse>,
) -> Result<Option<TranscriptionEvent>, Status> {
    loop {
        match s.message().await? {
            None => return Ok(None),
            Some(pb::TranscribeResponse { event: Some(e) }) => return Ok(Some(e)),
            Some(_) => continue, // an empty event: nothing to report
        }
    }
}

impl Stream for Transcription {
    type Item = Result<TranscriptionEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for Transcription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transcription")
            .field("request_id", &self.request_id)
            .finish()
    }
}

impl Client {
    /// Transcribes the request's audio with a speech model (empty `model`: the server's
    /// first) and returns the whole [`Transcript`]: the unary form of
    /// [`Client::transcribe_stream`]. Retried before its first event like the other calls;
    /// an empty `request_id` is filled with a client-side one and a request without a
    /// priority gets the client's default. Bad audio is INVALID_ARGUMENT (a field violation
    /// on `audio.media_type` or `audio.data`), as is an unknown `language`; a model that is
    /// not a speech model is FAILED_PRECONDITION, an unknown one NOT_FOUND.
    pub async fn transcribe(
        &self,
        request: impl IntoRequest<pb::TranscribeRequest>,
    ) -> Result<Transcript, Status> {
        self.transcribe_stream(request).collect().await
    }

    /// Prepares a transcription as a stream of its events; nothing is sent until the
    /// [`Transcription`] is polled. An empty `request_id` is filled with a fresh
    /// client-side id, so [`Transcription::request_id`] can be passed to
    /// [`Client::cancel`] at once (the stream then ends with `Code::Cancelled`). A per-call
    /// deadline: pass a `tonic::Request` with `set_timeout`.
    pub fn transcribe_stream(
        &self,
        request: impl IntoRequest<pb::TranscribeRequest>,
    ) -> Transcription {
        let request = self.transcribe_request(request);
        let request_id = request.get_ref().request_id.clone();
        Transcription::new(self.raw.clone(), self.attempts(request), request_id)
    }

    /// `request` as [`Client::transcribe`] sends it: with a request id and a priority.
    pub(crate) fn transcribe_request(
        &self,
        request: impl IntoRequest<pb::TranscribeRequest>,
    ) -> Request<pb::TranscribeRequest> {
        let mut request = self.with_default_priority(request.into_request());
        if request.get_ref().request_id.is_empty() {
            request.get_mut().request_id = crate::client::new_request_id();
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::transport::Endpoint;

    use super::*;
    use crate::CallDefaults;
    use crate::retry::RetryPolicy;

    const SIGNATURES: [(&str, &[u8]); 7] = [
        (media_type::WAV, b"RIFF\x24\0\0\0WAVEfmt "),
        (media_type::FLAC, b"fLaC\0\0\0\x22"),
        (media_type::OGG, b"OggS\0\x02\0\0"),
        (media_type::MP3, b"ID3\x04\0\0\0\0\0\0"),
        (media_type::MP3, b"\xFF\xFB\x90\x64"),
        (media_type::MP3, b"\xFF\xF3"),
        (media_type::MP3, b"\xFF\xE0"),
    ];

    #[test]
    fn audio_media_type_of_detects_each_signature() {
        for (want, data) in SIGNATURES {
            assert_eq!(audio_media_type_of(data).unwrap(), want, "{data:?}");
        }
        for other in [
            &b""[..],
            b"hello, world",
            b"RIFF\x24\0\0\0WEBPVP8 ",
            b"RIFF\x24\0\0\0AVI LIST",
            b"RIFF\x24\0\0\0WAV",
            b"RIFF",
            b"fLa",
            b"Ogg",
            b"ID",
            b"\xFF",
            b"\xFF\xD8\xFF\xE0", // JPEG
            b"\xFF\xC0",
            b"\x89PNG\r\n\x1a\n",
        ] {
            assert!(
                matches!(audio_media_type_of(other), Err(AudioError::UnknownType(_))),
                "{other:?}"
            );
        }
        assert_eq!(
            audio_media_type_of(b"hello").unwrap_err().to_string(),
            "not a WAV, MP3, FLAC or Ogg audio file (first bytes 68 65 6c 6c 6f)"
        );
        assert_eq!(
            audio_media_type_of(b"").unwrap_err().to_string(),
            "not a WAV, MP3, FLAC or Ogg audio file (first bytes none)"
        );
        match audio_media_type_of(b"0123456789abcdef").unwrap_err() {
            AudioError::UnknownType(head) => assert_eq!(head, b"0123456789ab"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn audio_file_reads_and_detects() {
        let dir = std::env::temp_dir().join(format!("mlxgrpc-audio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (want, data) in SIGNATURES {
            let path = dir.join("audio");
            std::fs::write(&path, data).unwrap();
            assert_eq!(pb::Audio::file(&path).unwrap(), pb::Audio::new(data, want));
        }
        let notes = dir.join("notes.txt");
        std::fs::write(&notes, "not audio").unwrap();
        assert!(matches!(
            pb::Audio::file(&notes),
            Err(AudioError::UnknownType(_))
        ));
        let missing = pb::Audio::file(dir.join("missing.wav")).unwrap_err();
        assert!(
            matches!(&missing, AudioError::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound)
        );
        assert!(
            missing.to_string().starts_with("reading audio "),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let speech = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/speech.wav");
        let audio = pb::Audio::file(speech).unwrap();
        assert_eq!(audio.media_type, media_type::WAV);
        assert_eq!(audio.data, std::fs::read(speech).unwrap());
    }

    #[test]
    fn builders_set_the_fields() {
        let audio = pb::Audio::new(b"fLaC".to_vec(), media_type::FLAC);
        let request = pb::TranscribeRequest::new(audio.clone())
            .with_model("whisper")
            .with_language("de")
            .with_task(pb::TranscriptionTask::Translate)
            .with_prompt("Glossary: gRPC")
            .with_request_id("t-1")
            .with_priority(-5);
        assert_eq!(
            request,
            pb::TranscribeRequest {
                model: "whisper".into(),
                audio: Some(pb::Audio {
                    data: b"fLaC".to_vec(),
                    media_type: "audio/flac".into()
                }),
                language: "de".into(),
                task: pb::TranscriptionTask::Translate as i32,
                prompt: "Glossary: gRPC".into(),
                request_id: "t-1".into(),
                priority: -5,
            }
        );
        let plain = pb::TranscribeRequest::new(audio);
        assert_eq!(plain.task(), pb::TranscriptionTask::Unspecified);
        assert_eq!(
            (
                plain.model.as_str(),
                plain.language.as_str(),
                plain.prompt.as_str(),
                plain.request_id.as_str(),
                plain.priority
            ),
            ("", "", "", "", 0),
            "unset: the server's choices"
        );
    }

    fn client(priority: i32) -> Client {
        let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        let defaults = CallDefaults {
            authorization: None,
            timeout: None,
        };
        Client {
            raw: pb::inference_service_client::InferenceServiceClient::with_interceptor(
                channel, defaults,
            ),
            timeout: Some(Duration::from_secs(1)),
            retry: RetryPolicy {
                max_attempts: 1,
                observer: None,
            },
            priority,
        }
    }

    #[tokio::test]
    async fn the_request_sent_gets_an_id_and_the_default_priority() {
        let audio = pb::Audio::new(b"RIFF".to_vec(), media_type::WAV);
        let low = client(-20);
        let sent = low.transcribe_request(pb::TranscribeRequest::new(audio.clone()));
        let sent = sent.get_ref();
        assert_eq!(sent.priority, -20);
        assert!(sent.request_id.starts_with("rs-"), "{}", sent.request_id);
        assert_eq!(sent.audio.as_ref(), Some(&audio));

        let own = pb::TranscribeRequest::new(audio.clone())
            .with_request_id("mine")
            .with_priority(30)
            .with_model("whisper");
        let sent = low.transcribe_request(own.clone());
        assert_eq!(sent.get_ref(), &own, "a request's own id and priority win");
        let plain = pb::TranscribeRequest::new(audio);
        assert_eq!(client(0).transcribe_request(plain).get_ref().priority, 0);

        // The stream knows its id before anything is sent.
        let transcription = low.transcribe_stream(own);
        assert_eq!(transcription.request_id(), "mine");
        let assigned = low.transcribe_stream(pb::TranscribeRequest::default());
        assert!(assigned.request_id().starts_with("rs-"));
    }

    #[tokio::test]
    async fn an_unreachable_server_fails_the_stream_with_its_status() {
        let mut transcription = client(0).transcribe_stream(pb::TranscribeRequest::default());
        let status = transcription.next_event().await.expect_err("no server");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
        assert!(
            transcription.next_event().await.unwrap().is_none(),
            "ended after the error"
        );
    }

    fn segment(index: i32, start: f64, end: f64, text: &str) -> pb::TranscriptSegment {
        pb::TranscriptSegment {
            index,
            start_seconds: start,
            end_seconds: end,
            text: text.into(),
            token_ids: vec![50364, 400 + index, 50464],
            avg_logprob: -0.25,
            no_speech_prob: 0.01,
            compression_ratio: 1.2,
        }
    }

    #[test]
    fn a_transcript_is_assembled_from_its_events() {
        let events = vec![
            TranscriptionEvent::Started(pb::TranscriptionStarted {
                request_id: "t-1".into(),
                model: "whisper".into(),
                audio_seconds: 2.0,
            }),
            TranscriptionEvent::Segment(segment(0, 0.0, 1.0, " Hello")),
            TranscriptionEvent::Segment(segment(1, 1.0, 2.0, " world.")),
            TranscriptionEvent::Finished(pb::TranscriptionFinished {
                text: " Hello world.".into(),
                language: "en".into(),
                segments: 2,
                seconds: 0.5,
            }),
        ];
        let transcript = Transcript::from_events(events.clone()).expect("a transcript");
        assert_eq!(
            transcript,
            Transcript {
                request_id: "t-1".into(),
                model: "whisper".into(),
                audio_seconds: 2.0,
                segments: vec![
                    segment(0, 0.0, 1.0, " Hello"),
                    segment(1, 1.0, 2.0, " world.")
                ],
                text: " Hello world.".into(),
                language: "en".into(),
                segment_count: 2,
                seconds: 0.5,
            }
        );

        // No segments: an empty transcript is still one.
        let silent = Transcript::from_events([events[0].clone(), events[3].clone()]).unwrap();
        assert!(silent.segments.is_empty());

        let cut = Transcript::from_events(events[..3].to_vec()).expect_err("no finished");
        assert_eq!(cut.code(), tonic::Code::Internal);
        assert!(cut.message().contains("finished"), "{cut:?}");
        let headless = Transcript::from_events(events[1..].to_vec()).expect_err("no started");
        assert_eq!(headless.code(), tonic::Code::Internal);
        assert!(headless.message().contains("started"), "{headless:?}");
        assert_eq!(
            Transcript::from_events([]).unwrap_err().code(),
            tonic::Code::Internal
        );
    }

    /// Compiles only if a transcription can be spawned (`tokio::spawn` needs `Send`).
    #[allow(dead_code)]
    fn a_transcription_is_send(client: &Client) -> impl std::future::Future + Send + '_ {
        client.transcribe(pb::TranscribeRequest::default())
    }
}
