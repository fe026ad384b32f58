//! The google.rpc details the server attaches to an error status.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;
pub use tonic_types::{ErrorInfo, FieldViolation, RetryInfo};

/// The status and google.rpc details of a failed call.
#[derive(Clone, Debug)]
pub struct ErrorDetails {
    /// The status code.
    pub code: Code,
    /// The status message.
    pub message: String,
    /// ErrorInfo: `domain` is "mlxgrpc.v1", `reason` e.g. "INVALID_FIELD",
    /// `metadata` e.g. {"field": ...}.
    pub error_info: Option<ErrorInfo>,
    /// BadRequest field violations; `field` is a path such as "sampling.temperature".
    pub field_violations: Vec<FieldViolation>,
    /// RetryInfo's delay, on RESOURCE_EXHAUSTED and UNAVAILABLE.
    pub retry_delay: Option<Duration>,
}

/// Decodes the google.rpc details (`grpc-status-details-bin`) of `status`.
/// Missing or undecodable details leave the fields empty.
pub fn error_details(status: &Status) -> ErrorDetails {
    let d = status.get_error_details();
    ErrorDetails {
        code: status.code(),
        message: status.message().to_string(),
        error_info: d.error_info().cloned(),
        field_violations: d
            .bad_request()
            .map(|b| b.field_violations.clone())
            .unwrap_or_default(),
        retry_delay: d.retry_info().and_then(|r| r.retry_delay),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_of_a_plain_status_are_empty() {
        let d = error_details(&Status::not_found("nope"));
        assert_eq!((d.code, d.message.as_str()), (Code::NotFound, "nope"));
        assert!(d.error_info.is_none() && d.field_violations.is_empty());
        assert!(d.retry_delay.is_none());
    }

    #[test]
    fn details_are_decoded() {
        let mut details = tonic_types::ErrorDetails::with_bad_request_violation(
            "sampling.temperature",
            "must be >= 0",
        );
        details.set_error_info(
            "INVALID_FIELD",
            "mlxgrpc.v1",
            [("field".to_string(), "sampling.temperature".to_string())],
        );
        details.set_retry_info(Some(Duration::from_millis(1500)));
        let status = Status::with_error_details(Code::InvalidArgument, "bad", details);
        let d = error_details(&status);
        assert_eq!(d.field_violations[0].field, "sampling.temperature");
        assert_eq!(d.error_info.unwrap().domain, "mlxgrpc.v1");
        assert_eq!(d.retry_delay, Some(Duration::from_millis(1500)));
    }
}
