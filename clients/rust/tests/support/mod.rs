//! Shared by the live tests: the server at MLXGRPC_ADDRESS and the models it serves,
//! discovered with ListModels, so any server will do (the default one or the fixture).
//! Every live test is `#[ignore]`d, so a plain `cargo test` reports it ignored; with a
//! server, `MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored` runs them (without
//! the address they then fail). A live test that cannot run on the server it was given (no
//! embedding model, no adapter) prints "skipped: <why>" and passes; under
//! MLXGRPC_REQUIRE_LIVE=1 (CI) it fails instead, and so does a run that leaves the live
//! tests ignored (`live_tests_run_when_required`, in every live test binary).
//! Every live client sends MLXGRPC_TOKEN when it is set (a server with a tokens file; the
//! adapter tests need the admin role); MLXGRPC_TENANT names that token's tenant.
#![allow(dead_code)] // each test binary uses a part

use std::fmt::Display;
use std::io::Write;
use std::time::Duration;

use mlx_grpc_client::{Client, ConnectOptions, Event, pb, text_request};

pub struct Live {
    pub client: Client,
    pub address: String,
    pub models: Vec<pb::ModelInfo>,
    /// The default generation model (ListModels lists it first).
    pub generator: pb::ModelInfo,
    /// The first model that embeds (the default Embed model; never a reranker).
    pub embedder: Option<pb::ModelInfo>,
}

/// Prints "skipped: <test>: <why>" straight to stderr, past the test harness's capture,
/// so a plain `cargo test` shows it (the harness names each test's thread after it).
pub fn skipped(reason: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("live test");
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {reason}");
}

fn require_live() -> bool {
    std::env::var("MLXGRPC_REQUIRE_LIVE").is_ok_and(|v| v == "1")
}

/// A live test that cannot run: `None` (the test returns and passes) after saying why,
/// or a panic with the reason under MLXGRPC_REQUIRE_LIVE=1.
pub fn unavailable<T>(reason: impl Display) -> Option<T> {
    if require_live() {
        panic!("{reason} (MLXGRPC_REQUIRE_LIVE=1)");
    }
    skipped(reason);
    None
}

/// Under MLXGRPC_REQUIRE_LIVE=1 the live tests must run, not be reported ignored.
#[test]
fn live_tests_run_when_required() {
    let included = std::env::args().any(|a| a == "--include-ignored" || a == "--ignored");
    assert!(
        included || !require_live(),
        "MLXGRPC_REQUIRE_LIVE=1, yet the live tests are ignored: run cargo test -- --include-ignored"
    );
}

/// The live server's bearer token, MLXGRPC_TOKEN (None: unset or empty, a server without tokens).
pub fn token() -> Option<String> {
    std::env::var("MLXGRPC_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
}

/// The tenant this caller's requests count under: its token's, MLXGRPC_TENANT (without
/// tokens: the empty name).
pub fn tenant() -> String {
    std::env::var("MLXGRPC_TENANT").unwrap_or_default()
}

/// Options of a client of the live server: its token, if any.
pub fn options() -> ConnectOptions {
    ConnectOptions {
        bearer_token: token(),
        ..ConnectOptions::default()
    }
}

/// Connects to MLXGRPC_ADDRESS; without it the test fails (it runs only when the ignored
/// live tests were asked for). A server that is named but not reachable fails the test.
pub async fn live() -> Option<Live> {
    let address = match std::env::var("MLXGRPC_ADDRESS") {
        Ok(address) if !address.is_empty() => address,
        _ => panic!(
            "MLXGRPC_ADDRESS is not set: the live tests need a server (MLXGRPC_ADDRESS=host:port)"
        ),
    };
    let options = options().with_timeout(Duration::from_secs(120));
    let client = Client::connect(&address, options).await.expect("connect");
    let models = client.list_models().await.expect("ListModels");
    let of_kind = |kind| models.iter().find(|m| m.kind() == kind).cloned();
    let generator = of_kind(pb::ModelKind::Generation)
        .or_else(|| unavailable("the server serves no generation model"))?;
    // The first model that embeds: a reranker (also of the embedding kind) does not.
    let embedder = models
        .iter()
        .find(|m| {
            m.kind() == pb::ModelKind::Embedding
                && m.capabilities.as_ref().is_some_and(|c| c.embeddings)
        })
        .cloned();
    Some(Live {
        client,
        address,
        models,
        generator,
        embedder,
    })
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

/// The first adapter of the default generation model (ListAdapters), or `unavailable`
/// when it has none (serve it with `--adapter NAME=DIR`).
pub async fn loaded_adapter(s: &Live) -> Option<pb::AdapterInfo> {
    let listed = s.client.list_adapters("").await.expect("ListAdapters");
    assert_eq!(listed.model, s.generator.name);
    assert!(listed.max_adapters > 0);
    listed.adapters.into_iter().next().or_else(|| {
        unavailable(format!(
            "model {} has no adapter loaded (serve it with --adapter NAME=DIR)",
            s.generator.name
        ))
    })
}

/// `exact(prompt, max_tokens)` with `adapter` ("" for the base model).
pub fn with_adapter(prompt: &str, max_tokens: i32, adapter: &str) -> pb::GenerateRequest {
    pb::GenerateRequest {
        adapter: adapter.into(),
        ..exact(prompt, max_tokens)
    }
}
