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

/// One event of a Generate stream: `Started`, `PromptLogprobs` when the request set
/// `prompt_logprobs`, then `Delta`s, then `Finished` (one per choice when `n` > 1). A delta
/// carries the answer's `text`, and for chat prompts the model's `reasoning`, pieces of
/// tool calls (`tool_call_deltas`) and the calls they completed (`tool_calls`).
pub use pb::generate_response::Event;

/// A Generate call: a [`Stream`] of [`Event`]s. Nothing is sent until it is first
/// polled; dropping it cancels the call.
pub struct Generation {
    request_id: String,
    events: BoxStream<'static, Result<(i32, Event), Status>>,
}

/// One answer of a generation: `GenerateRequest::n` of them (one by default), each from
/// the events of its `choice_index`.
#[derive(Clone, Debug, Default)]
pub struct Choice {
    /// `GenerateResponse::choice_index`: 0 to n-1.
    pub index: i32,
    pub token_ids: Vec<i32>,
    pub text: String,
    pub logprobs: Vec<pb::TokenLogprob>,
    /// The model's thinking, kept out of `text`.
    pub reasoning: String,
    /// The complete calls the model made (see [`GenerationResult::tool_calls`]).
    pub tool_calls: Vec<pb::ToolCall>,
    /// This choice's finish reason, usage and timings.
    pub finished: Option<pb::GenerationFinished>,
}

/// Everything one generation produced ([`Generation::collect`]). Its own answer fields
/// (`text`, `token_ids`, `finished`, ...) are the first choice's; `choices` holds every
/// choice by index, the first included.
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
    /// Every choice in index order (`GenerateRequest::n` of them).
    pub choices: Vec<Choice>,
    /// The prompt tokens' log probabilities (all but the first), when the request set
    /// `prompt_logprobs`.
    pub prompt_logprobs: Vec<pb::TokenLogprob>,
}

impl Choice {
    fn add(&mut self, d: pb::TokenDelta) {
        self.token_ids.extend(&d.token_ids);
        self.text.push_str(&d.text);
        self.logprobs.extend(d.logprobs);
        self.reasoning.push_str(&d.reasoning);
        self.tool_calls.extend(d.tool_calls);
    }
}

impl GenerationResult {
    /// Adds an event of choice `index`: a delta's token ids, text, logprobs, reasoning
    /// and complete tool calls are joined in order.
    pub(crate) fn record(&mut self, index: i32, event: Event) {
        let index = usize::try_from(index).unwrap_or(0);
        while self.choices.len() <= index {
            let next = Choice {
                index: self.choices.len() as i32,
                ..Default::default()
            };
            self.choices.push(next);
        }
        match event {
            Event::Started(s) => self.started = Some(s),
            Event::PromptLogprobs(p) => self.prompt_logprobs.extend(p.tokens),
            Event::Delta(d) => {
                if index == 0 {
                    self.token_ids.extend(&d.token_ids);
                    self.text.push_str(&d.text);
                    self.logprobs.extend(d.logprobs.iter().cloned());
                    self.reasoning.push_str(&d.reasoning);
                    self.tool_calls.extend(d.tool_calls.iter().cloned());
                }
                self.choices[index].add(d);
            }
            Event::Finished(f) => {
                if index == 0 {
                    self.finished = Some(f.clone());
                }
                self.choices[index].finished = Some(f);
            }
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

    /// The next event, or `None` when the stream has ended. With `n` > 1 the choices'
    /// events interleave: [`Generation::next_choice_event`] says whose each is.
    pub async fn next_event(&mut self) -> Result<Option<Event>, Status> {
        Ok(self.next_choice_event().await?.map(|(_, event)| event))
    }

    /// The next event with its `choice_index` (0 to n-1 for deltas and finished
    /// events, 0 for the others), or `None` when the stream has ended.
    pub async fn next_choice_event(&mut self) -> Result<Option<(i32, Event)>, Status> {
        self.events.next().await.transpose()
    }

    /// Reads the whole stream: the unary form of Generate. Each choice's token ids, text,
    /// logprobs, reasoning and complete tool calls are joined in order.
    pub async fn collect(mut self) -> Result<GenerationResult, Status> {
        let mut r = GenerationResult {
            request_id: self.request_id.clone(),
            choices: vec![Choice::default()],
            ..Default::default()
        };
        while let Some((index, event)) = self.next_choice_event().await? {
            r.record(index, event);
        }
        Ok(r)
    }
}

type Step = (Option<Result<(i32, Event), Status>>, Option<State>);

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

async fn next_event(
    s: &mut Streaming<pb::GenerateResponse>,
) -> Result<Option<(i32, Event)>, Status> {
    loop {
        match s.message().await? {
            None => return Ok(None),
            Some(pb::GenerateResponse {
                event: Some(e),
                choice_index,
            }) => return Ok(Some((choice_index, e))),
            Some(_) => continue, // an empty event: nothing to report
        }
    }
}

impl Stream for Generation {
    type Item = Result<Event, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events
            .as_mut()
            .poll_next(cx)
            .map(|item| item.map(|r| r.map(|(_, event)| event)))
    }
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("request_id", &self.request_id)
            .finish()
    }
}
