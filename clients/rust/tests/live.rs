//! Tests against a live server at MLXGRPC_ADDRESS (any server: the models come from
//! ListModels). `cargo test` lists them as ignored; run them with
//! `MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored`. Run without the
//! address they fail: a live test never passes without having run.

mod support;

use std::time::Duration;

use mlx_grpc_client::{Code, ConnectOptions, Event, StreamExt, error_details, pb};
use pb::FinishReason;
use pb::generate_request::Prompt;
use support::{events, exact, live, token_ids};

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (norm(a) * norm(b))
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn greedy_generate_is_deterministic() {
    let s = live().await;
    let first = events(&s.client, exact("The quick brown fox", 8)).await;
    let second = events(&s.client, exact("The quick brown fox", 8)).await;
    for events in [&first, &second] {
        match events.first() {
            Some(Event::Started(started)) => {
                assert!(started.prompt_tokens > 0 && !started.request_id.is_empty());
                assert_eq!(started.model, s.generator.name);
            }
            other => panic!("first event is not started: {other:?}"),
        }
        match events.last() {
            Some(Event::Finished(f)) => {
                assert_eq!(f.reason(), FinishReason::Length);
                assert_eq!(f.usage.as_ref().map(|u| u.completion_tokens), Some(8));
            }
            other => panic!("last event is not finished: {other:?}"),
        }
        let middle = &events[1..events.len() - 1];
        assert!(
            middle.iter().all(|e| matches!(e, Event::Delta(_))),
            "{events:?}"
        );
        let ids = token_ids(events);
        assert_eq!(ids.len(), 8);
        assert!(
            ids.iter()
                .all(|&t| (0..s.generator.vocab_size).contains(&t)),
            "{ids:?}"
        );
    }
    assert_eq!(token_ids(&first), token_ids(&second));
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn token_prompt_streams_like_the_text_prompt() {
    let s = live().await;
    let tokens = s
        .client
        .raw()
        .tokenize(pb::TokenizeRequest {
            text: "Hello world".into(),
            add_special_tokens: true,
            ..Default::default()
        })
        .await
        .expect("tokenize")
        .into_inner()
        .token_ids;
    let by_text = s
        .client
        .generate_text(exact("Hello world", 6))
        .await
        .expect("generate_text");
    assert_eq!(by_text.token_ids.len(), 6);
    let mut req = exact("", 6);
    req.prompt = Some(Prompt::Tokens(pb::TokenIds {
        ids: tokens.clone(),
    }));
    // The Stream impl.
    let events: Vec<Event> = s
        .client
        .generate(req)
        .map(|e| e.expect("event"))
        .collect()
        .await;
    match events.first() {
        Some(Event::Started(started)) => assert_eq!(started.prompt_tokens as usize, tokens.len()),
        other => panic!("first event is not started: {other:?}"),
    }
    assert_eq!(token_ids(&events), by_text.token_ids);
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn collect_is_the_unary_form() {
    let s = live().await;
    let generation = s.client.generate(exact("The quick brown fox", 5));
    let id = generation.request_id().to_string();
    let r = generation.collect().await.expect("collect");
    assert_eq!(r.request_id, id);
    assert_eq!(
        r.started.as_ref().map(|st| st.request_id.as_str()),
        Some(id.as_str())
    );
    assert_eq!(r.token_ids.len(), 5);
    let f = r.finished.expect("finished");
    assert_eq!(
        (f.reason(), f.usage.map(|u| u.completion_tokens)),
        (FinishReason::Length, Some(5))
    );
    let detok = s
        .client
        .raw()
        .detokenize(pb::DetokenizeRequest {
            token_ids: r.token_ids,
            ..Default::default()
        })
        .await
        .expect("detokenize");
    assert_eq!(detok.into_inner().text, r.text);
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn chat_prompt_uses_template() {
    let s = live().await;
    assert!(
        s.generator.has_chat_template,
        "{} has no chat template",
        s.generator.name
    );
    let mut req = exact("", 4);
    let message = pb::ChatMessage {
        role: "user".into(),
        content: "Hi".into(),
    };
    req.prompt = Some(Prompt::Chat(pb::ChatMessages {
        messages: vec![message],
    }));
    let chat = s.client.generate_text(req).await.expect("chat");
    let plain = s.client.generate_text(exact("Hi", 1)).await.expect("plain");
    let tokens =
        |r: &mlx_grpc_client::GenerationResult| r.started.as_ref().map_or(0, |st| st.prompt_tokens);
    assert!(
        tokens(&chat) > tokens(&plain),
        "the template added no tokens"
    );
    assert_eq!(chat.token_ids.len(), 4);
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn tokenize_detokenize_round_trip() {
    let s = live().await;
    let mut raw = s.client.raw();
    let text = "Hello, world! The quick brown fox.";
    let tok = raw
        .tokenize(pb::TokenizeRequest {
            text: text.into(),
            ..Default::default()
        })
        .await
        .expect("tokenize")
        .into_inner();
    assert!(!tok.token_ids.is_empty());
    assert_eq!(tok.token_ids.len(), tok.tokens.len());
    let detok = raw
        .detokenize(pb::DetokenizeRequest {
            token_ids: tok.token_ids,
            ..Default::default()
        })
        .await
        .expect("detokenize")
        .into_inner();
    assert_eq!(detok.text, text);
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn embeddings_are_normalized_and_semantic() {
    let s = live().await;
    let embedder = s
        .embedder
        .as_ref()
        .expect("the server serves no embedding model");
    let inputs = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market crashed today.",
    ];
    let resp = s
        .client
        .embed(pb::EmbedRequest {
            model: embedder.name.clone(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("embed");
    assert_eq!(resp.len(), 3);
    for (i, r) in resp.iter().enumerate() {
        assert_eq!(r.index as usize, i);
        assert_eq!(r.embedding.len(), embedder.embedding_dimensions as usize);
        assert!(r.tokens > 0);
        assert!(
            (norm(&r.embedding) - 1.0).abs() < 1e-3,
            "norm {}",
            norm(&r.embedding)
        );
    }
    let similar = cosine(&resp[0].embedding, &resp[1].embedding);
    let unrelated = cosine(&resp[0].embedding, &resp[2].embedding);
    assert!(
        similar > unrelated + 0.2,
        "similar {similar}, unrelated {unrelated}"
    );
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn invalid_temperature_has_bad_request_details() {
    let s = live().await;
    let mut req = exact("hi", 4);
    req.sampling = Some(pb::SamplingParams {
        temperature: Some(-1.0),
        ..Default::default()
    });
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("invalid temperature accepted");
    let details = error_details(&status);
    assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["sampling.temperature"]);
    let info = details.error_info.expect("ErrorInfo");
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        ("mlxgrpc.v1", "INVALID_FIELD")
    );
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("sampling.temperature")
    );
    assert_eq!(details.retry_delay, None);
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn unknown_model_is_not_found() {
    let s = live().await;
    let mut req = exact("hi", 4);
    req.model = "no-such-model".into();
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("unknown model accepted");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let status = s
        .client
        .model_info("no-such-model")
        .await
        .expect_err("model_info");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn another_task_cancels_by_the_client_side_id() {
    let s = live().await;
    let generation = s.client.generate(exact("Tell me a long story", 2000));
    let id = generation.request_id().to_string();
    // The id is known before anything is sent: another task cancels as soon as the
    // server has the request.
    let canceller = s.client.clone();
    let cancel_id = id.clone();
    let cancelled = tokio::spawn(async move {
        for _ in 0..200 {
            if canceller.cancel(cancel_id.clone()).await.expect("cancel") {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    });
    let r = generation.collect().await.expect("collect");
    assert!(cancelled.await.expect("task"), "Cancel never found {id}");
    let f = r.finished.expect("finished event");
    assert_eq!(f.reason(), FinishReason::Cancelled);
    assert_eq!(
        f.usage.map_or(-1, |u| u.completion_tokens) as usize,
        r.token_ids.len()
    );
    assert!(r.token_ids.len() < 2000);
    assert!(
        !s.client.cancel(id).await.expect("cancel"),
        "cancelling again finds nothing"
    );
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn dropping_the_stream_cancels_on_the_server() {
    let s = live().await;
    let mut g = s.client.generate(exact("Tell me a long story", 2000));
    let id = g.request_id().to_string();
    assert!(matches!(
        g.next_event().await.expect("event"),
        Some(Event::Started(_))
    ));
    assert!(matches!(
        g.next_event().await.expect("event"),
        Some(Event::Delta(_))
    ));
    drop(g);
    // The server notices the cancelled call and forgets the request. (Cancel is the
    // only probe, and it would itself stop the request, so check once, well before
    // 2000 tokens could have been generated.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !s.client.cancel(id.clone()).await.expect("cancel"),
        "request {id} still running 2 s after its stream was dropped"
    );
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn deadline_ends_a_long_stream() {
    let s = live().await;
    let mut req = tonic::Request::new(exact("Tell me a long story", 2000));
    req.set_timeout(Duration::from_millis(1500));
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("finished before the deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn model_info_list_models_and_plan() {
    let s = live().await;
    let info = s.client.model_info("").await.expect("model_info");
    assert_eq!(
        info.name, s.models[0].name,
        "the default generation model is listed first"
    );
    assert_eq!(info.kind(), pb::ModelKind::Generation);
    assert!(info.vocab_size > 0 && info.context_length > 0);
    assert!(info.capabilities.as_ref().expect("capabilities").generation);
    if let Some(e) = &s.embedder {
        assert!(
            e.embedding_dimensions > 0 && e.capabilities.as_ref().is_some_and(|c| c.embeddings)
        );
    }
    let plan = s
        .client
        .plan_memory(&info.name, 1024)
        .await
        .expect("plan_memory");
    assert!(
        plan.max_safe_context > 0 && plan.max_safe_context <= i64::from(info.context_length),
        "{plan:?}"
    );
}

#[tokio::test]
#[ignore = "needs a live server: MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored"]
async fn bearer_token_is_accepted() {
    // The test servers do not check tokens; the call must still go through with one.
    let s = live().await;
    let options = ConnectOptions::default().with_bearer_token("test-token");
    let c = mlx_grpc_client::Client::connect(&s.address, options)
        .await
        .expect("connect");
    assert_eq!(
        c.model_info("").await.expect("model_info").name,
        s.generator.name
    );
}
