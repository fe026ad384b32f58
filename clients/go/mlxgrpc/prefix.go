package mlxgrpc

import (
	"context"

	"google.golang.org/grpc"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// PrefetchFor brings the longest stored prefix of the prompt req would send
// into the prefix cache's memory tier (from the disk tier if need be), ahead of
// client.Generate(ctx, req): the same Model, SessionId (the entry takes the
// session's affinity), prompt (Text, Tokens or Chat, templated as Generate
// would) and Adapter; nothing is generated. The response has PromptTokens,
// CachedTokens (at most PromptTokens-1) and Tier: CACHE_TIER_MEMORY,
// CACHE_TIER_DISK, or CACHE_TIER_UNSPECIFIED when nothing of the prompt is
// stored. A request without a prompt is INVALID_ARGUMENT; the prefix cache
// switched off is FAILED_PRECONDITION. req is not modified; a refusal with
// RetryInfo is retried like any other call. The embedded Prefetch takes a
// pb.PrefetchRequest as it is.
//
//	req := &pb.GenerateRequest{Prompt: &pb.GenerateRequest_Text{Text: doc}, SessionId: "chat-42"}
//	p, err := client.PrefetchFor(ctx, req) // p.GetTier(), p.GetCachedTokens()
//	result, err := client.Generate(ctx, req).Collect()
func (c *Client) PrefetchFor(ctx context.Context, req *pb.GenerateRequest, opts ...grpc.CallOption) (*pb.PrefetchResponse, error) {
	return c.Prefetch(ctx, prefetchRequest(req), opts...)
}

// CloseSessionByID ends a session (the SessionId its Generate requests named)
// on model ("" selects the default generation model): the prefix-cache entries
// its requests stored lose their eviction affinity; nothing is deleted. It
// returns how many entries did (0: no such open session).
func (c *Client) CloseSessionByID(ctx context.Context, model, sessionID string) (int32, error) {
	r, err := c.CloseSession(ctx, &pb.CloseSessionRequest{Model: model, SessionId: sessionID})
	return r.GetEntries(), err
}

// prefetchRequest is the PrefetchRequest of the prompt req sends.
func prefetchRequest(req *pb.GenerateRequest) *pb.PrefetchRequest {
	out := &pb.PrefetchRequest{Model: req.GetModel(), SessionId: req.GetSessionId(), Adapter: req.GetAdapter()}
	switch p := req.GetPrompt().(type) {
	case *pb.GenerateRequest_Text:
		out.Prompt = &pb.PrefetchRequest_Text{Text: p.Text}
	case *pb.GenerateRequest_Tokens:
		out.Prompt = &pb.PrefetchRequest_Tokens{Tokens: p.Tokens}
	case *pb.GenerateRequest_Chat:
		out.Prompt = &pb.PrefetchRequest_Chat{Chat: p.Chat}
	}
	return out
}
