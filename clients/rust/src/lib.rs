//! A thin Rust client for the mlx-grpc `InferenceService` (package `mlxgrpc.v1`).
//!
//! The protobuf messages and the tonic client are generated at build time from
//! `../../protos` (see `build.rs`) and live in [`pb`]. [`Client`] adds what the
//! raw stub lacks: connecting with TLS and a bearer token, a default deadline,
//! Generate as a [`Stream`] of events with an id to cancel it by, Embed results
//! in input order, adapter calls ([`Client::load_adapter`], [`Client::unload_adapter`],
//! [`Client::list_adapters`]), and [`error_details`] for the google.rpc details the
//! server attaches to errors. Everything else is reachable through [`Client::raw`].
//!
//! ```no_run
//! use mlx_grpc_client::{Client, ConnectOptions, Event, pb};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = Client::connect("localhost:50051", ConnectOptions::default()).await?;
//! let mut generation = client.generate(pb::GenerateRequest {
//!     prompt: Some(pb::generate_request::Prompt::Text("Once upon a time".into())),
//!     stopping: Some(pb::StoppingCriteria { max_tokens: Some(16), ..Default::default() }),
//!     ..Default::default()
//! }).await?;
//! while let Some(event) = generation.next_event().await? {
//!     if let Event::Delta(delta) = event {
//!         print!("{}", delta.text);
//!     }
//! }
//! # Ok(()) }
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{IntoRequest, Request, Status, Streaming};
use tonic_types::StatusExt;

pub use tokio_stream::{Stream, StreamExt};
pub use tonic::Code;
pub use tonic_types::{ErrorInfo, FieldViolation, RetryInfo};

/// Generated protobuf messages and the raw tonic client of `mlxgrpc.v1`.
pub mod pb {
    #![allow(clippy::all)]
    tonic::include_proto!("mlxgrpc.v1");
}

mod adapters;

/// One event of a Generate stream: `Started`, then `Delta`s, then `Finished`.
pub use pb::generate_response::Event;

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
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "connect: {e}"),
            Self::InvalidToken => f.write_str("connect: the bearer token is not printable ASCII"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(e),
            Self::InvalidToken => None,
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
#[derive(Clone, Debug, Default)]
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
    /// Default deadline of every call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
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

/// A connection to an mlx-grpc server. Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Client {
    raw: RawClient,
}

impl Client {
    /// Connects to `address` (`host:port`, or a URL with `http://` / `https://`).
    pub async fn connect(address: &str, options: ConnectOptions) -> Result<Self, ConnectError> {
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
        })
    }

    /// The generated client on the same connection, for the RPCs not wrapped here
    /// (Tokenize, Detokenize, ListModels, PlanMemory) or for full control.
    pub fn raw(&self) -> RawClient {
        self.raw.clone()
    }

    /// Starts a generation. An empty `request_id` is filled with a fresh
    /// client-side id, so [`Generation::request_id`] can be passed to
    /// [`Client::cancel`] at once. Dropping the returned stream cancels the call.
    pub async fn generate(
        &mut self,
        request: impl IntoRequest<pb::GenerateRequest>,
    ) -> Result<Generation, Status> {
        let mut request = request.into_request();
        if request.get_ref().request_id.is_empty() {
            request.get_mut().request_id = new_request_id();
        }
        let request_id = request.get_ref().request_id.clone();
        let inner = self.raw.generate(request).await?.into_inner();
        Ok(Generation { inner, request_id })
    }

    /// Cancels a running Generate or Embed through the Cancel RPC. Returns whether
    /// the server found it; the stream then ends with a `FINISH_REASON_CANCELLED` event.
    pub async fn cancel(&mut self, request_id: impl Into<String>) -> Result<bool, Status> {
        let req = pb::CancelRequest {
            request_id: request_id.into(),
        };
        Ok(self.raw.cancel(req).await?.into_inner().cancelled)
    }

    /// Embeds texts, returning one response per input ordered by `index`.
    pub async fn embed(
        &mut self,
        request: impl IntoRequest<pb::EmbedRequest>,
    ) -> Result<Vec<pb::EmbedResponse>, Status> {
        let mut stream = self.raw.embed(request).await?.into_inner();
        let mut out = Vec::new();
        while let Some(r) = stream.message().await? {
            out.push(r);
        }
        out.sort_by_key(|r| r.index);
        Ok(out)
    }

    /// Embeds `inputs` with the default embedding model.
    pub async fn embed_texts<S: Into<String>>(
        &mut self,
        inputs: impl IntoIterator<Item = S>,
    ) -> Result<Vec<Vec<f32>>, Status> {
        let req = pb::EmbedRequest {
            inputs: inputs.into_iter().map(Into::into).collect(),
            ..Default::default()
        };
        Ok(self
            .embed(req)
            .await?
            .into_iter()
            .map(|r| r.embedding)
            .collect())
    }

    /// Describes `model` (empty: the default generation model).
    pub async fn model_info(&mut self, model: &str) -> Result<pb::ModelInfo, Status> {
        let req = pb::GetModelInfoRequest {
            model: model.to_string(),
        };
        let resp = self.raw.get_model_info(req).await?.into_inner();
        resp.info
            .ok_or_else(|| Status::internal("GetModelInfo returned no info"))
    }
}

/// A running Generate: a [`Stream`] of [`Event`]s. Drop it to cancel the call.
#[derive(Debug)]
pub struct Generation {
    inner: Streaming<pb::GenerateResponse>,
    request_id: String,
}

impl Generation {
    /// The request id, for [`Client::cancel`].
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The next event, or `None` when the stream has ended.
    pub async fn next_event(&mut self) -> Result<Option<Event>, Status> {
        loop {
            match self.inner.message().await? {
                None => return Ok(None),
                Some(pb::GenerateResponse { event: Some(e) }) => return Ok(Some(e)),
                Some(_) => continue, // an empty event: nothing to report
            }
        }
    }
}

impl Stream for Generation {
    type Item = Result<Event, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(pb::GenerateResponse { event: None }))) => continue,
                Poll::Ready(Some(Ok(pb::GenerateResponse { event: Some(e) }))) => {
                    Poll::Ready(Some(Ok(e)))
                }
                Poll::Ready(Some(Err(s))) => Poll::Ready(Some(Err(s))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

/// The google.rpc details the server attaches to an error status.
#[derive(Clone, Debug, Default)]
pub struct ErrorDetails {
    /// ErrorInfo: `domain` is "mlxgrpc.v1", `reason` e.g. "INVALID_FIELD",
    /// `metadata` e.g. {"field": ...}.
    pub error_info: Option<ErrorInfo>,
    /// BadRequest field violations; `field` is a path such as "sampling.temperature".
    pub field_violations: Vec<FieldViolation>,
    /// RetryInfo's delay, on RESOURCE_EXHAUSTED and UNAVAILABLE.
    pub retry_delay: Option<Duration>,
}

/// Decodes the google.rpc details (`grpc-status-details-bin`) of `status`.
/// Missing or undecodable details give an empty result.
pub fn error_details(status: &Status) -> ErrorDetails {
    let d = status.get_error_details();
    ErrorDetails {
        error_info: d.error_info().cloned(),
        field_violations: d
            .bad_request()
            .map(|b| b.field_violations.clone())
            .unwrap_or_default(),
        retry_delay: d.retry_info().and_then(|r| r.retry_delay),
    }
}

fn new_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("rs-{:x}-{}-{n}", nanos, std::process::id())
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

    #[tokio::test]
    async fn invalid_token_fails_before_connecting() {
        let options = ConnectOptions::default().with_bearer_token("line\nbreak");
        let err = Client::connect("127.0.0.1:1", options).await.unwrap_err();
        assert!(matches!(err, ConnectError::InvalidToken), "{err}");
    }

    #[test]
    fn details_of_a_plain_status_are_empty() {
        let d = error_details(&Status::not_found("nope"));
        assert!(d.error_info.is_none() && d.field_violations.is_empty());
        assert!(d.retry_delay.is_none());
    }

    #[test]
    fn details_are_decoded() {
        let mut details = tonic_types::ErrorDetails::with_bad_request_violation(
            "sampling.temperature",
            "must be >= 0",
        );
        details.set_error_info(
            "INVALID_FIELD",
            "mlxgrpc.v1",
            [("field".to_string(), "sampling.temperature".to_string())],
        );
        details.set_retry_info(Some(Duration::from_millis(1500)));
        let status = Status::with_error_details(Code::InvalidArgument, "bad", details);
        let d = error_details(&status);
        assert_eq!(d.field_violations[0].field, "sampling.temperature");
        assert_eq!(d.error_info.unwrap().domain, "mlxgrpc.v1");
        assert_eq!(d.retry_delay, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn request_ids_are_unique() {
        assert_ne!(new_request_id(), new_request_id());
    }
}
