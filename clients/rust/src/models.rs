//! Models at run time: [`Client::load_model`] loads a model from the server's
//! `--model-root` (or its catalog) and reports the load's steps, [`Client::unload_model`]
//! frees it again and [`Client::model_statuses`] lists every model with its state. Both
//! admin calls need the admin role (PERMISSION_DENIED otherwise, never retried); like
//! the other calls they are retried when refused for now with RetryInfo (LoadModel only
//! before its first progress message). A request's `keep_alive_seconds`
//! ([`pb::GenerateRequest::with_keep_alive`], [`pb::EmbedRequest::with_keep_alive`]) says how
//! long an on-demand model stays loaded once idle after it.
//!
//! ```
//! use mlx_grpc_client::pb;
//!
//! let request = pb::LoadModelRequest::new("small", "llama")   // relative to --model-root
//!     .with_kind(pb::ModelKind::Generation)
//!     .with_options(pb::ModelOptions { kv_bits: 8, ..Default::default() })
//!     .with_keep_alive(300.0);                                // unloaded after 5 idle minutes
//! # assert_eq!(request.keep_alive_seconds, Some(300.0));
//! let generate = mlx_grpc_client::text_request("Hi", 8).with_keep_alive(-1.0); // kept until unloaded
//! # assert_eq!(generate.keep_alive_seconds, Some(-1.0));
//! ```

use tonic::{IntoRequest, Status};

use crate::{Client, pb};

impl pb::LoadModelRequest {
    /// Loads `source` (a model directory or a `.gguf` file, relative to the server's
    /// `--model-root`) as `name`, a generation model with the server's settings; the
    /// `with_*` methods set the rest. `source` empty names a catalog model to load.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            source: source.into(),
            ..Default::default()
        }
    }

    /// Generation (the default) or embedding.
    pub fn with_kind(mut self, kind: pb::ModelKind) -> Self {
        self.set_kind(kind);
        self
    }

    /// How to load it: dtype, KV-cache bits, draft model, context length (each unset
    /// keeps the server's setting).
    pub fn with_options(mut self, options: pb::ModelOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// Seconds the model stays loaded after its last request ends: 0 unloads it once
    /// idle, negative keeps it until [`Client::unload_model`] (unset: kept).
    pub fn with_keep_alive(mut self, seconds: f64) -> Self {
        self.keep_alive_seconds = Some(seconds);
        self
    }
}

impl pb::GenerateRequest {
    /// Seconds an on-demand (catalog) model stays loaded once idle after this request
    /// (0: unloaded once idle; at most the tenant's limit). Unset: the catalog's.
    pub fn with_keep_alive(mut self, seconds: f64) -> Self {
        self.keep_alive_seconds = Some(seconds);
        self
    }
}

impl pb::EmbedRequest {
    /// Seconds an on-demand (catalog) model stays loaded once idle after this request
    /// (0: unloaded once idle; at most the tenant's limit). Unset: the catalog's.
    pub fn with_keep_alive(mut self, seconds: f64) -> Self {
        self.keep_alive_seconds = Some(seconds);
        self
    }
}

impl Client {
    /// Loads a model at run time (admin role) and returns it once it serves. Each
    /// progress message — `RESOLVING`, `PLANNING` (with the models `evicted` to make
    /// room), `READING` and `CONVERTING` (`done` of `total`), `WARMING`, and last
    /// `SERVING` with the model — goes to `on_progress` as it arrives. A refusal with
    /// RetryInfo before the first message (no room while every resident model is in
    /// use: RESOURCE_EXHAUSTED) is retried; a source outside the root is
    /// INVALID_ARGUMENT, a name in use ALREADY_EXISTS, a model that can never fit
    /// OUT_OF_RANGE. A stream that ends without `SERVING` is INTERNAL. Dropping the
    /// future cancels the call, which abandons the load. Build the request with
    /// [`pb::LoadModelRequest::new`].
    pub async fn load_model(
        &self,
        request: impl IntoRequest<pb::LoadModelRequest>,
        mut on_progress: impl FnMut(&pb::LoadModelResponse),
    ) -> Result<pb::ModelInfo, Status> {
        let mut attempts = self.attempts(request);
        let (first, mut stream) = loop {
            let opened = match self.raw.clone().load_model(attempts.request()).await {
                Ok(response) => {
                    let mut stream = response.into_inner();
                    stream.message().await.map(|first| (first, stream))
                }
                Err(status) => Err(status),
            };
            match opened {
                Err(status) if attempts.wait(&status).await => continue,
                result => break result?,
            }
        };
        let Some(mut last) = first else {
            return served(None);
        };
        on_progress(&last);
        while let Some(message) = stream.message().await? {
            on_progress(&message);
            last = message;
        }
        served(Some(last))
    }

    /// Unloads model `name` (admin role): new requests for it are UNAVAILABLE, its
    /// requests finish (or, with `cancel_requests`, end CANCELLED), then its memory is
    /// freed. The response has the `freed_bytes` and the model's `state()` after
    /// (`pb::ModelState::Unloaded` for a catalog model, which its next request loads
    /// again).
    pub async fn unload_model(
        &self,
        name: &str,
        cancel_requests: bool,
    ) -> Result<pb::UnloadModelResponse, Status> {
        let req = pb::UnloadModelRequest {
            name: name.to_string(),
            cancel_requests,
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.unload_model(r).await })
            .await?;
        Ok(r.into_inner())
    }

    /// Every model the caller may use with its `state()` (`Loading`, `Ready`,
    /// `Unloading`, or `Unloaded` until its first request), ready ones first in
    /// [`Client::list_models`]' order: ListModels' `statuses`. The figures on memory
    /// and use (`resident_bytes`, `idle_seconds`, `requests`, `load_seconds`) are 0
    /// without the admin role.
    pub async fn model_statuses(&self) -> Result<Vec<pb::ModelStatus>, Status> {
        let r = self
            .unary(pb::ListModelsRequest {}, |mut raw, r| async move {
                raw.list_models(r).await
            })
            .await?;
        Ok(r.into_inner().statuses)
    }
}

/// The model of a LoadModel stream's last message, which must be SERVING with it.
fn served(last: Option<pb::LoadModelResponse>) -> Result<pb::ModelInfo, Status> {
    match last {
        Some(pb::LoadModelResponse {
            stage,
            model: Some(model),
            ..
        }) if stage == pb::LoadStage::Serving as i32 => Ok(model),
        Some(m) => Err(Status::internal(format!(
            "LoadModel ended at stage {} without serving the model",
            m.stage().as_str_name()
        ))),
        None => Err(Status::internal(
            "LoadModel ended without a progress message",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn progress(stage: pb::LoadStage, model: Option<&str>) -> pb::LoadModelResponse {
        pb::LoadModelResponse {
            stage: stage as i32,
            model: model.map(|name| pb::ModelInfo {
                name: name.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn builders_set_the_fields() {
        let options = pb::ModelOptions {
            dtype: "float16".into(),
            kv_bits: 8,
            ..Default::default()
        };
        assert_eq!(
            pb::LoadModelRequest::new("small", "models/llama")
                .with_kind(pb::ModelKind::Embedding)
                .with_options(options.clone())
                .with_keep_alive(0.0),
            pb::LoadModelRequest {
                name: "small".into(),
                source: "models/llama".into(),
                kind: pb::ModelKind::Embedding as i32,
                options: Some(options),
                keep_alive_seconds: Some(0.0),
            }
        );
        let plain = pb::LoadModelRequest::new("a", "b");
        assert_eq!(
            (plain.kind(), plain.options, plain.keep_alive_seconds),
            (pb::ModelKind::Unspecified, None, None),
            "unset: the server's settings"
        );
        assert_eq!(
            crate::text_request("hi", 1)
                .with_keep_alive(-1.0)
                .keep_alive_seconds,
            Some(-1.0)
        );
        assert_eq!(crate::text_request("hi", 1).keep_alive_seconds, None);
        assert_eq!(
            pb::EmbedRequest::new(["a"])
                .with_keep_alive(30.0)
                .keep_alive_seconds,
            Some(30.0)
        );
    }

    /// Compiles only if a load can be spawned (`tokio::spawn` needs a `Send` future).
    #[allow(dead_code)]
    fn a_load_is_send(client: &Client) -> impl std::future::Future + Send + '_ {
        client.load_model(pb::LoadModelRequest::new("a", "b"), |_| {})
    }

    #[test]
    fn a_load_serves_only_when_its_last_message_is_serving_with_the_model() {
        let model = served(Some(progress(pb::LoadStage::Serving, Some("small")))).unwrap();
        assert_eq!(model.name, "small");
        for last in [
            None,
            Some(progress(pb::LoadStage::Warming, None)),
            Some(progress(pb::LoadStage::Serving, None)),
        ] {
            let err = served(last.clone()).expect_err("not served");
            assert_eq!(err.code(), Code::Internal, "{last:?}: {err:?}");
        }
        let err = served(Some(progress(pb::LoadStage::Reading, None))).unwrap_err();
        assert!(err.message().contains("LOAD_STAGE_READING"), "{err:?}");
    }
}
