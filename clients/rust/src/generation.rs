//! A Generate call as a stream of events: started lazily, retried before its first
//! event when the server refuses it for now, cancelled when dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{self, BoxStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Status, Streaming};

use crate::RawClient;
use crate::pb;
use crate::retry::Attempts;

/// One event of a Generate stream: `Started`, then `Delta`s, then `Finished`. A delta
/// carries the answer's `text`, and for chat prompts the model's `reasoning`, pieces of
/// tool calls (`tool_call_deltas`) and the calls they completed (`tool_calls`).
pub use pb::generate_response::Event;

/// A Generate call: a [`Stream`] of [`Event`]s. Nothing is sent until it is first
/// polled; dropping it cancels the call.
pub struct Generation {
    request_id: String,
    events: BoxStream<'static, Result<Event, Status>>,
}

/// Everything one generation produced ([`Generation::collect`]).
#[derive(Clone, Debug, Default)]
pub struct GenerationResult {
    pub request_id: String,
    pub started: Option<pb::GenerationStarted>,
    pub token_ids: Vec<i32>,
    pub text: String,
    pub logprobs: Vec<pb::TokenLogprob>,
    /// The model's thinking, kept out of `text`.
    pub reasoning: String,
    /// The complete calls the model made (each delta's `tool_calls`; its
    /// `tool_call_deltas` are only their pieces). The answer then ends with
    /// `FINISH_REASON_TOOL_CALLS`.
    pub tool_calls: Vec<pb::ToolCall>,
    /// The finish reason (see [`GenerationResult::finish_reason`]), usage and timings.
    pub finished: Option<pb::GenerationFinished>,
}

impl GenerationResult {
    /// Adds an event: a delta's token ids, text, logprobs, reasoning and complete
    /// tool calls are joined in order.
    pub(crate) fn record(&mut self, event: Event) {
        match event {
            Event::Started(s) => self.started = Some(s),
            Event::Delta(d) => {
                self.token_ids.extend(&d.token_ids);
                self.text.push_str(&d.text);
                self.logprobs.extend(d.logprobs);
                self.reasoning.push_str(&d.reasoning);
                self.tool_calls.extend(d.tool_calls);
            }
            Event::Finished(f) => self.finished = Some(f),
        }
    }
}

enum State {
    Start(RawClient, Attempts<pb::GenerateRequest>),
    Streaming(Streaming<pb::GenerateResponse>),
}

impl Generation {
    pub(crate) fn new(
        raw: RawClient,
        attempts: Attempts<pb::GenerateRequest>,
        request_id: String,
    ) -> Self {
        let events = stream::unfold(Some(State::Start(raw, attempts)), |state| async move {
            let (item, next) = match state? {
                State::Start(raw, attempts) => open(raw, attempts).await,
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
    /// [`crate::Client::cancel`] from anywhere, at once.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The next event, or `None` when the stream has ended.
    pub async fn next_event(&mut self) -> Result<Option<Event>, Status> {
        self.events.next().await.transpose()
    }

    /// Reads the whole stream: the unary form of Generate. The deltas' token ids, text,
    /// logprobs, reasoning and complete tool calls are joined in order.
    pub async fn collect(mut self) -> Result<GenerationResult, Status> {
        let mut r = GenerationResult {
            request_id: self.request_id.clone(),
            ..Default::default()
        };
        while let Some(event) = self.next_event().await? {
            r.record(event);
        }
        Ok(r)
    }
}

type Step = (Option<Result<Event, Status>>, Option<State>);

/// Starts the call and reads its first event, retrying refusals.
async fn open(mut raw: RawClient, mut attempts: Attempts<pb::GenerateRequest>) -> Step {
    loop {
        let first = match raw.generate(attempts.request()).await {
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

async fn next_event(s: &mut Streaming<pb::GenerateResponse>) -> Result<Option<Event>, Status> {
    loop {
        match s.message().await? {
            None => return Ok(None),
            Some(pb::GenerateResponse { event: Some(e) }) => return Ok(Some(e)),
            Some(_) => continue, // an empty event: nothing to report
        }
    }
}

impl Stream for Generation {
    type Item = Result<Event, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("request_id", &self.request_id)
            .finish()
    }
}
