//! Adapter calls: load, unload and list the LoRA/DoRA adapters of a model, each
//! retried like the other unary calls. Generate picks a loaded adapter by name
//! with `GenerateRequest::adapter`.

use tonic::Status;

use crate::{Client, pb};

impl Client {
    /// Loads the adapter directory `path` (on the server, as `mlx_lm.lora` writes
    /// it) as `name` for `model` (empty: the default generation model). The
    /// response carries its info and the adapters evicted to make room.
    pub async fn load_adapter(
        &self,
        model: &str,
        name: &str,
        path: &str,
    ) -> Result<pb::LoadAdapterResponse, Status> {
        let req = pb::LoadAdapterRequest {
            model: model.to_string(),
            name: name.to_string(),
            path: path.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.load_adapter(r).await })
            .await?;
        Ok(r.into_inner())
    }

    /// Unloads an adapter; returns once the requests already using it have finished.
    pub async fn unload_adapter(&self, model: &str, name: &str) -> Result<pb::AdapterInfo, Status> {
        let req = pb::UnloadAdapterRequest {
            model: model.to_string(),
            name: name.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.unload_adapter(r).await })
            .await?;
        r.into_inner()
            .adapter
            .ok_or_else(|| Status::internal("UnloadAdapter returned no adapter"))
    }

    /// The adapters loaded on `model` (empty: the default generation model).
    pub async fn list_adapters(&self, model: &str) -> Result<pb::ListAdaptersResponse, Status> {
        let req = pb::ListAdaptersRequest {
            model: model.to_string(),
        };
        let r = self
            .unary(req, |mut raw, r| async move { raw.list_adapters(r).await })
            .await?;
        Ok(r.into_inner())
    }
}
