//! Models at run time against a live server at MLXGRPC_ADDRESS started with `--model-root`
//! over the test fixture's models (CI's fixture server): LoadModel loads the fixture's
//! "llama" directory again as "rs-llama", reporting its steps in order up to SERVING;
//! Generate uses it, ListModels' statuses show it READY; UnloadModel frees it, after
//! which it is no longer READY and Generate on it is NOT_FOUND; a source leading out of
//! the root is INVALID_ARGUMENT. The calls need the admin role (MLXGRPC_TOKEN an admin's
//! token on a server with a tokens file). A server without a model named "llama" (the
//! default one never has it) skips this: it prints why and passes, even under
//! MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS it is skipped like every live test
//! (failed under MLXGRPC_REQUIRE_LIVE=1). A binary of its own: no other test sees the
//! model come and go.

mod support;

use mlx_grpc_client::{Code, pb};
use support::{Live, exact, live};

/// The name this client's test loads the fixture under (each language has its own).
const NAME: &str = "rs-llama";

/// The live server when it serves the fixture's "llama" (and so, in CI, has the
/// fixture's models under its `--model-root`); `None` (the test then passes after saying
/// why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_fixture() -> Option<Live> {
    let s = live().await?;
    if !s.models.iter().any(|m| m.name == "llama") {
        support::skipped(format!(
            "{} serves no model named \"llama\" (the test fixture server, started with \
             --model-root over the fixture's models, does; the default server never has \
             one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    }
    Some(s)
}

async fn status_of(s: &Live, name: &str) -> Option<pb::ModelStatus> {
    let statuses = s.client.model_statuses().await.expect("ListModels");
    statuses.into_iter().find(|m| m.name == name)
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn load_use_and_unload_a_model() {
    let Some(s) = with_fixture().await else {
        return;
    };
    let c = &s.client;
    // Left loaded by an earlier run that failed half-way: unload it first.
    if status_of(&s, NAME).await.is_some() {
        let _ = c.unload_model(NAME, true).await;
    }

    let mut stages = Vec::new();
    let info = c
        .load_model(pb::LoadModelRequest::new(NAME, "llama"), |p| {
            stages.push(p.stage())
        })
        .await
        .expect("LoadModel");
    assert_eq!(info.name, NAME);
    assert_eq!(info.kind(), pb::ModelKind::Generation);
    assert_eq!(stages.last(), Some(&pb::LoadStage::Serving), "{stages:?}");
    assert!(
        stages
            .iter()
            .all(|&stage| stage != pb::LoadStage::Unspecified)
            && stages.windows(2).all(|w| w[0] as i32 <= w[1] as i32),
        "the stages in order: {stages:?}"
    );

    let generated = c
        .generate_text(pb::GenerateRequest {
            model: NAME.into(),
            ..exact("The quick brown fox", 4)
        })
        .await
        .expect("Generate on the loaded model");
    assert_eq!(generated.token_ids.len(), 4, "{generated:?}");

    let status = status_of(&s, NAME).await.expect("listed in the statuses");
    assert_eq!(status.state(), pb::ModelState::Ready, "{status:?}");
    assert_eq!(status.kind(), pb::ModelKind::Generation, "{status:?}");
    assert!(
        c.list_models()
            .await
            .expect("ListModels")
            .iter()
            .any(|m| m.name == NAME),
        "a ready model is listed"
    );

    let unloaded = c.unload_model(NAME, false).await.expect("UnloadModel");
    assert_eq!(unloaded.name, NAME);
    assert!(unloaded.freed_bytes > 0, "{unloaded:?}");
    if let Some(status) = status_of(&s, NAME).await {
        assert_ne!(status.state(), pb::ModelState::Ready, "{status:?}");
    }
    let err = c
        .generate_text(pb::GenerateRequest {
            model: NAME.into(),
            ..exact("The quick brown fox", 4)
        })
        .await
        .expect_err("Generate on an unloaded model");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    let err = c
        .load_model(pb::LoadModelRequest::new("rs-escape", "../escape"), |_| {})
        .await
        .expect_err("a source outside the model root");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(status_of(&s, "rs-escape").await.is_none());
}
