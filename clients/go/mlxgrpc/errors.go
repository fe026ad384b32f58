package mlxgrpc

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDetails is the google.rpc detail carried by a failed call.
type ErrorDetails struct {
	Code    codes.Code
	Message string
	// ErrorInfo has Domain "mlxgrpc.v1", a Reason such as "INVALID_FIELD", and
	// Metadata such as {"field": "sampling.temperature"}. Nil when absent.
	ErrorInfo *errdetails.ErrorInfo
	// FieldViolations from BadRequest; Field is a path like "sampling.temperature".
	FieldViolations []*errdetails.BadRequest_FieldViolation
	// RetryInfo is set on RESOURCE_EXHAUSTED and UNAVAILABLE; nil when absent.
	RetryInfo *errdetails.RetryInfo
}

// Details extracts the status code, message and google.rpc details of err.
// It returns nil when err is nil or carries no gRPC status.
func Details(err error) *ErrorDetails {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	d := &ErrorDetails{Code: st.Code(), Message: st.Message()}
	for _, x := range st.Details() {
		switch v := x.(type) {
		case *errdetails.ErrorInfo:
			d.ErrorInfo = v
		case *errdetails.BadRequest:
			d.FieldViolations = append(d.FieldViolations, v.GetFieldViolations()...)
		case *errdetails.RetryInfo:
			d.RetryInfo = v
		}
	}
	return d
}

// Fields lists the field paths named by the BadRequest violations.
func (d *ErrorDetails) Fields() []string {
	if d == nil {
		return nil
	}
	out := make([]string, 0, len(d.FieldViolations))
	for _, v := range d.FieldViolations {
		out = append(out, v.GetField())
	}
	return out
}

// RetryDelay is the server's suggested wait before retrying, and whether it gave one.
func (d *ErrorDetails) RetryDelay() (time.Duration, bool) {
	if d == nil || d.RetryInfo == nil || d.RetryInfo.GetRetryDelay() == nil {
		return 0, false
	}
	return d.RetryInfo.GetRetryDelay().AsDuration(), true
}
