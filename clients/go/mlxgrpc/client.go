// Package mlxgrpc is a thin Go client for the mlx-grpc inference server.
//
// The generated stubs live in mlxgrpc.dev/go/mlxgrpc/v1 (package mlxgrpcv1).
// Client embeds the generated InferenceServiceClient, so every RPC is
// available as generated; this package only adds connection options
// (TLS, bearer token, default deadline), retries of calls the server refused
// for now with RetryInfo, Generate with a client-side request id as a
// range-over-func iterator or collected at once, Embed collected in input
// order, packed Embed decoded into slices (EmbedPacked, DecodeEmbeddings), Rerank and
// Classify with the client's default priority, EmbedSparse as SparseVectors in input
// order, Transcribe (speech to text) as an iterator of its events or collected into a
// Transcript, with AudioFile and AudioData building its audio, truncation constants
// (TruncationEnd, TruncationNone), adapter helpers (Adapters, LoadAdapterDir,
// UnloadAdapterByName), prefix-cache helpers (PrefetchFor, CloseSessionByID), models
// loaded and unloaded at run time (LoadModel with its progress, LoadModelProgress,
// UnloadModel, ModelStatuses, KeepAlive) and google.rpc error details.
package mlxgrpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Option configures Connect.
type Option func(*options) error

type options struct {
	creds    credentials.TransportCredentials
	token    string
	timeout  time.Duration
	retry    retryPolicy
	dial     []grpc.DialOption
	priority int32
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

// WithMaxAttempts sets how many attempts in all a call gets when the server
// refuses it with RESOURCE_EXHAUSTED or UNAVAILABLE and a RetryInfo (default 3;
// 1 turns retrying off). Each retry waits the delay the server asked for, only
// before the first response, never past the deadline, with the same request.
func WithMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("mlxgrpc: max attempts must be at least 1, not %d", n)
		}
		o.retry.maxAttempts = n
		return nil
	}
}

// WithRetryObserver calls f before each retry with the refusal and the delay.
func WithRetryObserver(f func(refusal *ErrorDetails, delay time.Duration)) Option {
	return func(o *options) error { o.retry.observe = f; return nil }
}

// WithDialOptions passes extra options to grpc.NewClient.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dial = append(o.dial, opts...); return nil }
}

// Client is a connection to an mlx-grpc server. The embedded generated client
// gives direct access to every RPC (Cancel, Tokenize, ListModels, ...);
// Generate, Embed, Rerank, Classify, EmbedSparse, Transcribe, LoadModel and
// UnloadModel are overridden by the friendlier forms below (the generated ones stay
// reachable as c.InferenceServiceClient.Transcribe, ...).
type Client struct {
	pb.InferenceServiceClient
	conn     *grpc.ClientConn
	timeout  time.Duration
	retry    retryPolicy
	priority int32 // of requests that set none (WithPriority)
}

// Connect creates a client for address ("host:port"). Without WithTLS the
// connection is plaintext. The connection is made lazily on the first call.
func Connect(address string, opts ...Option) (*Client, error) {
	o := options{creds: insecure.NewCredentials(), retry: retryPolicy{maxAttempts: 3}}
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
	dial = append(dial, grpc.WithChainUnaryInterceptor(o.retry.unary)) // inside the timeout: it covers retries
	conn, err := grpc.NewClient(address, append(dial, o.dial...)...)
	if err != nil {
		return nil, err
	}
	return &Client{InferenceServiceClient: pb.NewInferenceServiceClient(conn), conn: conn, timeout: o.timeout, retry: o.retry,
		priority: o.priority}, nil
}

// Conn returns the underlying connection (for health checks, reflection, ...).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Embed embeds req.Inputs and returns one response per input, ordered by
// index (the server streams them in completion order). An input longer than
// the model's limit is cut (Tokens says how many were used) unless
// req.Truncate is TruncationNone: then the call fails with INVALID_ARGUMENT
// naming the input. A refusal with RetryInfo before the first response is
// retried like any other call. With req.Packed the responses are the server's
// packed messages as they came: EmbedPacked decodes them.
func (c *Client) Embed(ctx context.Context, req *pb.EmbedRequest, opts ...grpc.CallOption) ([]*pb.EmbedResponse, error) {
	req = c.embedRequest(req)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream, first, err := openStream(ctx, c.retry, func(ctx context.Context) (grpc.ServerStreamingClient[pb.EmbedResponse], error) {
		return c.InferenceServiceClient.Embed(ctx, req, opts...)
	})
	if err == io.EOF {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := []*pb.EmbedResponse{first}
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

// callContext applies the default timeout to ctx when it has no deadline, so
// that one deadline covers every attempt of a streaming call.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// CancelByID cancels a running or queued Generate, Embed, Rerank, Classify,
// EmbedSparse or Transcribe by its request id (Generation.RequestID,
// Transcription.RequestID). It reports whether such a request was found (a cancelled
// Embed, Rerank, Classify or EmbedSparse, or a queued Transcribe, then ends with
// codes.Canceled).
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

// ModelLoads reports how busy each generation model is (an empty name: every
// one; otherwise that model): running and waiting requests, KV-cache bytes
// against the memory budget, the prefix cache, recent tokens per second, and
// per tenant (ModelLoad.Tenants, one TenantLoad per tenant with requests; a
// caller without the admin role sees only its own).
// The raw GetLoad RPC (with the server's uptime) stays available.
func (c *Client) ModelLoads(ctx context.Context, model string) ([]*pb.ModelLoad, error) {
	r, err := c.GetLoad(ctx, &pb.GetLoadRequest{Model: model})
	return r.GetModels(), err
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
