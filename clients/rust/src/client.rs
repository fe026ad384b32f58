//! [`Client`]: the calls, each retried when the server refuses it for now.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::{IntoRequest, Request, Status};

use crate::generation::{Generation, GenerationResult};
use crate::retry::{Attempts, RetryPolicy};
use crate::{RawClient, pb};

/// A connection to an mlx-grpc server. Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) raw: RawClient,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    /// Of Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests that set none
    /// ([`crate::ConnectOptions::with_priority`]).
    pub(crate) priority: i32,
}

impl Client {
    /// The generated client on the same connection (token and default deadline,
    /// no retries), for the RPCs not wrapped here or for full control.
    pub fn raw(&self) -> RawClient {
        self.raw.clone()
    }

    pub(crate) fn attempts<T: Clone>(&self, request: impl IntoRequest<T>) -> Attempts<T> {
        Attempts::new(request, &self.retry, self.timeout)
    }

    /// Sends `request` with `call`, retrying refusals that carry RetryInfo.
    pub(crate) async fn unary<T, R, F, Fut>(
        &self,
        request: impl IntoRequest<T>,
        mut call: F,
    ) -> Result<R, Status>
    where
        T: Clone,
        F: FnMut(RawClient, Request<T>) -> Fut,
        Fut: Future<Output = Result<R, Status>>,
    {
        let mut attempts = self.attempts(request);
        loop {
            match call(self.raw.clone(), attempts.request()).await {
                Err(status) if attempts.wait(&status).await => continue,
                result => return result,
            }
        }
    }

    /// Prepares a generation; nothing is sent until the [`Generation`] is polled.
    /// An empty `request_id` is filled with a fresh client-side id, so
    /// [`Generation::request_id`] can be passed to [`Client::cancel`] at once.
    /// A per-call deadline: pass a `tonic::Request` with `set_timeout`.
    /// A request without a priority gets the client's default
    /// ([`crate::ConnectOptions::with_priority`]).
    pub fn generate(&self, request: impl IntoRequest<pb::GenerateRequest>) -> Generation {
        let request = self.generate_request(request);
        let request_id = request.get_ref().request_id.clone();
        Generation::new(self.raw.clone(), self.attempts(request), request_id)
    }

    /// `request` as [`Client::generate`] sends it: with a request id and a priority.
    pub(crate) fn generate_request(
        &self,
        request: impl IntoRequest<pb::GenerateRequest>,
    ) -> Request<pb::GenerateRequest> {
        let mut request = self.with_default_priority(request.into_request());
        if request.get_ref().request_id.is_empty() {
            request.get_mut().request_id = new_request_id();
        }
        request
    }

    /// `request` as [`Client::embed`] sends it: with a priority.
    pub(crate) fn embed_request(
        &self,
        request: impl IntoRequest<pb::EmbedRequest>,
    ) -> Request<pb::EmbedRequest> {
        self.with_default_priority(request.into_request())
    }

    /// Runs a generation to its end: the unary form of [`Client::generate`].
    pub async fn generate_text(
        &self,
        request: impl IntoRequest<pb::GenerateRequest>,
    ) -> Result<GenerationResult, Status> {
        self.generate(request).collect().await
    }

    /// Cancels a running Generate, Embed, Rerank, Classify, EmbedSparse or Transcribe through the Cancel RPC. Returns
    /// whether the server found it; a Generate stream then ends with a
    /// `FINISH_REASON_CANCELLED` event, the others with `Code::Cancelled`.
    pub async fn cancel(&self, request_id: impl Into<String>) -> Result<bool, Status> {
        let req = pb::CancelRequest {
            request_id: request_id.into(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.cancel(r).await })
            .await?;
        Ok(r.into_inner().cancelled)
    }

    /// Embeds texts, returning one response per input ordered by `index`. A request
    /// without a priority gets the client's default. Build it with
    /// [`pb::EmbedRequest::new`] and its `with_*` options ([`crate::Truncation`]: an input
    /// over the model's limit is cut, or refused with INVALID_ARGUMENT).
    pub async fn embed(
        &self,
        request: impl IntoRequest<pb::EmbedRequest>,
    ) -> Result<Vec<pb::EmbedResponse>, Status> {
        let mut out = self
            .unary(self.embed_request(request), |mut raw, r| async move {
                let mut stream = raw.embed(r).await?.into_inner();
                let mut out = Vec::new();
                while let Some(r) = stream.message().await? {
                    out.push(r);
                }
                Ok(out)
            })
            .await?;
        out.sort_by_key(|r| r.index);
        Ok(out)
    }

    /// Embeds `inputs` with the default embedding model.
    pub async fn embed_texts<S: Into<String>>(
        &self,
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
    pub async fn model_info(&self, model: &str) -> Result<pb::ModelInfo, Status> {
        let req = pb::GetModelInfoRequest {
            model: model.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.get_model_info(r).await })
            .await?;
        r.into_inner()
            .info
            .ok_or_else(|| Status::internal("GetModelInfo returned no info"))
    }

    /// Every ready model, the default generation model first ([`Client::model_statuses`]
    /// also lists those loading, unloading or unloaded).
    pub async fn list_models(&self) -> Result<Vec<pb::ModelInfo>, Status> {
        let r = self
            .unary(pb::ListModelsRequest {}, |mut raw, r| async move {
                raw.list_models(r).await
            })
            .await?;
        Ok(r.into_inner().models)
    }

    /// The memory plan of `model` for `context_tokens` (0: the model's context length).
    pub async fn plan_memory(
        &self,
        model: &str,
        context_tokens: i64,
    ) -> Result<pb::MemoryPlan, Status> {
        let req = pb::PlanMemoryRequest {
            model: model.to_string(),
            context_tokens,
            ..Default::default()
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.plan_memory(r).await })
            .await?;
        r.into_inner()
            .plan
            .ok_or_else(|| Status::internal("PlanMemory returned no plan"))
    }

    /// How busy each generation model is (`model` empty: every one): running and
    /// waiting requests, KV-cache bytes against the memory budget, the prefix cache
    /// and recent tokens per second, and each model's `tenants` (a `pb::TenantLoad` per
    /// tenant with requests; a caller without the admin role sees only its own).
    /// `raw().get_load` also returns the uptime.
    pub async fn model_loads(&self, model: &str) -> Result<Vec<pb::ModelLoad>, Status> {
        let req = pb::GetLoadRequest {
            model: model.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.get_load(r).await })
            .await?;
        Ok(r.into_inner().models)
    }
}

pub(crate) fn new_request_id() -> String {
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
    #[test]
    fn request_ids_are_unique() {
        assert_ne!(super::new_request_id(), super::new_request_id());
    }
}
