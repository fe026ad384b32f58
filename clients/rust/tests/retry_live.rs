//! Fills the live server's admission queue, then checks that a Generate refused with
//! RESOURCE_EXHAUSTED waits the server's delay and succeeds once there is room. A
//! test binary of its own: Cargo runs test binaries one after the other, so the full
//! queue never disturbs the other live tests.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx_grpc_client::{Client, Code, error_details, pb};
use support::{Live, exact, live, options};
use tokio::sync::oneshot;
use tonic::Status;

struct Filler {
    stop: Option<oneshot::Sender<()>>,
    ended: oneshot::Receiver<Option<Status>>,
}

/// A long generation through the raw client (no retries); `ended` gets its error.
fn start_filler(client: &Client, model: &str) -> Filler {
    let (stop, stopped) = oneshot::channel::<()>();
    let (done, ended) = oneshot::channel();
    let mut raw = client.raw();
    let mut req = exact("Count:", 4000);
    req.model = model.to_string();
    tokio::spawn(async move {
        let run = async {
            let mut stream = raw.generate(req).await?.into_inner();
            while stream.message().await?.is_some() {}
            Ok::<(), Status>(())
        };
        let status = tokio::select! {
            r = run => r.err(),
            _ = stopped => None, // dropping the call cancels it
        };
        let _ = done.send(status);
    });
    Filler {
        stop: Some(stop),
        ended,
    }
}

/// Opens fillers in batches until the server refuses one with RESOURCE_EXHAUSTED.
async fn saturate(s: &Live) -> (Vec<Filler>, Status) {
    let mut running = Vec::new();
    while running.len() < 256 {
        let mut batch: Vec<Filler> = (0..8)
            .map(|_| start_filler(&s.client, &s.generator.name))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut refusal = None;
        for mut f in batch.drain(..) {
            match f.ended.try_recv() {
                Ok(Some(status)) if status.code() == Code::ResourceExhausted => {
                    refusal = Some(status)
                }
                Ok(_) => {}
                Err(_) => running.push(f),
            }
        }
        if let Some(status) = refusal {
            return (running, status);
        }
    }
    release(&s.client, &mut running, &s.generator.name).await;
    panic!("256 concurrent generations and no RESOURCE_EXHAUSTED");
}

/// Stops the fillers and waits until the server admits requests again.
async fn release(client: &Client, fillers: &mut [Filler], model: &str) {
    for f in fillers.iter_mut() {
        if let Some(stop) = f.stop.take() {
            let _ = stop.send(());
        }
    }
    let mut probe = exact("x", 1);
    probe.model = model.to_string();
    for _ in 0..300 {
        let mut raw = client.raw();
        let result = async {
            let mut stream = raw.generate(probe.clone()).await?.into_inner();
            while stream.message().await?.is_some() {}
            Ok::<(), Status>(())
        };
        match result.await {
            Err(status) if status.code() == Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            _ => return,
        }
    }
}

#[tokio::test]
#[ignore = "live: needs a server (MLXGRPC_ADDRESS=host:port cargo test -- --include-ignored)"]
async fn a_full_queue_is_retried_after_the_servers_delay() {
    let Some(s) = live().await else { return };
    let (mut fillers, refusal) = saturate(&s).await;
    let details = error_details(&refusal);
    let delay = details.retry_delay.expect("RetryInfo on a full queue");
    assert_eq!(
        details.error_info.map(|i| i.reason).as_deref(),
        Some("QUEUE_FULL")
    );
    // Fillers end on their own on a fast model: top the queue up again just before
    // the call that must be refused.
    for _ in 0..8 {
        fillers.push(start_filler(&s.client, &s.generator.name));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The observer runs on the retrying task: it makes room by stopping the fillers
    // (their calls are dropped), then the retry comes after the server's delay.
    let fillers = Arc::new(Mutex::new(fillers));
    let retries = Arc::new(Mutex::new(Vec::new()));
    let (seen, to_stop) = (retries.clone(), fillers.clone());
    let options = options()
        .with_timeout(Duration::from_secs(120))
        .on_retry(move |d, delay| {
            seen.lock().unwrap().push((d.code, delay));
            for f in to_stop.lock().unwrap().iter_mut() {
                if let Some(stop) = f.stop.take() {
                    let _ = stop.send(());
                }
            }
        });
    let retrying = Client::connect(&s.address, options).await.expect("connect");
    let start = Instant::now();
    let result = retrying.generate_text(exact("Hello", 3)).await;
    let elapsed = start.elapsed();
    release(&s.client, &mut fillers.lock().unwrap(), &s.generator.name).await;
    let r = result.expect("generation after the retry");
    assert_eq!(
        *retries.lock().unwrap(),
        vec![(Code::ResourceExhausted, delay)]
    );
    assert!(
        elapsed >= delay,
        "retried after {elapsed:?}, the server asked for {delay:?}"
    );
    assert_eq!(r.token_ids.len(), 3);
    assert_eq!(
        r.finished.map(|f| f.reason()),
        Some(pb::FinishReason::Length)
    );
}
