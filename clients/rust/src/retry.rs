//! Retrying calls the server refused for now: RESOURCE_EXHAUSTED (admission queue
//! full) or UNAVAILABLE (model loading, server draining) carrying a google.rpc
//! RetryInfo, after exactly the delay the server asked for. A call is retried only
//! before its first response arrived, never past its deadline, with the same request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tonic::{Code, IntoRequest, Request, Status};

use crate::errors::{ErrorDetails, error_details};

/// Called before each retry with the refusal and the delay.
#[derive(Clone)]
pub struct RetryObserver(pub Arc<dyn Fn(&ErrorDetails, Duration) + Send + Sync>);

impl std::fmt::Debug for RetryObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryObserver")
    }
}

/// How a client retries (see [`crate::ConnectOptions::with_max_attempts`]).
#[derive(Clone, Debug)]
pub(crate) struct RetryPolicy {
    pub max_attempts: u32,
    pub observer: Option<RetryObserver>,
}

/// A request that can be sent again: its metadata and message, and the attempts
/// and deadline of the one logical call.
pub(crate) struct Attempts<T> {
    metadata: MetadataMap,
    message: T,
    left: u32,
    deadline: Option<Instant>,
    observer: Option<RetryObserver>,
}

impl<T: Clone> Attempts<T> {
    /// The deadline is the request's own timeout, else `default_timeout`.
    pub fn new(
        request: impl IntoRequest<T>,
        policy: &RetryPolicy,
        default_timeout: Option<Duration>,
    ) -> Self {
        let (metadata, _, message) = request.into_request().into_parts();
        let timeout = grpc_timeout(&metadata).or(default_timeout);
        Self {
            metadata,
            message,
            left: policy.max_attempts.max(1),
            deadline: timeout.map(|t| Instant::now() + t),
            observer: policy.observer.clone(),
        }
    }

    /// The request for the next attempt, with the time left as its timeout.
    pub fn request(&self) -> Request<T> {
        let mut request = Request::new(self.message.clone());
        *request.metadata_mut() = self.metadata.clone();
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            request.set_timeout(left.max(Duration::from_millis(1)));
        }
        request
    }

    /// Waits before the next attempt after `status`; false, at once, when `status`
    /// is final (no refusal with RetryInfo, attempts spent, deadline too near).
    pub async fn wait(&mut self, status: &Status) -> bool {
        self.left -= 1;
        if self.left == 0 || !matches!(status.code(), Code::ResourceExhausted | Code::Unavailable) {
            return false;
        }
        let details = error_details(status);
        let Some(delay) = details.retry_delay else {
            return false;
        };
        if self.deadline.is_some_and(|d| Instant::now() + delay >= d) {
            return false;
        }
        if let Some(observer) = &self.observer {
            (observer.0)(&details, delay);
        }
        tokio::time::sleep(delay).await;
        true
    }
}

/// The `grpc-timeout` a request carries (set with `Request::set_timeout`).
fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_back() {
        for t in [
            Duration::from_millis(250),
            Duration::from_secs(90),
            Duration::from_micros(7),
        ] {
            let mut request = Request::new(());
            request.set_timeout(t);
            assert_eq!(grpc_timeout(request.metadata()), Some(t));
        }
        assert_eq!(grpc_timeout(&MetadataMap::new()), None);
    }

    fn refusal(code: Code, delay: Option<Duration>) -> Status {
        let mut details = tonic_types::ErrorDetails::new();
        details.set_error_info("QUEUE_FULL", "mlxgrpc.v1", []);
        if delay.is_some() {
            details.set_retry_info(delay);
        }
        <Status as tonic_types::StatusExt>::with_error_details(code, "refused for now", details)
    }

    #[tokio::test]
    async fn refusals_wait_the_servers_delay_until_the_attempts_are_spent() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let observer = RetryObserver(Arc::new(move |d: &ErrorDetails, delay| {
            log.lock()
                .unwrap()
                .push((d.error_info.clone().unwrap().reason, delay))
        }));
        let policy = RetryPolicy {
            max_attempts: 3,
            observer: Some(observer),
        };
        let mut attempts = Attempts::<()>::new((), &policy, None);
        let delay = Duration::from_millis(50);
        let start = Instant::now();
        assert!(
            attempts
                .wait(&refusal(Code::ResourceExhausted, Some(delay)))
                .await
        );
        assert!(
            attempts
                .wait(&refusal(Code::Unavailable, Some(delay)))
                .await
        );
        assert!(
            !attempts
                .wait(&refusal(Code::ResourceExhausted, Some(delay)))
                .await
        );
        assert!(start.elapsed() >= 2 * delay);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![("QUEUE_FULL".to_string(), delay); 2]
        );
    }

    #[tokio::test]
    async fn other_failures_are_final_at_once() {
        let policy = RetryPolicy {
            max_attempts: 3,
            observer: None,
        };
        let delay = Some(Duration::from_secs(5));
        let start = Instant::now();
        let mut attempts = Attempts::<()>::new((), &policy, None);
        assert!(!attempts.wait(&refusal(Code::InvalidArgument, delay)).await);
        let mut attempts = Attempts::<()>::new((), &policy, None);
        assert!(
            !attempts.wait(&refusal(Code::ResourceExhausted, None)).await,
            "no RetryInfo"
        );
        let mut near = Attempts::<()>::new((), &policy, Some(Duration::from_secs(1)));
        assert!(
            !near.wait(&refusal(Code::Unavailable, delay)).await,
            "past the deadline"
        );
        let off = RetryPolicy {
            max_attempts: 1,
            observer: None,
        };
        let mut attempts = Attempts::<()>::new((), &off, None);
        assert!(
            !attempts
                .wait(&refusal(Code::ResourceExhausted, delay))
                .await,
            "max_attempts 1"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn each_attempt_gets_the_time_left() {
        let policy = RetryPolicy {
            max_attempts: 3,
            observer: None,
        };
        let attempts = Attempts::<u8>::new(1u8, &policy, Some(Duration::from_secs(5)));
        let left = grpc_timeout(attempts.request().metadata()).expect("timeout");
        assert!(
            left <= Duration::from_secs(5) && left > Duration::from_secs(4),
            "{left:?}"
        );
        let none = Attempts::<u8>::new(1u8, &policy, None);
        assert!(grpc_timeout(none.request().metadata()).is_none());
    }
}
