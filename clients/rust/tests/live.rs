//! Tests against a live server at $MLXGRPC_ADDRESS serving the "llama" fixture
//! (vocab 640, never emits EOS) and "all-minilm-l6-v2" (384-dim embeddings).
//! Without MLXGRPC_ADDRESS every test returns early (reported as skipped on stderr).

use std::time::Duration;

use mlx_grpc_client::{Client, Code, ConnectOptions, Event, StreamExt, error_details, pb};
use pb::FinishReason;
use pb::generate_request::Prompt;

async fn client() -> Option<Client> {
    let Ok(address) = std::env::var("MLXGRPC_ADDRESS") else {
        eprintln!("MLXGRPC_ADDRESS is unset: skipping live test");
        return None;
    };
    let options = ConnectOptions::default().with_timeout(Duration::from_secs(120));
    Some(Client::connect(&address, options).await.expect("connect"))
}

fn text_request(prompt: &str, max_tokens: i32) -> pb::GenerateRequest {
    pb::GenerateRequest {
        prompt: Some(Prompt::Text(prompt.to_string())),
        stopping: Some(pb::StoppingCriteria {
            max_tokens: Some(max_tokens),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn collect(client: &mut Client, req: pb::GenerateRequest) -> Vec<Event> {
    let mut g = client.generate(req).await.expect("generate");
    let mut events = Vec::new();
    while let Some(e) = g.next_event().await.expect("stream") {
        events.push(e);
    }
    events
}

fn token_ids(events: &[Event]) -> Vec<i32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Delta(d) => Some(d.token_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The status of a call that fails, whether at the call or on the first message.
async fn generate_error(client: &mut Client, req: pb::GenerateRequest) -> tonic::Status {
    match client.generate(req).await {
        Err(status) => status,
        Ok(mut g) => loop {
            match g.next_event().await {
                Err(status) => break status,
                Ok(None) => panic!("stream ended without an error"),
                Ok(Some(_)) => continue,
            }
        },
    }
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (norm(a) * norm(b))
}

#[tokio::test]
async fn greedy_generate_is_deterministic() {
    let Some(mut c) = client().await else { return };
    let first = collect(&mut c, text_request("The quick brown fox", 8)).await;
    let second = collect(&mut c, text_request("The quick brown fox", 8)).await;

    for events in [&first, &second] {
        match events.first() {
            Some(Event::Started(s)) => {
                assert!(s.prompt_tokens > 0, "prompt_tokens {}", s.prompt_tokens);
                assert!(!s.request_id.is_empty());
                assert_eq!(s.model, "llama");
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
        let started = events
            .iter()
            .filter(|e| matches!(e, Event::Started(_)))
            .count();
        let finished = events
            .iter()
            .filter(|e| matches!(e, Event::Finished(_)))
            .count();
        assert_eq!((started, finished), (1, 1));
        let ids = token_ids(events);
        assert_eq!(ids.len(), 8);
        assert!(
            ids.iter().all(|&t| (0..640).contains(&t)),
            "ids out of vocab: {ids:?}"
        );
    }
    assert_eq!(token_ids(&first), token_ids(&second));
}

#[tokio::test]
async fn generate_as_stream_matches_token_prompt() {
    let Some(mut c) = client().await else { return };
    // The same prompt given as text and as its token ids generates the same tokens.
    let tokens = c
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
    let by_text = token_ids(&collect(&mut c, text_request("Hello world", 6)).await);

    let mut req = text_request("", 6);
    req.prompt = Some(Prompt::Tokens(pb::TokenIds {
        ids: tokens.clone(),
    }));
    // Exercise the Stream impl.
    let events: Vec<Event> = c
        .generate(req)
        .await
        .expect("generate")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    match events.first() {
        Some(Event::Started(s)) => assert_eq!(s.prompt_tokens as usize, tokens.len()),
        other => panic!("first event is not started: {other:?}"),
    }
    assert_eq!(token_ids(&events), by_text);
}

#[tokio::test]
async fn chat_prompt_uses_template() {
    let Some(mut c) = client().await else { return };
    let mut req = text_request("", 4);
    req.prompt = Some(Prompt::Chat(pb::ChatMessages {
        messages: vec![pb::ChatMessage {
            role: "user".into(),
            content: "Hi".into(),
        }],
    }));
    let events = collect(&mut c, req).await;
    let Some(Event::Started(s)) = events.first() else {
        panic!("no started event")
    };
    let plain = collect(&mut c, text_request("Hi", 1)).await;
    let Some(Event::Started(p)) = plain.first() else {
        panic!("no started event")
    };
    assert!(
        s.prompt_tokens > p.prompt_tokens,
        "template added no tokens"
    );
    assert_eq!(token_ids(&events).len(), 4);
}

#[tokio::test]
async fn tokenize_detokenize_round_trip() {
    let Some(c) = client().await else { return };
    let mut raw = c.raw();
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
async fn embeddings_are_normalized_and_semantic() {
    let Some(mut c) = client().await else { return };
    let inputs = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market crashed today.",
    ];
    let resp = c
        .embed(pb::EmbedRequest {
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("embed");
    assert_eq!(resp.len(), 3);
    for (i, r) in resp.iter().enumerate() {
        assert_eq!(r.index as usize, i);
        assert_eq!(r.embedding.len(), 384);
        assert!(r.tokens > 0);
        assert!(
            (norm(&r.embedding) - 1.0).abs() < 1e-3,
            "norm {}",
            norm(&r.embedding)
        );
    }
    let similar = cosine(&resp[0].embedding, &resp[1].embedding);
    let unrelated = cosine(&resp[0].embedding, &resp[2].embedding);
    assert!(similar > 0.7, "similar cosine {similar}");
    assert!(unrelated < 0.2, "unrelated cosine {unrelated}");

    let vectors = c
        .embed_texts(["A man is eating food."])
        .await
        .expect("embed_texts");
    assert!(cosine(&vectors[0], &resp[0].embedding) > 0.9999);
}

#[tokio::test]
async fn invalid_temperature_has_bad_request_details() {
    let Some(mut c) = client().await else { return };
    let mut req = text_request("hi", 4);
    req.sampling = Some(pb::SamplingParams {
        temperature: Some(-1.0),
        ..Default::default()
    });
    let status = generate_error(&mut c, req).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let details = error_details(&status);
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert!(
        fields.contains(&"sampling.temperature"),
        "violations {fields:?}"
    );
    let info = details.error_info.expect("ErrorInfo");
    assert_eq!(info.domain, "mlxgrpc.v1");
    assert_eq!(info.reason, "INVALID_FIELD");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("sampling.temperature")
    );
}

#[tokio::test]
async fn unknown_model_is_not_found() {
    let Some(mut c) = client().await else { return };
    let mut req = text_request("hi", 4);
    req.model = "no-such-model".into();
    let status = generate_error(&mut c, req).await;
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    let status = c.model_info("no-such-model").await.expect_err("model_info");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}

#[tokio::test]
async fn cancel_rpc_finishes_stream_cancelled() {
    let Some(mut c) = client().await else { return };
    let mut g = c
        .generate(text_request("Tell me a long story", 2000))
        .await
        .expect("generate");
    let id = g.request_id().to_string();
    let mut deltas = 0;
    let mut finished = None;
    while let Some(e) = g.next_event().await.expect("stream") {
        match e {
            Event::Started(s) => assert_eq!(s.request_id, id),
            Event::Delta(_) => {
                deltas += 1;
                if deltas == 2 {
                    assert!(
                        c.cancel(id.clone()).await.expect("cancel"),
                        "cancel not found"
                    );
                }
            }
            Event::Finished(f) => finished = Some(f),
        }
    }
    let f = finished.expect("finished event");
    assert_eq!(f.reason(), FinishReason::Cancelled);
    let completion = f.usage.map_or(0, |u| u.completion_tokens);
    assert!(
        (2..2000).contains(&completion),
        "completion tokens {completion}"
    );
    // Cancelling again finds nothing.
    assert!(!c.cancel(id).await.expect("cancel"));
}

#[tokio::test]
async fn dropping_the_stream_cancels_on_the_server() {
    let Some(mut c) = client().await else { return };
    let mut g = c
        .generate(text_request("Tell me a long story", 2000))
        .await
        .expect("generate");
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
    // 2000 tokens could have been generated: the fixture runs ~250 tokens/s.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !c.cancel(id.clone()).await.expect("cancel"),
        "request {id} still running 2 s after its stream was dropped"
    );
}

#[tokio::test]
async fn deadline_ends_a_long_stream() {
    let Some(mut c) = client().await else { return };
    let mut req = tonic::Request::new(text_request("Tell me a long story", 2000));
    req.set_timeout(Duration::from_millis(1500));
    let status = match c.generate(req).await {
        Err(s) => s,
        Ok(mut g) => loop {
            match g.next_event().await {
                Err(s) => break s,
                Ok(Some(Event::Finished(f))) => panic!("finished before deadline: {f:?}"),
                Ok(Some(_)) => continue,
                Ok(None) => panic!("ended without a status"),
            }
        },
    };
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test]
async fn model_info_and_list_models() {
    let Some(mut c) = client().await else { return };
    let info = c.model_info("").await.expect("model_info");
    assert_eq!(info.name, "llama");
    assert_eq!(info.kind(), pb::ModelKind::Generation);
    assert_eq!(info.vocab_size, 640);
    assert_eq!(info.context_length, 4096);
    assert!(info.has_chat_template);
    assert!(info.capabilities.as_ref().expect("capabilities").generation);

    let emb = c.model_info("all-minilm-l6-v2").await.expect("model_info");
    assert_eq!(emb.kind(), pb::ModelKind::Embedding);
    assert_eq!(emb.embedding_dimensions, 384);
    assert!(emb.capabilities.as_ref().expect("capabilities").embeddings);

    let models = c
        .raw()
        .list_models(pb::ListModelsRequest {})
        .await
        .expect("list_models")
        .into_inner()
        .models;
    let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names.first(),
        Some(&"llama"),
        "default generation model first: {names:?}"
    );
    assert!(names.contains(&"all-minilm-l6-v2"), "{names:?}");
}

#[tokio::test]
async fn bearer_token_is_accepted() {
    // The test server does not check tokens; the call must still go through with one.
    let Ok(address) = std::env::var("MLXGRPC_ADDRESS") else {
        return;
    };
    let options = ConnectOptions::default().with_bearer_token("test-token");
    let mut c = Client::connect(&address, options).await.expect("connect");
    assert_eq!(c.model_info("").await.expect("model_info").vocab_size, 640);
}

// --- adapters: the server starts with adapter "tone" on "llama";
// $MLXGRPC_ADAPTER_DIR is another adapter directory on the server.

fn with_adapter(adapter: &str, max_tokens: i32) -> pb::GenerateRequest {
    pb::GenerateRequest {
        adapter: adapter.into(),
        ..text_request("The quick brown fox", max_tokens)
    }
}

#[tokio::test]
async fn generate_with_an_adapter_changes_the_output() {
    let Some(mut c) = client().await else { return };
    let listed = c.list_adapters("").await.expect("list");
    assert_eq!(listed.model, "llama");
    assert!(listed.adapters.iter().any(|a| a.name == "tone"));
    let base = token_ids(&collect(&mut c, with_adapter("", 8)).await);
    let tuned = token_ids(&collect(&mut c, with_adapter("tone", 8)).await);
    assert_eq!(tuned.len(), 8);
    assert_ne!(tuned, base);
    let err = generate_error(&mut c, with_adapter("no-such-adapter", 2)).await;
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(
        error_details(&err).error_info.expect("ErrorInfo").reason,
        "ADAPTER_NOT_FOUND"
    );
}

#[tokio::test]
async fn load_use_and_unload_an_adapter() {
    let Some(mut c) = client().await else { return };
    let Ok(dir) = std::env::var("MLXGRPC_ADAPTER_DIR") else {
        return;
    };
    let loaded = c.load_adapter("", "rust-client", &dir).await.expect("load");
    let info = loaded.adapter.expect("adapter");
    assert_eq!(info.name, "rust-client");
    assert_eq!(info.kind(), pb::AdapterKind::Lora);
    assert!(info.bytes > 0);
    let out = token_ids(&collect(&mut c, with_adapter("rust-client", 4)).await);
    assert_eq!(out.len(), 4);
    assert_eq!(
        c.unload_adapter("", "rust-client")
            .await
            .expect("unload")
            .name,
        "rust-client"
    );
    let listed = c.list_adapters("").await.expect("list");
    assert!(!listed.adapters.iter().any(|a| a.name == "rust-client"));
    let err = c
        .load_adapter("", "nothing", "/nonexistent/adapter")
        .await
        .expect_err("bad dir");
    assert_eq!(err.code(), Code::InvalidArgument);
    let fields: Vec<String> = error_details(&err)
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["path"]);
}
