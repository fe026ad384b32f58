//! Rerank against a live server at MLXGRPC_ADDRESS: its model named "reranker" (the test
//! fixture's tiny random-weight cross-encoder) ranks documents by descending score, top_n
//! keeps the head of the ranking, and Truncation::None refuses a document over the
//! model's input limit. A server without a model named "reranker" (the default one never
//! has it) skips these: each prints why and passes, even under MLXGRPC_REQUIRE_LIVE=1.
//! Without MLXGRPC_ADDRESS they are skipped like every live test (failed under
//! MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Code, Ranking, Truncation, error_details, pb};
use support::{Live, live};

const QUERY: &str = "What is the capital of France?";
const DOCUMENTS: [&str; 5] = [
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "Berlin is the capital of Germany.",
    "France is a country in Western Europe; its capital is Paris.",
    "Bread is made from flour, water, salt and yeast.",
];

/// The live server and its "reranker" model when it serves one; `None` (the test then
/// passes after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_reranker() -> Option<(Live, pb::ModelInfo)> {
    let s = live().await?;
    let Some(reranker) = s.models.iter().find(|m| m.name == "reranker").cloned() else {
        support::skipped(format!(
            "{} serves no model named \"reranker\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    };
    let capabilities = reranker.capabilities.clone().unwrap_or_default();
    assert!(
        capabilities.rerank && !capabilities.embeddings,
        "model \"reranker\" does not rerank: {capabilities:?}"
    );
    assert!(reranker.context_length > 0, "{reranker:?}");
    Some((s, reranker))
}

fn request() -> pb::RerankRequest {
    pb::RerankRequest::new(QUERY, DOCUMENTS).with_model("reranker")
}

/// A text of about `words` tokens on any tokenizer, under the server's byte limit of an
/// input (32 bytes a token of the model's context).
fn long_text(words: i32) -> String {
    "word ".repeat(words as usize)
}

fn assert_ranked(ranking: &Ranking) {
    let scores: Vec<f32> = ranking.results.iter().map(|r| r.score).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "scores not descending: {scores:?}"
    );
    assert!(scores.iter().all(|s| s.is_finite()), "{scores:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn rerank_ranks_every_document() {
    let Some((s, reranker)) = with_reranker().await else {
        return;
    };
    let ranking = s
        .client
        .rerank(request().with_request_id("rs-rerank-all").with_priority(10))
        .await
        .expect("Rerank");
    assert_eq!(ranking.model, "reranker");
    assert_eq!(ranking.results.len(), DOCUMENTS.len());
    assert_ranked(&ranking);
    let mut indices = ranking.indices();
    indices.sort_unstable();
    assert_eq!(
        indices,
        (0..DOCUMENTS.len()).collect::<Vec<_>>(),
        "not a permutation"
    );
    for r in &ranking.results {
        assert!(r.tokens > 0 && r.tokens <= reranker.context_length, "{r:?}");
        let p = r.probability();
        assert!((0.0..=1.0).contains(&p), "{r:?}: {p}");
    }

    // Without a model the server picks its first reranker.
    let default = s
        .client
        .rerank(pb::RerankRequest::new(QUERY, DOCUMENTS))
        .await
        .expect("Rerank with the default model");
    let model = s.models.iter().find(|m| m.name == default.model);
    assert!(
        model.is_some_and(|m| m.capabilities.as_ref().is_some_and(|c| c.rerank)),
        "default reranker {:?}",
        default.model
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn top_n_returns_the_head_of_the_ranking() {
    let Some((s, _)) = with_reranker().await else {
        return;
    };
    let all = s.client.rerank(request()).await.expect("Rerank");
    let top = s
        .client
        .rerank(request().with_top_n(2))
        .await
        .expect("Rerank top 2");
    assert_eq!(top.model, "reranker");
    assert_eq!(
        top.indices(),
        all.indices()[..2],
        "top {top:?}, all {all:?}"
    );
    for (t, a) in top.results.iter().zip(&all.results) {
        assert!(
            (t.score - a.score).abs() <= 1e-4 * a.score.abs().max(1.0),
            "{t:?} vs {a:?}"
        );
        assert_eq!(t.tokens, a.tokens);
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn truncation_none_refuses_a_long_document() {
    let Some((s, reranker)) = with_reranker().await else {
        return;
    };
    let documents = [
        "Paris is in France.".to_string(),
        long_text(reranker.context_length * 2),
    ];
    let long = pb::RerankRequest::new(QUERY, documents.clone()).with_model("reranker");

    let status = s
        .client
        .rerank(long.clone().with_truncate(Truncation::None))
        .await
        .expect_err("a document over the limit under Truncation::None");
    let details = error_details(&status);
    assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["documents[1]"], "{status:?}");

    // Cut (the default, and Truncation::End): scored within the limit.
    for ranking in [
        s.client.rerank(long.clone()).await.expect("Rerank, cut"),
        s.client
            .rerank(long.with_truncate(Truncation::End))
            .await
            .expect("Rerank, Truncation::End"),
    ] {
        assert_eq!(ranking.results.len(), 2);
        assert_ranked(&ranking);
        let cut = ranking
            .results
            .iter()
            .find(|r| r.index == 1)
            .expect("doc 1");
        assert_eq!(cut.tokens, reranker.context_length, "{ranking:?}");
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn rerank_and_embed_need_the_right_kind_of_model() {
    let Some((s, _)) = with_reranker().await else {
        return;
    };
    if let Some(embedder) = &s.embedder {
        let status = s
            .client
            .rerank(pb::RerankRequest::new(QUERY, DOCUMENTS).with_model(&embedder.name))
            .await
            .expect_err("Rerank on an embedding model");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    }
    let status = s
        .client
        .embed(pb::EmbedRequest::new(["text"]).with_model("reranker"))
        .await
        .expect_err("Embed on a reranker");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
}
