//! Shared by the live tests: the server at MLXGRPC_ADDRESS and the models it serves,
//! discovered with ListModels, so any server will do (the default one or the fixture).
#![allow(dead_code)] // each test binary uses a part

use std::time::Duration;

use mlx_grpc_client::{Client, ConnectOptions, Event, pb, text_request};

/// The reason every live test carries: `cargo test` lists them as ignored.
pub const NEEDS_SERVER: &str =
    "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored";

pub struct Live {
    pub client: Client,
    pub address: String,
    pub models: Vec<pb::ModelInfo>,
    /// The default generation model (ListModels lists it first).
    pub generator: pb::ModelInfo,
    pub embedder: Option<pb::ModelInfo>,
}

/// Connects to MLXGRPC_ADDRESS; a live test run without it fails, it never passes unrun.
pub async fn live() -> Live {
    let address = std::env::var("MLXGRPC_ADDRESS")
        .expect("MLXGRPC_ADDRESS is not set: live tests need a running server");
    let options = ConnectOptions::default().with_timeout(Duration::from_secs(120));
    let client = Client::connect(&address, options).await.expect("connect");
    let models = client.list_models().await.expect("ListModels");
    let of_kind = |kind| models.iter().find(|m| m.kind() == kind).cloned();
    let generator =
        of_kind(pb::ModelKind::Generation).expect("the server serves no generation model");
    let embedder = of_kind(pb::ModelKind::Embedding);
    Live {
        client,
        address,
        models,
        generator,
        embedder,
    }
}

/// A text prompt generating exactly `max_tokens` tokens on any model.
pub fn exact(prompt: &str, max_tokens: i32) -> pb::GenerateRequest {
    let mut request = text_request(prompt, max_tokens);
    request.stopping.as_mut().expect("stopping").ignore_eos = true;
    request
}

pub async fn events(client: &Client, req: pb::GenerateRequest) -> Vec<Event> {
    let mut g = client.generate(req);
    let mut events = Vec::new();
    while let Some(e) = g.next_event().await.expect("stream") {
        events.push(e);
    }
    events
}

pub fn token_ids(events: &[Event]) -> Vec<i32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.token_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The first adapter of the default generation model (ListAdapters); a server with
/// none fails the adapter tests (serve it with `--adapter NAME=DIR`).
pub async fn loaded_adapter(s: &Live) -> pb::AdapterInfo {
    let listed = s.client.list_adapters("").await.expect("ListAdapters");
    assert_eq!(listed.model, s.generator.name);
    assert!(listed.max_adapters > 0);
    listed.adapters.into_iter().next().unwrap_or_else(|| {
        panic!(
            "model {} has no adapter loaded (serve it with --adapter NAME=DIR)",
            s.generator.name
        )
    })
}

/// `exact(prompt, max_tokens)` with `adapter` ("" for the base model).
pub fn with_adapter(prompt: &str, max_tokens: i32, adapter: &str) -> pb::GenerateRequest {
    pb::GenerateRequest {
        adapter: adapter.into(),
        ..exact(prompt, max_tokens)
    }
}
