//! Priority against a live server at MLXGRPC_ADDRESS: it never changes the output, and
//! GetLoad reports this caller's tenant. Skipped without the address (failed under
//! MLXGRPC_REQUIRE_LIVE=1).

mod support;

use support::{exact, live, tenant};

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn priority_never_changes_the_output() {
    let Some(s) = live().await else { return };
    let plain = s
        .client
        .generate_text(exact("The quick brown fox", 8))
        .await
        .expect("priority 0");
    for priority in [10, -10] {
        let mut req = exact("The quick brown fox", 8); // greedy
        req.priority = priority;
        let r = s.client.generate_text(req).await.expect("Generate");
        assert_eq!(
            (&r.token_ids, &r.text),
            (&plain.token_ids, &plain.text),
            "priority {priority}"
        );
    }
    let loads = s
        .client
        .model_loads(&s.generator.name)
        .await
        .expect("GetLoad");
    // This caller counts under its token's tenant (without tokens: the empty name), and sees it.
    let tenant = tenant();
    let mine: Vec<_> = loads[0]
        .tenants
        .iter()
        .filter(|t| t.tenant == tenant)
        .collect();
    assert_eq!(mine.len(), 1, "{:?}", loads[0].tenants);
    assert!(mine[0].generated_tokens >= 24, "{:?}", mine[0]);
}
