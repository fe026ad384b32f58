package mlxgrpc_test

// Prefetch and CloseSession: PrefetchFor sends the prompt, model, session and adapter
// of a GenerateRequest, and both are retried like the other unary calls (offline);
// against a live server, a session's Generate leaves a prefix that Prefetch finds in
// memory, and closing the session releases its entries once.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// sessionPrompt is about forty words: a prompt whose prefix the prefix cache keeps
// after a Generate.
const sessionPrompt = "The old lighthouse keeper climbed the winding stairs every evening at dusk, " +
	"trimmed the wick, polished the great lens and watched the fishing boats return along the rocky " +
	"coast, writing each name in a worn leather logbook that his grandfather had started long ago."

// sessions is an in-process InferenceService that records Prefetch and CloseSession
// requests, refusing them `refusals` times first.
type sessions struct {
	refusing
	mu       sync.Mutex
	prefetch []*pb.PrefetchRequest
	closed   []*pb.CloseSessionRequest
}

func (s *sessions) Prefetch(_ context.Context, req *pb.PrefetchRequest) (*pb.PrefetchResponse, error) {
	s.mu.Lock()
	s.prefetch = append(s.prefetch, req)
	s.mu.Unlock()
	if err := s.refuse("prefetch"); err != nil {
		return nil, err
	}
	return &pb.PrefetchResponse{PromptTokens: 10, CachedTokens: 8, Tier: pb.CacheTier_CACHE_TIER_DISK}, nil
}

func (s *sessions) CloseSession(_ context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	s.mu.Lock()
	s.closed = append(s.closed, req)
	s.mu.Unlock()
	if err := s.refuse("close"); err != nil {
		return nil, err
	}
	if req.GetSessionId() == "open" {
		return &pb.CloseSessionResponse{Entries: 2}, nil
	}
	return &pb.CloseSessionResponse{}, nil
}

func TestPrefetchAndCloseSessionReachTheServer(t *testing.T) {
	fake := &sessions{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	chat := &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "hi"}}}
	req := &pb.GenerateRequest{Model: "m", SessionId: "open", Adapter: "tone", Prompt: &pb.GenerateRequest_Chat{Chat: chat},
		Stopping: exact(4), RequestId: "r-1"}
	r, err := c.PrefetchFor(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.PrefetchResponse{PromptTokens: 10, CachedTokens: 8, Tier: pb.CacheTier_CACHE_TIER_DISK}
	if !proto.Equal(r, want) {
		t.Errorf("PrefetchFor = %v, want %v", r, want)
	}
	for _, p := range []*pb.GenerateRequest{text("some text", nil), {Prompt: &pb.GenerateRequest_Tokens{Tokens: &pb.TokenIds{Ids: []int32{1, 2}}}}} {
		if _, err := c.PrefetchFor(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Refused once, retried with the same request; only the prompt, model, session and adapter go.
	sent := &pb.PrefetchRequest{Model: "m", SessionId: "open", Adapter: "tone", Prompt: &pb.PrefetchRequest_Chat{Chat: chat}}
	if len(fake.prefetch) != 4 || !proto.Equal(fake.prefetch[0], sent) || !proto.Equal(fake.prefetch[1], sent) {
		t.Fatalf("the server saw %v, want %v twice", fake.prefetch, sent)
	}
	if fake.prefetch[2].GetText() != "some text" || len(fake.prefetch[3].GetTokens().GetIds()) != 2 {
		t.Errorf("text and token prompts arrived as %v", fake.prefetch[2:])
	}
	if n, err := c.CloseSessionByID(ctx, "", "open"); n != 2 || err != nil {
		t.Errorf("CloseSessionByID(open) = %d, %v; want 2", n, err)
	}
	if n, err := c.CloseSessionByID(ctx, "m", "other"); n != 0 || err != nil {
		t.Errorf("CloseSessionByID(other) = %d, %v; want 0", n, err)
	}
	if len(fake.closed) != 2 || fake.closed[0].GetSessionId() != "open" || fake.closed[1].GetModel() != "m" {
		t.Errorf("the server saw %v", fake.closed)
	}
	if req.GetRequestId() != "r-1" || req.GetStopping().GetMaxTokens() != 4 {
		t.Errorf("the caller's request was modified: %v", req)
	}
}

func TestPrefetchAndCloseSession(t *testing.T) {
	s := live(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	session := "go-" + hex.EncodeToString(b[:])
	req := text(sessionPrompt, exact(4))
	req.SessionId = session
	generated, err := s.c.Generate(s.ctx, req).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(generated.TokenIDs) != 4 {
		t.Fatalf("generated %d tokens, want 4", len(generated.TokenIDs))
	}
	p, err := s.c.PrefetchFor(s.ctx, req) // the prefix that Generate stored
	if err != nil {
		t.Fatal(err)
	}
	if p.GetPromptTokens() != generated.Started.GetPromptTokens() {
		t.Errorf("prefetch read %d prompt tokens, Generate %d", p.GetPromptTokens(), generated.Started.GetPromptTokens())
	}
	if p.GetTier() != pb.CacheTier_CACHE_TIER_MEMORY || p.GetCachedTokens() <= 0 || p.GetCachedTokens() > p.GetPromptTokens()-1 {
		t.Errorf("prefetch = %v, want CACHE_TIER_MEMORY and 0 < cached_tokens < prompt_tokens", p)
	}
	if n, err := s.c.CloseSessionByID(s.ctx, "", session); err != nil || n < 1 {
		t.Errorf("CloseSessionByID = %d, %v; want >= 1", n, err)
	}
	if n, err := s.c.CloseSessionByID(s.ctx, "", session); err != nil || n != 0 {
		t.Errorf("CloseSessionByID again = %d, %v; want 0 (closed)", n, err)
	}
	_, err = s.c.Prefetch(s.ctx, &pb.PrefetchRequest{SessionId: session}) // no prompt
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument {
		t.Errorf("Prefetch without a prompt: %v, want InvalidArgument", err)
	}
}
