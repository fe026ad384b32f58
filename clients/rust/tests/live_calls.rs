//! The other calls against a live server at MLXGRPC_ADDRESS (any server: the models come
//! from ListModels): tokenizing, embeddings, error details, model info, the memory plan,
//! load reports, bearer tokens, adapters, Embed's truncation, packed embeddings, Prefetch
//! and CloseSession.
//! Skipped without the server (or its embedding model, its adapter), like tests/live_generate.rs.

mod support;

use mlx_grpc_client::{
    Code, ConnectOptions, Truncation, Vectors, dequantize, error_details, hamming, pb, unpack_bits,
};
use support::{exact, live, loaded_adapter, token, unavailable, with_adapter};

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (norm(a) * norm(b))
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn tokenize_detokenize_round_trip() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn embeddings_are_normalized_and_semantic() {
    let Some(s) = live().await else { return };
    let Some(embedder) = s
        .embedder
        .as_ref()
        .or_else(|| unavailable("the server serves no embedding model"))
    else {
        return;
    };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn embed_truncation_none_refuses_a_long_input() {
    let Some(s) = live().await else { return };
    let Some(embedder) = s
        .embedder
        .as_ref()
        .or_else(|| unavailable("the server serves no embedding model"))
    else {
        return;
    };
    // About twice the model's input limit in tokens, under the server's byte limit of an
    // input (32 bytes a token of the model's context).
    let long = "word ".repeat(2 * embedder.context_length as usize);
    let request =
        pb::EmbedRequest::new(["A short input.".to_string(), long]).with_model(&embedder.name);
    let status = s
        .client
        .embed(request.clone().with_truncate(Truncation::None))
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

    // Cut (the default, and Truncation::End): embedded from the tokens that fit.
    for truncate in [None, Some(Truncation::End)] {
        let request = match truncate {
            Some(t) => request.clone().with_truncate(t),
            None => request.clone(),
        };
        let resp = s.client.embed(request).await.expect("embed, cut");
        assert_eq!(resp.len(), 2);
        assert_eq!(
            resp[1].tokens, embedder.context_length,
            "{truncate:?}: tokens of the long input"
        );
        assert!(resp[0].tokens < resp[1].tokens);
    }
}

/// Seventy short texts: a packed Embed of them is at most ceil(70 / 64) = 2 messages.
fn seventy() -> Vec<String> {
    let topics = [
        "rivers",
        "bread",
        "the stock market",
        "mountains",
        "music",
        "a cat",
        "rain",
        "trains",
        "chess",
        "the sea",
    ];
    (0..70)
        .map(|i| {
            format!(
                "Note {i}: a short sentence about {}.",
                topics[i % topics.len()]
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn packed_embeddings_match_the_per_input_ones() {
    let Some(s) = live().await else { return };
    let Some(embedder) = s
        .embedder
        .as_ref()
        .or_else(|| unavailable("the server serves no embedding model"))
    else {
        return;
    };
    let request = pb::EmbedRequest::new(seventy()).with_model(&embedder.name);
    let plain = s.client.embed(request.clone()).await.expect("embed");
    let per_input: Vec<Vec<f32>> = plain.iter().map(|r| r.embedding.clone()).collect();

    let packed = s
        .client
        .embed_packed(request.clone())
        .await
        .expect("embed packed float32");
    assert_eq!(packed.len(), 70);
    assert!(
        (1..=2).contains(&packed.messages),
        "{} messages",
        packed.messages
    );
    assert_eq!(packed.dimensions, embedder.embedding_dimensions as usize);
    assert_eq!(
        packed.vectors,
        Vectors::Float32(per_input.clone()),
        "the same float32 values"
    );
    let tokens: Vec<i32> = plain.iter().map(|r| r.tokens).collect();
    assert_eq!(packed.tokens, tokens);

    let int8 = s
        .client
        .embed_packed(request.clone().with_packed(pb::EmbeddingType::Int8))
        .await
        .expect("embed packed int8");
    assert_eq!(int8.embedding_type(), pb::EmbeddingType::Int8);
    assert!(int8.messages <= 2);
    let Vectors::Int8 { values, scales } = &int8.vectors else {
        panic!("{:?}", int8.embedding_type())
    };
    assert_eq!((values.len(), scales.len()), (70, 70));
    for (i, (v, s)) in values.iter().zip(scales).enumerate() {
        let c = cosine(&dequantize(v, *s), &per_input[i]);
        assert!(c >= 0.999, "input {i}: int8 cosine {c}");
    }

    let half = s
        .client
        .embed_packed(request.clone().with_packed(pb::EmbeddingType::Float16))
        .await
        .expect("embed packed float16");
    let Vectors::Float16(half) = half.vectors else {
        panic!("not float16")
    };
    for (i, (h, f)) in half.iter().zip(&per_input).enumerate() {
        assert!(
            h.iter().zip(f).all(|(x, y)| (x - y).abs() < 1e-3),
            "input {i}: float16 far from float32"
        );
    }

    let status = s
        .client
        .embed(
            pb::EmbedRequest::new(["a", "b"])
                .with_model(&embedder.name)
                .with_embedding_type(pb::EmbeddingType::Int8),
        )
        .await
        .expect_err("int8 without packed");
    let details = error_details(&status);
    assert_eq!(details.code, Code::InvalidArgument, "{status:?}");
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["embedding_type"], "{status:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn packed_ubinary_embeddings_are_the_signs() {
    let Some(s) = live().await else { return };
    let Some(embedder) = s
        .embedder
        .as_ref()
        .or_else(|| unavailable("the server serves no embedding model"))
    else {
        return;
    };
    // 100 dimensions: 13 bytes a vector, the last one's four low bits unused
    let mut request = pb::EmbedRequest::new([
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market crashed today.",
    ])
    .with_model(&embedder.name);
    request.dimensions = 100;
    let plain = s.client.embed(request.clone()).await.expect("embed");
    let e = s
        .client
        .embed_packed(request.with_packed(pb::EmbeddingType::Ubinary))
        .await
        .expect("embed packed ubinary");
    assert_eq!((e.dimensions, e.messages), (100, 1));
    let Vectors::Ubinary(bits) = &e.vectors else {
        panic!("{:?}", e.embedding_type())
    };
    for (i, (b, r)) in bits.iter().zip(&plain).enumerate() {
        assert_eq!(b.len(), 13);
        assert_eq!(b[12] & 0x0f, 0, "unused low bits zero");
        let signs: Vec<u8> = r.embedding.iter().map(|&x| u8::from(x > 0.0)).collect();
        assert_eq!(unpack_bits(b, 100), signs, "input {i}");
    }
    assert!(hamming(&bits[0], &bits[1]) < hamming(&bits[0], &bits[2]));
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn invalid_temperature_has_bad_request_details() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn unknown_model_is_not_found() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn model_info_list_models_and_plan() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn model_loads_report_every_generation_model() {
    let Some(s) = live().await else { return };
    let before = s.client.model_loads("").await.expect("model_loads");
    let loaded: Vec<&str> = before.iter().map(|l| l.model.as_str()).collect();
    let generators: Vec<&str> = s
        .models
        .iter()
        .filter(|m| m.kind() == pb::ModelKind::Generation)
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(
        loaded, generators,
        "generation models only, the default first"
    );
    assert!(before[0].max_running_requests > 0, "{before:?}");
    assert!(before[0].memory_budget_bytes > 0, "{before:?}");
    s.client
        .generate_text(exact("Counting for the load report", 5))
        .await
        .expect("generate");
    let after = s
        .client
        .model_loads(&s.generator.name)
        .await
        .expect("model_loads");
    assert!(after[0].generated_tokens - before[0].generated_tokens >= 5);
    assert!(after[0].generated_tokens_per_second > 0.0, "{after:?}");
    let status = s
        .client
        .model_loads("no-such-model")
        .await
        .expect_err("an unknown model");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    if let Some(e) = &s.embedder {
        let status = s
            .client
            .model_loads(&e.name)
            .await
            .expect_err("an embedding model has no load");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn prefetch_finds_a_sessions_prefix_and_close_session_releases_it() {
    let Some(s) = live().await else { return };
    // About forty words: a prompt whose prefix the prefix cache keeps after a Generate.
    let prompt = "The old lighthouse keeper climbed the winding stairs every evening at dusk, \
        trimmed the wick, polished the great lens and watched the fishing boats return along the \
        rocky coast, writing each name in a worn leather logbook that his grandfather had started \
        long ago.";
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let session = format!("rs-{nanos:x}-{}", std::process::id());
    let mut generate = exact(prompt, 4);
    generate.session_id = session.clone();
    let generated = s
        .client
        .generate_text(generate.clone())
        .await
        .expect("generate");
    assert_eq!(generated.token_ids.len(), 4);
    let prefetched = s
        .client
        .prefetch(pb::PrefetchRequest::from(&generate))
        .await
        .expect("prefetch");
    assert_eq!(
        Some(prefetched.prompt_tokens),
        generated.started.as_ref().map(|s| s.prompt_tokens),
        "the prompt read as Generate reads it"
    );
    assert_eq!(prefetched.tier(), pb::CacheTier::Memory, "{prefetched:?}");
    assert!(
        prefetched.cached_tokens > 0 && prefetched.cached_tokens <= prefetched.prompt_tokens - 1,
        "{prefetched:?}"
    );
    let entries = s.client.close_session("", &session).await.expect("close");
    assert!(entries >= 1, "closed {entries} entries");
    let again = s.client.close_session("", &session).await.expect("close");
    assert_eq!(again, 0, "no longer open");
    let status = s
        .client
        .prefetch(pb::PrefetchRequest::default().with_session_id(&session))
        .await
        .expect_err("a Prefetch without a prompt accepted");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn bearer_token_is_accepted() {
    // A server without tokens takes any; one with tokens takes MLXGRPC_TOKEN only.
    let Some(s) = live().await else { return };
    let sent = token().unwrap_or_else(|| "test-token".to_string());
    let options = ConnectOptions::default().with_bearer_token(sent);
    let c = mlx_grpc_client::Client::connect(&s.address, options)
        .await
        .expect("connect");
    assert_eq!(
        c.model_info("").await.expect("model_info").name,
        s.generator.name
    );
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn a_server_with_tokens_refuses_none_or_a_wrong_one() {
    let Some(s) = live().await else { return };
    let Some(token) = token() else {
        return support::skipped("MLXGRPC_TOKEN is not set: the server may have no tokens");
    };
    for other in [None, Some(format!("{token}-not"))] {
        let mut options = ConnectOptions::default().with_max_attempts(1);
        options.bearer_token = other.clone();
        let c = mlx_grpc_client::Client::connect(&s.address, options)
            .await
            .expect("connect");
        let status = c
            .model_info("")
            .await
            .expect_err("a call without the server's token accepted");
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{other:?}: {status:?}"
        );
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn load_use_and_unload_an_adapter() {
    let Some(s) = live().await else { return };
    let Some(adapter) = loaded_adapter(&s).await else {
        return;
    };
    let c = &s.client;
    let loaded = c
        .load_adapter("", "rust-client", &adapter.source)
        .await
        .expect("load");
    let info = loaded.adapter.expect("adapter");
    assert_eq!(info.name, "rust-client");
    assert_eq!(
        (info.kind, info.rank, info.bytes),
        (adapter.kind, adapter.rank, adapter.bytes)
    );
    let prompt = "The quick brown fox";
    let again = c
        .generate_text(with_adapter(prompt, 8, "rust-client"))
        .await
        .expect("again");
    let first = c
        .generate_text(with_adapter(prompt, 8, &adapter.name))
        .await
        .expect("first");
    assert_eq!(
        again.token_ids, first.token_ids,
        "the same weights under another name"
    );
    let gone = c.unload_adapter("", "rust-client").await.expect("unload");
    assert_eq!(gone.name, "rust-client");
    let listed = c.list_adapters("").await.expect("list");
    assert!(!listed.adapters.iter().any(|a| a.name == "rust-client"));
    let err = c
        .load_adapter("", "nothing", "/nonexistent/adapter")
        .await
        .expect_err("a directory without an adapter");
    assert_eq!(err.code(), Code::InvalidArgument);
    let fields: Vec<String> = error_details(&err)
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["path"]);
}
