// Package mlxgrpc is a thin Go client for the mlx-grpc inference server.
//
// The generated stubs live in mlxgrpc.dev/go/mlxgrpc/v1 (package mlxgrpcv1).
// Client embeds the generated InferenceServiceClient, so every RPC is
// available as generated; this package only adds connection options
// (TLS, bearer token, default deadline), Generate as a range-over-func
// iterator, Embed collected in input order, adapter helpers (Adapters,
// LoadAdapterDir, UnloadAdapterByName) and google.rpc error details.
package mlxgrpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"iter"
	"os"
	"sort"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Option configures Connect.
type Option func(*options) error

type options struct {
	creds   credentials.TransportCredentials
	token   string
	timeout time.Duration
	dial    []grpc.DialOption
}

// WithTLS uses TLS verified against the system roots, or against the PEM
// CA certificates in caFile when caFile is not empty.
func WithTLS(caFile string) Option {
	return func(o *options) error {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("mlxgrpc: reading CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("mlxgrpc: no PEM certificates in %s", caFile)
			}
			cfg.RootCAs = pool
		}
		o.creds = credentials.NewTLS(cfg)
		return nil
	}
}

// WithToken sends "authorization: Bearer <token>" with every call. The token is
// sent over plaintext connections too; use WithTLS for anything not local.
func WithToken(token string) Option {
	return func(o *options) error { o.token = token; return nil }
}

// WithDefaultTimeout sets the deadline of calls whose context has none
// (for streams it bounds the whole stream). Zero, the default, sets none.
func WithDefaultTimeout(d time.Duration) Option {
	return func(o *options) error { o.timeout = d; return nil }
}

// WithDialOptions passes extra options to grpc.NewClient.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dial = append(o.dial, opts...); return nil }
}

// Client is a connection to an mlx-grpc server. The embedded generated client
// gives direct access to every RPC (Cancel, Tokenize, ListModels, ...);
// Generate and Embed are overridden by the friendlier forms below.
type Client struct {
	pb.InferenceServiceClient
	conn *grpc.ClientConn
}

// Connect creates a client for address ("host:port"). Without WithTLS the
// connection is plaintext. The connection is made lazily on the first call.
func Connect(address string, opts ...Option) (*Client, error) {
	o := options{creds: insecure.NewCredentials()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(o.creds)}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	if o.timeout > 0 {
		dial = append(dial,
			grpc.WithChainUnaryInterceptor(unaryTimeout(o.timeout)),
			grpc.WithChainStreamInterceptor(streamTimeout(o.timeout)))
	}
	conn, err := grpc.NewClient(address, append(dial, o.dial...)...)
	if err != nil {
		return nil, err
	}
	return &Client{InferenceServiceClient: pb.NewInferenceServiceClient(conn), conn: conn}, nil
}

// Conn returns the underlying connection (for health checks, reflection, ...).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Generate streams the events of a generation: started, deltas, finished.
// The iterator yields (event, nil) per event and at most one (nil, err) at
// the end if the call fails. Breaking out of the loop, or cancelling ctx,
// cancels the call; the server then stops generating.
//
//	for ev, err := range client.Generate(ctx, req) {
//		if err != nil { ... }
//		fmt.Print(ev.GetDelta().GetText())
//	}
func (c *Client) Generate(ctx context.Context, req *pb.GenerateRequest, opts ...grpc.CallOption) iter.Seq2[*pb.GenerateResponse, error] {
	return func(yield func(*pb.GenerateResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.InferenceServiceClient.Generate(ctx, req, opts...)
		if err != nil {
			yield(nil, err)
			return
		}
		for {
			ev, err := stream.Recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Embed embeds req.Inputs and returns one response per input, ordered by
// index (the server streams them in completion order).
func (c *Client) Embed(ctx context.Context, req *pb.EmbedRequest, opts ...grpc.CallOption) ([]*pb.EmbedResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.InferenceServiceClient.Embed(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	var out []*pb.EmbedResponse
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetIndex() < out[j].GetIndex() })
	return out, nil
}

// CancelByID cancels a running or queued Generate or Embed by its request id
// (the one in the started event). It reports whether such a request was found.
func (c *Client) CancelByID(ctx context.Context, requestID string) (bool, error) {
	r, err := c.InferenceServiceClient.Cancel(ctx, &pb.CancelRequest{RequestId: requestID})
	return r.GetCancelled(), err
}

// ModelInfo describes a model; an empty name selects the default generation model.
func (c *Client) ModelInfo(ctx context.Context, model string) (*pb.ModelInfo, error) {
	r, err := c.GetModelInfo(ctx, &pb.GetModelInfoRequest{Model: model})
	return r.GetInfo(), err
}

// Adapters lists the adapters loaded on a model; an empty name selects the
// default generation model. Requests pick one with GenerateRequest.Adapter.
func (c *Client) Adapters(ctx context.Context, model string) ([]*pb.AdapterInfo, error) {
	r, err := c.ListAdapters(ctx, &pb.ListAdaptersRequest{Model: model})
	return r.GetAdapters(), err
}

// LoadAdapterDir loads the adapter directory dir (on the server, as mlx_lm.lora
// writes it) as name for model ("" selects the default generation model). The
// response carries the adapter's info and the adapters evicted to make room.
func (c *Client) LoadAdapterDir(ctx context.Context, model, name, dir string) (*pb.LoadAdapterResponse, error) {
	return c.LoadAdapter(ctx, &pb.LoadAdapterRequest{Model: model, Name: name, Path: dir})
}

// UnloadAdapterByName unloads an adapter. The server stops giving it to new
// requests at once and returns when the requests already using it have finished.
func (c *Client) UnloadAdapterByName(ctx context.Context, model, name string) (*pb.AdapterInfo, error) {
	r, err := c.UnloadAdapter(ctx, &pb.UnloadAdapterRequest{Model: model, Name: name})
	return r.GetAdapter(), err
}

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

// bearer is per-RPC credentials adding "authorization: Bearer <token>".
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so the token also works with plaintext
// (local) servers.
func (bearer) RequireTransportSecurity() bool { return false }

func unaryTimeout(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func streamTimeout(d time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if _, ok := ctx.Deadline(); ok {
			return streamer(ctx, desc, cc, method, opts...)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		return &cancelOnEnd{ClientStream: s, cancel: cancel}, nil
	}
}

// cancelOnEnd releases the timeout's timer once the stream has ended.
type cancelOnEnd struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *cancelOnEnd) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}
