//! A thin Rust client for the mlx-grpc `InferenceService` (package `mlxgrpc.v1`).
//!
//! The protobuf messages and the tonic client are generated at build time from
//! `../../protos` (see `build.rs`) and live in [`pb`]. [`Client`] adds what the
//! raw stub lacks: connecting with TLS and a bearer token, a default deadline,
//! retries of calls the server refused for now (RetryInfo), Generate as a
//! [`Stream`] of events with a client-side id to cancel it by (or collected at
//! once), Embed results in input order, packed embeddings decoded into vectors
//! ([`Client::embed_packed`], [`pb::EmbedRequest::with_packed`], [`Embeddings`]), Rerank results most relevant first
//! ([`Client::rerank`], [`pb::RerankRequest::new`], [`Truncation`]), each text's labels scored by a
//! sequence classifier ([`Client::classify`], [`pb::ClassifyRequest::new`], [`Classifications`]),
//! sparse vectors from a SPLADE model ([`Client::embed_sparse`], [`pb::EmbedSparseRequest::new`],
//! [`SparseEmbeddings`]),
//! adapter calls ([`Client::load_adapter`],
//! [`Client::unload_adapter`], [`Client::list_adapters`]), models at run time
//! ([`Client::load_model`] with its progress, [`pb::LoadModelRequest::new`],
//! [`Client::unload_model`], [`Client::model_statuses`]), the prefix cache
//! ([`Client::prefetch`], [`pb::PrefetchRequest::text`], [`Client::close_session`]), predicted
//! outputs ([`pb::GenerateRequest::with_prediction`], [`pb::Prediction::text`]), builders for tools and the
//! messages of an agent loop ([`pb::Tool::function`], [`pb::ToolChoice::required`],
//! [`pb::ChatMessage::tool_result`], [`GenerationResult::assistant_message`]), images in
//! chat messages ([`pb::ChatMessage::user_parts`], [`pb::ContentPart::image_file`],
//! [`pb::ContentPart::image`], [`media_type_of`]), videos in them ([`pb::ContentPart::video_file`],
//! [`pb::ContentPart::video`], [`video_media_type_of`]), audio in them ([`pb::ContentPart::audio_file`],
//! [`pb::ContentPart::audio`]), speech to text ([`Client::transcribe`],
//! [`Client::transcribe_stream`], [`pb::TranscribeRequest::new`], [`pb::Audio::file`],
//! [`audio_media_type_of`], [`Transcript`]), and [`error_details`]
//! for the google.rpc details the server attaches to errors. Everything else is
//! reachable through [`Client::raw`].
//!
//! ```no_run
//! use mlx_grpc_client::{Client, ConnectOptions, Event, pb};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("localhost:50051", ConnectOptions::default()).await?;
//! let mut generation = client.generate(pb::GenerateRequest {
//!     prompt: Some(pb::generate_request::Prompt::Text("Once upon a time".into())),
//!     stopping: Some(pb::StoppingCriteria { max_tokens: Some(16), ..Default::default() }),
//!     ..Default::default()
//! });
//! while let Some(event) = generation.next_event().await? {
//!     if let Event::Delta(delta) = event {
//!         print!("{}", delta.text);
//!     }
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

mod adapters;
mod audio_parts;
mod classify;
mod client;
mod embeddings;
mod errors;
mod generation;
mod images;
mod models;
mod pooling_builders;
mod prediction;
mod prefix;
mod priority;
mod rerank;
mod retry;
mod sparse;
mod speech;
mod videos;

pub use classify::{Classifications, ClassifiedText, ScoredLabel};
pub use client::Client;
pub use embeddings::{
    Embeddings, PackedError, Vectors, dequantize, f16_to_f32, hamming, unpack_bits,
};
pub use errors::{ErrorDetails, ErrorInfo, FieldViolation, RetryInfo, error_details};
pub use generation::{Choice, Event, Generation, GenerationResult};
pub use images::{ImageError, media_type, media_type_of};
pub use priority::MAX_PRIORITY;
pub use rerank::{RankedDocument, Ranking, Truncation};
pub use retry::RetryObserver;
pub use sparse::{SparseEmbeddings, SparseVector};
pub use speech::{AudioError, Transcript, Transcription, TranscriptionEvent, audio_media_type_of};
pub use tokio_stream::{Stream, StreamExt};
pub use tonic::Code;
pub use videos::{VideoError, video_media_type_of};

/// Generated protobuf messages and the raw tonic client of `mlxgrpc.v1`.
pub mod pb {
    #![allow(clippy::all)]
    tonic::include_proto!("mlxgrpc.v1");
}

/// A Generate request for `text` that stops after `max_tokens` tokens; set any other
/// field on the result (`stopping`, `sampling`, `model`, ...) as needed.
pub fn text_request(text: impl Into<String>, max_tokens: i32) -> pb::GenerateRequest {
    pb::GenerateRequest {
        prompt: Some(pb::generate_request::Prompt::Text(text.into())),
        stopping: Some(pb::StoppingCriteria {
            max_tokens: Some(max_tokens),
            ..Default::default()
        }),
        ..Default::default()
    }
}

mod formats;
mod tools;

pub use tools::json_string;

/// A request's speculative decoding: where drafts come from (`Ngram`: prompt lookup,
/// `Draft`: the server's draft model, `Off`, or `Unspecified` for the server's default)
/// and the most draft tokens verified per step (0: the server's default; at most 8).
/// It never changes the output, only how soon it arrives; the finished event's usage
/// reports `draft_tokens` and `accepted_draft_tokens`.
///
/// ```
/// use mlx_grpc_client::{pb, speculation, text_request};
///
/// let mut request = text_request("Repeat exactly: the quick brown fox.", 32);
/// request.speculation = Some(speculation(pb::SpeculationMode::Ngram, 6));
/// ```
pub fn speculation(mode: pb::SpeculationMode, num_draft_tokens: i32) -> pb::SpeculationOptions {
    pb::SpeculationOptions {
        mode: mode as i32,
        num_draft_tokens,
    }
}

/// The raw generated client with the connection's interceptor (token, deadline).
pub type RawClient =
    pb::inference_service_client::InferenceServiceClient<InterceptedService<Channel, CallDefaults>>;

/// Errors from [`Client::connect`].
#[derive(Debug)]
pub enum ConnectError {
    /// A bad address, TLS setup, or the connection itself failed.
    Transport(tonic::transport::Error),
    /// The bearer token is not printable ASCII.
    InvalidToken,
    /// The default priority is outside `-MAX_PRIORITY..=MAX_PRIORITY`.
    InvalidPriority(i32),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "connect: {e}"),
            Self::InvalidToken => f.write_str("connect: the bearer token is not printable ASCII"),
            Self::InvalidPriority(p) => write!(f, "connect: priority {p} is outside -100..=100"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(e),
            Self::InvalidToken | Self::InvalidPriority(_) => None,
        }
    }
}

impl From<tonic::transport::Error> for ConnectError {
    fn from(e: tonic::transport::Error) -> Self {
        Self::Transport(e)
    }
}

/// How to secure the connection.
#[derive(Clone, Debug, Default)]
pub enum Tls {
    /// Plain-text HTTP/2 (`http://`), unless the address says `https://`.
    #[default]
    None,
    /// TLS verified against the operating system's root certificates.
    SystemRoots,
    /// TLS verified against this CA certificate (PEM).
    CaPem(Vec<u8>),
}

/// Options for [`Client::connect`].
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Transport security.
    pub tls: Tls,
    /// Overrides the server name checked against the certificate.
    pub tls_domain: Option<String>,
    /// Sent as `authorization: Bearer <token>` on every call.
    pub bearer_token: Option<String>,
    /// Deadline for each call that does not set its own (`Request::set_timeout`).
    /// For streams it covers the whole stream.
    pub timeout: Option<Duration>,
    /// Limit for establishing the connection.
    pub connect_timeout: Option<Duration>,
    /// Attempts in all for a call the server refuses with RESOURCE_EXHAUSTED or
    /// UNAVAILABLE and a RetryInfo (default 3; 1 turns retrying off).
    pub max_attempts: u32,
    /// Hears of each retry: the refusal and the delay.
    pub on_retry: Option<RetryObserver>,
    /// The priority of Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests that set none (see
    /// `with_priority`).
    pub priority: i32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            tls: Tls::None,
            tls_domain: None,
            bearer_token: None,
            timeout: None,
            connect_timeout: None,
            max_attempts: 3,
            on_retry: None,
            priority: 0,
        }
    }
}

impl ConnectOptions {
    /// Verify TLS against the system roots.
    pub fn with_system_roots(mut self) -> Self {
        self.tls = Tls::SystemRoots;
        self
    }
    /// Verify TLS against a CA certificate read from a PEM file.
    pub fn with_ca_file(mut self, path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        self.tls = Tls::CaPem(std::fs::read(path)?);
        Ok(self)
    }
    /// Send a bearer token with every call.
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }
    /// Default deadline of every call (retries included).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Attempts in all for a call refused with RetryInfo; each retry waits the
    /// server's delay, only before the first response and within the deadline.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }
    /// Calls `f` before each retry with the refusal and the delay.
    pub fn on_retry(mut self, f: impl Fn(&ErrorDetails, Duration) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(RetryObserver(Arc::new(f)));
        self
    }
}

/// Adds the bearer token and the default deadline to every call.
#[derive(Clone, Debug)]
pub struct CallDefaults {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
    timeout: Option<Duration>,
}

impl Interceptor for CallDefaults {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(auth) = &self.authorization {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        if let Some(timeout) = self.timeout
            && !request.metadata().contains_key("grpc-timeout")
        {
            request.set_timeout(timeout);
        }
        Ok(request)
    }
}

impl Client {
    /// Connects to `address` (`host:port`, or a URL with `http://` / `https://`).
    pub async fn connect(address: &str, options: ConnectOptions) -> Result<Self, ConnectError> {
        if !(-MAX_PRIORITY..=MAX_PRIORITY).contains(&options.priority) {
            return Err(ConnectError::InvalidPriority(options.priority));
        }
        let authorization = match &options.bearer_token {
            Some(token) => Some(
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| ConnectError::InvalidToken)?,
            ),
            None => None,
        };
        let uri = match (address.contains("://"), &options.tls) {
            (true, _) => address.to_string(),
            (false, Tls::None) => format!("http://{address}"),
            (false, _) => format!("https://{address}"),
        };
        let mut endpoint = Endpoint::from_shared(uri)?;
        let tls = match &options.tls {
            // An https:// address without explicit TLS options uses the system roots.
            Tls::None if endpoint.uri().scheme_str() == Some("https") => {
                Some(ClientTlsConfig::new().with_native_roots())
            }
            Tls::None => None,
            Tls::SystemRoots => Some(ClientTlsConfig::new().with_native_roots()),
            Tls::CaPem(pem) => {
                Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            }
        };
        if let Some(mut tls) = tls {
            if let Some(domain) = &options.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(tls)?;
        }
        if let Some(t) = options.connect_timeout {
            endpoint = endpoint.connect_timeout(t);
        }
        let channel = endpoint.connect().await?;
        let defaults = CallDefaults {
            authorization,
            timeout: options.timeout,
        };
        Ok(Self {
            raw: pb::inference_service_client::InferenceServiceClient::with_interceptor(
                channel, defaults,
            ),
            timeout: options.timeout,
            retry: retry::RetryPolicy {
                max_attempts: options.max_attempts.max(1),
                observer: options.on_retry.clone(),
            },
            priority: options.priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_defaults_add_token_and_deadline() {
        let mut defaults = CallDefaults {
            authorization: Some("Bearer abc".parse().unwrap()),
            timeout: Some(Duration::from_secs(5)),
        };
        let req = defaults.call(Request::new(())).unwrap();
        assert_eq!(req.metadata().get("authorization").unwrap(), "Bearer abc");
        assert_eq!(req.metadata().get("grpc-timeout").unwrap(), "5000000u");

        // A call's own deadline wins.
        let mut own = Request::new(());
        own.set_timeout(Duration::from_millis(250));
        let req = defaults.call(own).unwrap();
        assert_eq!(req.metadata().get("grpc-timeout").unwrap(), "250000u");
    }

    #[test]
    fn speculation_builds_the_options() {
        let ngram = speculation(pb::SpeculationMode::Ngram, 6);
        assert_eq!(ngram.mode(), pb::SpeculationMode::Ngram);
        assert_eq!(
            ngram,
            pb::SpeculationOptions {
                mode: pb::SpeculationMode::Ngram as i32,
                num_draft_tokens: 6
            }
        );
        assert_eq!(
            speculation(pb::SpeculationMode::Off, 0).mode(),
            pb::SpeculationMode::Off
        );
        assert_eq!(
            speculation(pb::SpeculationMode::Unspecified, 0),
            pb::SpeculationOptions::default()
        );
    }

    #[tokio::test]
    async fn invalid_token_fails_before_connecting() {
        let options = ConnectOptions::default().with_bearer_token("line\nbreak");
        let err = Client::connect("127.0.0.1:1", options).await.unwrap_err();
        assert!(matches!(err, ConnectError::InvalidToken), "{err}");
    }
}
