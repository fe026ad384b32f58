package mlxgrpc_test

// Helpers of the tests against a live server at MLXGRPC_ADDRESS (skipped when it is
// unset, a failure under MLXGRPC_REQUIRE_LIVE=1). They discover the models with
// ListModels, so any server will do: the default one or the test fixture. Every
// client they connect sends MLXGRPC_TOKEN when it is set (a server with a tokens
// file; the adapter tests need the admin role).

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

type server struct {
	c         *mlxgrpc.Client
	ctx       context.Context
	address   string
	models    []*pb.ModelInfo
	generator *pb.ModelInfo // the default generation model (listed first)
	embedder  *pb.ModelInfo // the first that embeds (not a reranker); nil when none is served
}

// unavailable skips the test, or fails it under MLXGRPC_REQUIRE_LIVE=1.
func unavailable(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("MLXGRPC_REQUIRE_LIVE") == "1" {
		t.Fatalf("%s (MLXGRPC_REQUIRE_LIVE=1)", reason)
	}
	t.Skip(reason)
}

// token is the live server's bearer token, $MLXGRPC_TOKEN ("": none, a server without tokens).
func token() mlxgrpc.Option { return mlxgrpc.WithToken(os.Getenv("MLXGRPC_TOKEN")) }

func live(t *testing.T, opts ...mlxgrpc.Option) *server {
	t.Helper()
	addr := os.Getenv("MLXGRPC_ADDRESS")
	if addr == "" {
		unavailable(t, "MLXGRPC_ADDRESS is not set")
	}
	c, err := mlxgrpc.Connect(addr, append([]mlxgrpc.Option{token(), mlxgrpc.WithDefaultTimeout(2 * time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	list, err := c.ListModels(ctx, &pb.ListModelsRequest{})
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	s := &server{c: c, ctx: ctx, address: addr, models: list.GetModels()}
	for _, m := range s.models {
		if m.GetKind() == pb.ModelKind_MODEL_KIND_GENERATION && s.generator == nil {
			s.generator = m
		}
		if m.GetKind() == pb.ModelKind_MODEL_KIND_EMBEDDING && m.GetCapabilities().GetEmbeddings() && s.embedder == nil {
			s.embedder = m
		}
	}
	if s.generator == nil {
		unavailable(t, "the server has no generation model")
	}
	return s
}

// exact makes a generation produce exactly n tokens on any model.
func exact(n int32) *pb.StoppingCriteria {
	return &pb.StoppingCriteria{MaxTokens: proto.Int32(n), IgnoreEos: true}
}

func text(prompt string, stopping *pb.StoppingCriteria) *pb.GenerateRequest {
	return &pb.GenerateRequest{Prompt: &pb.GenerateRequest_Text{Text: prompt}, Stopping: stopping}
}

// events drains a generation into its events.
func events(t *testing.T, s *server, req *pb.GenerateRequest) []*pb.GenerateResponse {
	t.Helper()
	var evs []*pb.GenerateResponse
	for ev, err := range s.c.Generate(s.ctx, req).Events() {
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}
