package mlxgrpc

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// retryPolicy retries calls the server refused for now: RESOURCE_EXHAUSTED
// (admission queue full) or UNAVAILABLE (model loading, server draining) with
// a google.rpc RetryInfo, after exactly the delay the server asked for.
type retryPolicy struct {
	maxAttempts int
	observe     func(*ErrorDetails, time.Duration)
}

// wait sleeps before the attempt after attempt (1-based) failed with err, and
// reports false, at once, when err is final: not a refusal with RetryInfo,
// the attempts are spent, or the delay would pass ctx's deadline.
func (p retryPolicy) wait(ctx context.Context, err error, attempt int) bool {
	if attempt >= p.maxAttempts {
		return false
	}
	d := Details(err)
	if d == nil || (d.Code != codes.ResourceExhausted && d.Code != codes.Unavailable) {
		return false
	}
	delay, ok := d.RetryDelay()
	if !ok {
		return false
	}
	if deadline, has := ctx.Deadline(); has && !time.Now().Add(delay).Before(deadline) {
		return false
	}
	if p.observe != nil {
		p.observe(d, delay)
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// unary is the client interceptor that retries every unary call.
func (p retryPolicy) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !p.wait(ctx, err, attempt) {
			return err
		}
	}
}

// openStream starts a server stream and reads its first message, retrying
// refusals: a stream is retried only before anything arrived.
func openStream[T any](ctx context.Context, p retryPolicy, start func(context.Context) (grpc.ServerStreamingClient[T], error)) (grpc.ServerStreamingClient[T], *T, error) {
	for attempt := 1; ; attempt++ {
		stream, err := start(ctx)
		if err == nil {
			var first *T
			if first, err = stream.Recv(); err == nil || err == io.EOF {
				return stream, first, err
			}
		}
		if !p.wait(ctx, err, attempt) {
			return nil, nil, err
		}
	}
}
