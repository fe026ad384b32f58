//! EmbedSparse against a live server at MLXGRPC_ADDRESS: its model named "splade" (the test
//! fixture's tiny random-weight SPLADE model) gives each input a vector with ids ascending
//! and weights above 0, in input order; top_k keeps the heaviest and Truncation::None refuses
//! an input over the model's limit. A server without a model named "splade" (the default one
//! never has it) skips these: each prints why and passes, even under MLXGRPC_REQUIRE_LIVE=1.
//! Without MLXGRPC_ADDRESS they are skipped like every live test (failed under
//! MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, SparseEmbeddings, Truncation, error_details, pb};
use support::{Live, live};

const TEXTS: [&str; 3] = [
    "Where do rivers flow?",
    "Rivers flow into lakes and oceans.",
    "def add(a, b): return a + b",
];

/// The live server and its "splade" model when it serves one; `None` (the test then passes
/// after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_splade() -> Option<(Live, pb::ModelInfo)> {
    let s = live().await?;
    let Some(splade) = s.models.iter().find(|m| m.name == "splade").cloned() else {
        support::skipped(format!(
            "{} serves no model named \"splade\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    };
    let capabilities = splade.capabilities.clone().unwrap_or_default();
    assert!(
        capabilities.sparse_embeddings
            && !capabilities.embeddings
            && splade.embedding_dimensions == 0,
        "model \"splade\" is not a SPLADE model: {capabilities:?}"
    );
    Some((s, splade))
}

/// Checks the vectors are in input order, each with ids ascending below `vocab` and weights
/// above 0.
fn check(embedded: &SparseEmbeddings, inputs: usize, vocab: i32) {
    assert_eq!(embedded.model, "splade");
    let indices: Vec<usize> = embedded.vectors.iter().map(|v| v.index).collect();
    assert_eq!(
        indices,
        (0..inputs).collect::<Vec<_>>(),
        "not in input order"
    );
    for v in &embedded.vectors {
        assert!(v.tokens > 0 && !v.token_ids.is_empty(), "{v:?}");
        assert_eq!(v.token_ids.len(), v.weights.len(), "{v:?}");
        assert!(v.token_ids.windows(2).all(|w| w[0] < w[1]), "{v:?}");
        assert!(
            v.token_ids.iter().all(|&id| (id as i64) < vocab as i64),
            "{v:?}"
        );
        assert!(v.weights.iter().all(|&w| w > 0.0), "{v:?}");
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn embed_sparse_gives_vectors_in_input_order_and_top_k_the_heaviest() {
    let Some((s, splade)) = with_splade().await else {
        return;
    };
    let request = pb::EmbedSparseRequest::new(TEXTS).with_model("splade");
    let every = s
        .client
        .embed_sparse(
            request
                .clone()
                .with_request_id("rs-sparse")
                .with_priority(10),
        )
        .await
        .expect("EmbedSparse");
    check(&every, TEXTS.len(), splade.vocab_size);
    let top = s
        .client
        .embed_sparse(request.with_top_k(3))
        .await
        .expect("EmbedSparse top 3");
    check(&top, TEXTS.len(), splade.vocab_size);
    for (t, a) in top.vectors.iter().zip(&every.vectors) {
        let mut heaviest: Vec<(f32, u32)> = a
            .weights
            .iter()
            .copied()
            .zip(a.token_ids.iter().copied())
            .collect();
        heaviest.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        let mut want: Vec<u32> = heaviest.iter().take(3).map(|&(_, id)| id).collect();
        want.sort();
        assert_eq!(t.token_ids, want, "{t:?} vs {a:?}");
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn truncation_none_refuses_a_long_input() {
    let Some((s, splade)) = with_splade().await else {
        return;
    };
    let inputs = [
        TEXTS[0].to_string(),
        "word ".repeat(2 * splade.context_length as usize),
    ];
    let long = pb::EmbedSparseRequest::new(inputs).with_model("splade");
    let status = s
        .client
        .embed_sparse(long.clone().with_truncate(Truncation::None))
        .await
        .expect_err("an input over the limit under Truncation::None");
    let details = error_details(&status);
    assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["inputs[1]"], "{status:?}");
    let cut = s.client.embed_sparse(long).await.expect("EmbedSparse, cut");
    check(&cut, 2, splade.vocab_size);
    assert_eq!(cut.vectors[1].tokens, splade.context_length, "{cut:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn embed_sparse_needs_a_splade_model_and_valid_fields() {
    let Some((s, _)) = with_splade().await else {
        return;
    };
    for (request, field) in [
        (pb::EmbedSparseRequest::new(TEXTS).with_top_k(-1), "top_k"),
        (pb::EmbedSparseRequest::new(Vec::<String>::new()), "inputs"),
    ] {
        let status = s
            .client
            .embed_sparse(request.with_model("splade"))
            .await
            .expect_err("an invalid field");
        let details = error_details(&status);
        assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
        assert_eq!(details.field_violations[0].field, field, "{status:?}");
    }
    if let Some(embedder) = &s.embedder {
        let status = s
            .client
            .embed_sparse(pb::EmbedSparseRequest::new(TEXTS).with_model(&embedder.name))
            .await
            .expect_err("EmbedSparse on an embedding model");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    }
    let status = s
        .client
        .embed(pb::EmbedRequest::new(["text"]).with_model("splade"))
        .await
        .expect_err("Embed on a SPLADE model");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
}
