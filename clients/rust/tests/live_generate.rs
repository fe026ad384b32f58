//! Generate against a live server at MLXGRPC_ADDRESS (any server: the models come from
//! ListModels): streams, the unary form, structured output, cancellation, deadlines, adapters.
//! Ignored unless asked for with a server (see tests/support); without an adapter the
//! adapter test prints "skipped: <why>" and passes (fails under MLXGRPC_REQUIRE_LIVE=1).

mod support;

use std::time::Duration;

use mlx_grpc_client::{Code, Event, StreamExt, error_details, pb, speculation, text_request};
use pb::FinishReason;
use pb::generate_request::Prompt;
use support::{events, exact, live, loaded_adapter, token_ids, with_adapter};

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn greedy_generate_is_deterministic() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn token_prompt_streams_like_the_text_prompt() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn collect_is_the_unary_form() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn chat_prompt_uses_template() {
    let Some(s) = live().await else { return };
    assert!(
        s.generator.has_chat_template,
        "{} has no chat template",
        s.generator.name
    );
    let mut req = exact("", 4);
    req.prompt = Some(Prompt::Chat(pb::ChatMessages {
        messages: vec![pb::ChatMessage::user("Hi")],
        ..Default::default()
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

/// Copy-heavy: the continuation repeats text the prompt holds, which prompt lookup drafts.
const PASSAGE: &str = "The lighthouse keeper climbed the narrow stairs every evening at dusk, \
    lit the great lamp, and wrote the names of the ships that passed in a worn leather book.";

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn speculation_never_changes_the_output() {
    let Some(s) = live().await else { return };
    let run = |mode, k| {
        let mut req = exact(&format!("Repeat exactly: {PASSAGE}\n{PASSAGE}\n"), 32); // greedy
        req.speculation = Some(speculation(mode, k));
        s.client.generate_text(req)
    };
    fn usage(r: &mlx_grpc_client::GenerationResult) -> &pb::Usage {
        r.finished
            .as_ref()
            .and_then(|f| f.usage.as_ref())
            .expect("usage")
    }
    let off = run(pb::SpeculationMode::Off, 0).await.expect("OFF");
    assert_eq!(off.token_ids.len(), 32);
    assert_eq!(
        (usage(&off).draft_tokens, usage(&off).accepted_draft_tokens),
        (0, 0)
    );
    let caps = s
        .generator
        .capabilities
        .as_ref()
        .and_then(|c| c.speculation.as_ref());
    if !caps.is_some_and(|c| c.modes.contains(&(pb::SpeculationMode::Ngram as i32))) {
        eprintln!(
            "{} does not speculate with NGRAM: skipping that half",
            s.generator.name
        );
        return;
    }
    let ngram = run(pb::SpeculationMode::Ngram, 6).await.expect("NGRAM");
    assert_eq!((&ngram.token_ids, &ngram.text), (&off.token_ids, &off.text));
    let u = usage(&ngram);
    assert!(
        u.draft_tokens >= u.accepted_draft_tokens && u.accepted_draft_tokens >= 0,
        "{u:?}"
    );
    assert_eq!(u.completion_tokens, 32);
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn json_schema_output_is_complete_and_an_invalid_regex_is_refused() {
    let Some(s) = live().await else { return };
    let schema = r#"{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
        "required": ["answer"], "additionalProperties": false}"#;
    let mut req = text_request("Answer:", 32);
    req.response_format = Some(pb::ResponseFormat::json_schema(schema));
    let r = s.client.generate_text(req).await.expect("generate_text");
    let text = r.text;
    let finished = r.finished.expect("finished event");
    assert_eq!(finished.reason(), FinishReason::Stop, "{text}");
    assert!(
        text == r#"{"answer": "yes"}"# || text == r#"{"answer": "no"}"#,
        "{text}"
    );
    let capabilities = s.generator.capabilities.as_ref().expect("capabilities");
    assert!(
        capabilities
            .response_formats()
            .any(|f| f == pb::ResponseFormatKind::JsonSchema)
    );

    let mut bad = text_request("x", 4);
    bad.response_format = Some(pb::ResponseFormat::regex("[a-"));
    let status = s
        .client
        .generate_text(bad)
        .await
        .expect_err("an invalid regex accepted");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let fields: Vec<String> = error_details(&status)
        .field_violations
        .iter()
        .map(|v| v.field.clone())
        .collect();
    assert_eq!(fields, ["response_format.regex"]);
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn another_task_cancels_by_the_client_side_id() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn dropping_the_stream_cancels_on_the_server() {
    let Some(s) = live().await else { return };
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
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn deadline_ends_a_long_stream() {
    let Some(s) = live().await else { return };
    // 4000 tokens against 300 ms: even a tiny fixture model decoding ~1,500 tokens/s cannot
    // finish first (2000 against 1.5 s could)
    let mut req = tonic::Request::new(exact("Tell me a long story", 4000));
    req.set_timeout(Duration::from_millis(300));
    let status = s
        .client
        .generate_text(req)
        .await
        .expect_err("finished before the deadline");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn generate_with_an_adapter_changes_the_output() {
    let Some(s) = live().await else { return };
    let Some(adapter) = loaded_adapter(&s).await else {
        return;
    };
    let prompt = "The quick brown fox";
    let base = s
        .client
        .generate_text(with_adapter(prompt, 8, ""))
        .await
        .expect("base");
    let tuned = s
        .client
        .generate_text(with_adapter(prompt, 8, &adapter.name))
        .await
        .expect("with the adapter");
    assert_eq!(tuned.token_ids.len(), 8);
    assert_ne!(tuned.token_ids, base.token_ids);
    let err = s
        .client
        .generate_text(with_adapter(prompt, 2, "no-such-adapter"))
        .await
        .expect_err("an unknown adapter");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let info = mlx_grpc_client::error_details(&err)
        .error_info
        .expect("ErrorInfo");
    assert_eq!(info.reason, "ADAPTER_NOT_FOUND");
}

fn seeded(prompt: &str, max_tokens: i32, seed: u64) -> pb::GenerateRequest {
    pb::GenerateRequest {
        sampling: Some(pb::SamplingParams {
            temperature: Some(1.0),
            seed: Some(seed),
            ..Default::default()
        }),
        ..exact(prompt, max_tokens)
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn n_seeded_choices_each_end_with_their_finished_event() {
    let Some(s) = live().await else { return };
    let request = pb::GenerateRequest {
        n: 2,
        ..seeded("Once upon a time", 6, 7)
    };
    let mut g = s.client.generate(request.clone());
    let mut events = Vec::new();
    while let Some(e) = g.next_choice_event().await.expect("stream") {
        events.push(e);
    }
    assert!(
        matches!(events.first(), Some((0, Event::Started(_)))),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some((_, Event::Finished(_)))),
        "{events:?}"
    );
    for index in [0, 1] {
        let mine: Vec<&Event> = events[1..]
            .iter()
            .filter(|(i, _)| *i == index)
            .map(|(_, e)| e)
            .collect();
        let (last, deltas) = mine.split_last().expect("events of the choice");
        assert!(
            deltas.iter().all(|e| matches!(e, Event::Delta(_))),
            "{mine:?}"
        );
        match last {
            Event::Finished(f) => assert_eq!(
                (f.reason(), f.usage.as_ref().map(|u| u.completion_tokens)),
                (FinishReason::Length, Some(6))
            ),
            other => panic!("choice {index} ends with {other:?}"),
        }
    }
    let r = s.client.generate_text(request).await.expect("collect");
    assert_eq!(
        r.choices.iter().map(|c| c.index).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(r.token_ids, r.choices[0].token_ids);
    // Choice i of a request seeded s is the request seeded s + i alone.
    for c in &r.choices {
        let alone = s
            .client
            .generate_text(seeded("Once upon a time", 6, 7 + c.index as u64))
            .await
            .expect("alone");
        assert_eq!(c.token_ids.len(), 6);
        assert_eq!((&c.token_ids, &c.text), (&alone.token_ids, &alone.text));
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn prompt_logprobs_come_before_the_first_delta() {
    let Some(s) = live().await else { return };
    let text = "The quick brown fox jumps over";
    let request = pb::GenerateRequest {
        prompt_logprobs: Some(2),
        ..exact(text, 3)
    };
    let events = events(&s.client, request.clone()).await;
    let at = events
        .iter()
        .position(|e| matches!(e, Event::PromptLogprobs(_)))
        .expect("a prompt_logprobs event");
    let first_delta = events.iter().position(|e| matches!(e, Event::Delta(_)));
    assert!(at > 0 && first_delta.is_some_and(|d| at < d), "{events:?}");
    let ids = s
        .client
        .raw()
        .tokenize(pb::TokenizeRequest {
            text: text.into(),
            add_special_tokens: true,
            ..Default::default()
        })
        .await
        .expect("tokenize")
        .into_inner()
        .token_ids;
    let (Event::Started(started), Event::PromptLogprobs(p)) = (&events[0], &events[at]) else {
        panic!("{events:?}")
    };
    assert_eq!(started.prompt_tokens as usize, ids.len());
    let got: Vec<i32> = p.tokens.iter().map(|t| t.token_id).collect();
    assert_eq!(got, ids[1..], "every prompt token but the first");
    for t in &p.tokens {
        assert!(t.logprob <= 0.0 && t.top_logprobs.len() == 2, "{t:?}");
        assert!(
            t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob,
            "{t:?}"
        );
    }
    let r = s.client.generate_text(request).await.expect("collect");
    assert_eq!(r.prompt_logprobs, p.tokens);
}
