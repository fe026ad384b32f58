//! The builder methods Embed, Rerank, Classify and EmbedSparse requests share: the model,
//! truncation, request id and priority, written once and implemented for each.

/// `with_model`, `with_truncate`, `with_request_id` and `with_priority` on `$request`,
/// documented with the model and truncation sentences given.
macro_rules! pooling_builders {
    ($request:ty, model: $model_doc:literal, truncate: $truncate_doc:literal) => {
        impl $request {
            #[doc = $model_doc]
            pub fn with_model(mut self, model: impl Into<String>) -> Self {
                self.model = model.into();
                self
            }

            #[doc = $truncate_doc]
            pub fn with_truncate(mut self, truncate: crate::Truncation) -> Self {
                self.set_truncate(truncate.into());
                self
            }

            /// A client-chosen id for Cancel and logs (empty: the server assigns one).
            pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
                self.request_id = request_id.into();
                self
            }

            /// Scheduling priority, `-100..=100` (0: the client's default).
            pub fn with_priority(mut self, priority: i32) -> Self {
                self.priority = priority;
                self
            }
        }
    };
}

pub(crate) use pooling_builders;
