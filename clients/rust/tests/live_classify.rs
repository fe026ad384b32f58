//! Classify against a live server at MLXGRPC_ADDRESS: its model named "classifier" (the test
//! fixture's tiny random-weight three-label classifier) gives each input its labels highest
//! first with softmax scores that sum to 1, "classifier-multi" sigmoid scores that need
//! not, "reranker" its one label; top_k keeps the head and Truncation::None refuses an
//! input over the model's limit. A server without a model named "classifier" (the default
//! one never has it) skips these: each prints why and passes, even under
//! MLXGRPC_REQUIRE_LIVE=1. Without MLXGRPC_ADDRESS they are skipped like every live test
//! (failed under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use mlx_grpc_client::{Classifications, Code, Truncation, error_details, pb};
use support::{Live, live};

const TEXTS: [&str; 3] = [
    "I loved this film.",
    "The service was slow and the food cold.",
    "Rivers flow into lakes and oceans.",
];

/// The live server and its "classifier" model when it serves one; `None` (the test then
/// passes after saying why, even under MLXGRPC_REQUIRE_LIVE=1) otherwise.
async fn with_classifier() -> Option<(Live, pb::ModelInfo)> {
    let s = live().await?;
    let Some(classifier) = s.models.iter().find(|m| m.name == "classifier").cloned() else {
        support::skipped(format!(
            "{} serves no model named \"classifier\" (the test fixture does; the default \
             server never has one, so this skips even under MLXGRPC_REQUIRE_LIVE=1)",
            s.address
        ));
        return None;
    };
    let capabilities = classifier.capabilities.clone().unwrap_or_default();
    assert!(
        capabilities.classify && !capabilities.embeddings && !capabilities.rerank,
        "model \"classifier\" does not classify: {capabilities:?}"
    );
    Some((s, classifier))
}

/// Each result's score sum, after checking the results are in input order with `labels`
/// labels each, highest first.
fn sums(classified: &Classifications, model: &str, inputs: usize, labels: usize) -> Vec<f32> {
    assert_eq!(classified.model, model);
    let indices: Vec<usize> = classified.results.iter().map(|r| r.index).collect();
    assert_eq!(
        indices,
        (0..inputs).collect::<Vec<_>>(),
        "not in input order"
    );
    classified
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.labels.len(), labels, "{r:?}");
            assert!(r.tokens > 0, "{r:?}");
            let scores: Vec<f32> = r.labels.iter().map(|l| l.score).collect();
            assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
            assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
            scores.iter().sum()
        })
        .collect()
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn classify_scores_every_label() {
    let Some((s, _)) = with_classifier().await else {
        return;
    };
    let request = pb::ClassifyRequest::new(TEXTS).with_model("classifier");
    let single = s
        .client
        .classify(
            request
                .clone()
                .with_request_id("rs-classify")
                .with_priority(10),
        )
        .await
        .expect("Classify");
    for sum in sums(&single, "classifier", TEXTS.len(), 3) {
        assert!((sum - 1.0).abs() < 1e-5, "softmax sums to {sum}");
    }
    let top = s
        .client
        .classify(request.with_top_k(1))
        .await
        .expect("Classify top 1");
    for (t, a) in top.results.iter().zip(&single.results) {
        let (t_top, a_top) = (t.top().expect("a label"), a.top().expect("a label"));
        assert_eq!(t.labels.len(), 1);
        assert_eq!(t_top.label, a_top.label, "{t:?} vs {a:?}");
        // the same forward up to float rounding (another batch)
        assert!((t_top.score - a_top.score).abs() < 1e-5, "{t:?} vs {a:?}");
    }
    if s.models.iter().any(|m| m.name == "classifier-multi") {
        let multi = s
            .client
            .classify(pb::ClassifyRequest::new(TEXTS).with_model("classifier-multi"))
            .await
            .expect("Classify multi-label");
        let sums = sums(&multi, "classifier-multi", TEXTS.len(), 3);
        assert!(sums.iter().any(|s| (s - 1.0).abs() > 1e-3), "{sums:?}");
    }
    if s.models.iter().any(|m| m.name == "reranker") {
        let one = s
            .client
            .classify(pb::ClassifyRequest::new(TEXTS).with_model("reranker"))
            .await
            .expect("Classify on the reranker");
        sums(&one, "reranker", TEXTS.len(), 1);
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn truncation_none_refuses_a_long_input() {
    let Some((s, classifier)) = with_classifier().await else {
        return;
    };
    let inputs = [
        TEXTS[0].to_string(),
        "word ".repeat(2 * classifier.context_length as usize),
    ];
    let long = pb::ClassifyRequest::new(inputs).with_model("classifier");
    let status = s
        .client
        .classify(long.clone().with_truncate(Truncation::None))
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
    let cut = s.client.classify(long).await.expect("Classify, cut");
    sums(&cut, "classifier", 2, 3);
    assert_eq!(cut.results[1].tokens, classifier.context_length, "{cut:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn classify_needs_a_classifying_model_and_valid_fields() {
    let Some((s, _)) = with_classifier().await else {
        return;
    };
    for (request, field) in [
        (pb::ClassifyRequest::new(TEXTS).with_top_k(-1), "top_k"),
        (pb::ClassifyRequest::new(Vec::<String>::new()), "inputs"),
    ] {
        let status = s
            .client
            .classify(request.with_model("classifier"))
            .await
            .expect_err("an invalid field");
        let details = error_details(&status);
        assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
        assert_eq!(details.field_violations[0].field, field, "{status:?}");
    }
    if let Some(embedder) = &s.embedder {
        let status = s
            .client
            .classify(pb::ClassifyRequest::new(TEXTS).with_model(&embedder.name))
            .await
            .expect_err("Classify on an embedding model");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    }
    let status = s
        .client
        .embed(pb::EmbedRequest::new(["text"]).with_model("classifier"))
        .await
        .expect_err("Embed on a classifier");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
}
