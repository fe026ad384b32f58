//! Predicted outputs against a live server at MLXGRPC_ADDRESS: a prediction of the output
//! keeps it and the usage counts the prediction tokens; one with speculation off is
//! refused. A test binary of its own: the server gives drafts only to steps of few rows, so
//! these tests must not share its batch with the other live tests (cargo runs test
//! binaries one after another). Skipped on a model that does not verify predicted tokens.

mod support;

use mlx_grpc_client::{Code, error_details, pb, speculation, text_request};
use support::{live, skipped};
use tokio::sync::Mutex;

const PASSAGE: &str = "The lighthouse keeper climbed the narrow stairs every evening at dusk, \
    lit the great lamp, and wrote the names of the ships that passed in a worn leather book.";

/// Held by each test: one request at a time, so each step has one row.
static ALONE: Mutex<()> = Mutex::const_new(());

/// Whether the default generation model verifies predicted tokens; says so when it does not.
fn verifies_predictions(s: &support::Live) -> bool {
    let verifies = s
        .generator
        .capabilities
        .as_ref()
        .and_then(|c| c.speculation.as_ref())
        .is_some_and(|c| c.external_tokens);
    if !verifies {
        skipped(format!(
            "{} does not verify predicted tokens",
            s.generator.name
        ));
    }
    verifies
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn a_prediction_never_changes_the_output() {
    let _alone = ALONE.lock().await;
    let Some(s) = live().await else { return };
    if !verifies_predictions(&s) {
        return;
    }
    let prompt = format!("Repeat exactly: {PASSAGE}\n{PASSAGE}\n");
    let plain = s
        .client
        .generate_text(text_request(&prompt, 24)) // greedy
        .await
        .expect("without a prediction");
    assert!(!plain.text.is_empty(), "no output to predict");
    let usage = |r: &mlx_grpc_client::GenerationResult| {
        r.finished.as_ref().and_then(|f| f.usage).expect("usage")
    };
    let u = usage(&plain);
    assert_eq!(
        (u.accepted_prediction_tokens, u.rejected_prediction_tokens),
        (0, 0),
        "{u:?}"
    );
    for prediction in [
        pb::Prediction::text(&plain.text),
        pb::Prediction::tokens(plain.token_ids.clone()),
    ] {
        let req = text_request(&prompt, 24).with_prediction(prediction.clone());
        let predicted = s
            .client
            .generate_text(req)
            .await
            .expect("with a prediction");
        assert_eq!(
            (&predicted.token_ids, &predicted.text),
            (&plain.token_ids, &plain.text),
            "{prediction:?}"
        );
        let u = usage(&predicted);
        assert!(u.accepted_prediction_tokens > 0, "{prediction:?}: {u:?}");
        assert!(
            u.accepted_prediction_tokens + u.rejected_prediction_tokens <= u.draft_tokens,
            "{prediction:?}: {u:?}"
        );
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn a_prediction_with_speculation_off_is_refused() {
    let _alone = ALONE.lock().await;
    let Some(s) = live().await else { return };
    if !verifies_predictions(&s) {
        return;
    }
    let mut req = text_request(format!("Repeat exactly: {PASSAGE}\n"), 4).with_prediction(PASSAGE);
    req.speculation = Some(speculation(pb::SpeculationMode::Off, 0));
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("a prediction with speculation off accepted");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let fields: Vec<String> = error_details(&status)
        .field_violations
        .iter()
        .map(|v| v.field.clone())
        .collect();
    assert_eq!(fields, ["prediction"], "{status:?}");
}
