//! Request priority: a client's default ([`ConnectOptions::with_priority`]) fills the
//! Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe requests that leave `priority` at 0; a
//! request's own wins.

use tonic::Request;

use crate::{Client, ConnectOptions, pb};

/// The range of `GenerateRequest.priority`, `EmbedRequest.priority`, `RerankRequest.priority`,
/// `ClassifyRequest.priority`, `EmbedSparseRequest.priority` and `TranscribeRequest.priority`:
/// `-MAX_PRIORITY..=MAX_PRIORITY`.
pub const MAX_PRIORITY: i32 = 100;

impl ConnectOptions {
    /// The priority (`-100..=100`) of every Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe request that leaves
    /// its own at 0, e.g. a batch job's low one. Higher starts first among waiting
    /// requests; waiting raises a request's priority, so none starves; the output
    /// never changes. Out of range, [`Client::connect`] fails with
    /// [`crate::ConnectError::InvalidPriority`].
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}

/// A request message with a priority field.
pub(crate) trait Prioritized {
    fn priority_mut(&mut self) -> &mut i32;
}

impl Prioritized for pb::GenerateRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Prioritized for pb::EmbedRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Prioritized for pb::RerankRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Prioritized for pb::ClassifyRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Prioritized for pb::EmbedSparseRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Prioritized for pb::TranscribeRequest {
    fn priority_mut(&mut self) -> &mut i32 {
        &mut self.priority
    }
}

impl Client {
    /// `request` with the client's default priority when it has none.
    pub(crate) fn with_default_priority<T: Prioritized>(
        &self,
        mut request: Request<T>,
    ) -> Request<T> {
        let priority = request.get_mut().priority_mut();
        if *priority == 0 {
            *priority = self.priority;
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::IntoRequest;
    use tonic::transport::Endpoint;

    use super::*;
    use crate::{CallDefaults, ConnectError, retry::RetryPolicy, text_request};

    fn client(priority: i32) -> Client {
        let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        let defaults = CallDefaults {
            authorization: None,
            timeout: None,
        };
        Client {
            raw: pb::inference_service_client::InferenceServiceClient::with_interceptor(
                channel, defaults,
            ),
            timeout: Some(Duration::from_secs(1)),
            retry: RetryPolicy {
                max_attempts: 1,
                observer: None,
            },
            priority,
        }
    }

    #[tokio::test]
    async fn the_default_fills_requests_without_a_priority() {
        let low = client(-20);
        let generate = low.generate_request(text_request("hi", 1));
        assert_eq!(generate.get_ref().priority, -20);
        assert!(!generate.get_ref().request_id.is_empty());
        let mut own = text_request("hi", 1);
        own.priority = 30;
        assert_eq!(low.generate_request(own).get_ref().priority, 30);
        let embed = pb::EmbedRequest {
            inputs: vec!["a".into()],
            ..Default::default()
        };
        assert_eq!(low.embed_request(embed.clone()).get_ref().priority, -20);
        let own = pb::EmbedRequest {
            priority: 5,
            ..embed.clone()
        };
        assert_eq!(low.embed_request(own.into_request()).get_ref().priority, 5);
        assert_eq!(client(0).embed_request(embed).get_ref().priority, 0);
        let rerank = pb::RerankRequest::new("q", ["d"]);
        assert_eq!(low.rerank_request(rerank.clone()).get_ref().priority, -20);
        let own = rerank.clone().with_priority(7);
        assert_eq!(low.rerank_request(own).get_ref().priority, 7);
        assert_eq!(client(0).rerank_request(rerank).get_ref().priority, 0);
        let classify = pb::ClassifyRequest::new(["a"]);
        assert_eq!(
            low.classify_request(classify.clone()).get_ref().priority,
            -20
        );
        let own = classify.clone().with_priority(7);
        assert_eq!(low.classify_request(own).get_ref().priority, 7);
        assert_eq!(client(0).classify_request(classify).get_ref().priority, 0);
        let sparse = pb::EmbedSparseRequest::new(["a"]);
        assert_eq!(
            low.embed_sparse_request(sparse.clone()).get_ref().priority,
            -20
        );
        let own = sparse.clone().with_priority(7);
        assert_eq!(low.embed_sparse_request(own).get_ref().priority, 7);
        assert_eq!(client(0).embed_sparse_request(sparse).get_ref().priority, 0);
        let transcribe = pb::TranscribeRequest::new(pb::Audio::new(b"RIFF".to_vec(), "audio/wav"));
        assert_eq!(
            low.transcribe_request(transcribe.clone())
                .get_ref()
                .priority,
            -20
        );
        let own = transcribe.clone().with_priority(7);
        assert_eq!(low.transcribe_request(own).get_ref().priority, 7);
        assert_eq!(
            client(0).transcribe_request(transcribe).get_ref().priority,
            0
        );
    }

    #[tokio::test]
    async fn an_out_of_range_default_fails_before_connecting() {
        for bad in [MAX_PRIORITY + 1, -MAX_PRIORITY - 1] {
            let options = ConnectOptions::default().with_priority(bad);
            let err = Client::connect("127.0.0.1:1", options).await.unwrap_err();
            assert!(
                matches!(err, ConnectError::InvalidPriority(p) if p == bad),
                "{err}"
            );
        }
    }
}
