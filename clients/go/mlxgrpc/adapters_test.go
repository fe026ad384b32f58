package mlxgrpc_test

// Adapters against the live server: it starts with adapter "tone" on "llama";
// MLXGRPC_ADAPTER_DIR is another adapter directory on the server.

import (
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func tokens(t *testing.T, evs []*pb.GenerateResponse) []int32 {
	t.Helper()
	var ids []int32
	for _, ev := range evs {
		ids = append(ids, ev.GetDelta().GetTokenIds()...)
	}
	return ids
}

func TestGenerateWithAnAdapter(t *testing.T) {
	c, ctx := live(t)
	adapters, err := c.Adapters(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(adapters, func(a *pb.AdapterInfo) bool { return a.GetName() == "tone" }) {
		t.Fatalf("adapters = %v, want tone", adapters)
	}
	req := &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "The quick brown fox"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(8)},
	}
	base := tokens(t, collect(t, c, ctx, req))
	req.Adapter = "tone"
	tuned := tokens(t, collect(t, c, ctx, req))
	if len(tuned) != 8 || slices.Equal(tuned, base) {
		t.Errorf("with adapter %v, base %v: want 8 other tokens", tuned, base)
	}
	req.Adapter = "no-such-adapter"
	for _, err := range c.Generate(ctx, req) {
		if d := mlxgrpc.Details(err); err != nil && (d.Code != codes.NotFound || d.ErrorInfo.GetReason() != "ADAPTER_NOT_FOUND") {
			t.Errorf("unknown adapter: %v", err)
		}
	}
}

func TestLoadAndUnloadAnAdapter(t *testing.T) {
	c, ctx := live(t)
	dir := os.Getenv("MLXGRPC_ADAPTER_DIR")
	if dir == "" {
		t.Skip("MLXGRPC_ADAPTER_DIR is not set")
	}
	loaded, err := c.LoadAdapterDir(ctx, "", "go-client", dir)
	if err != nil {
		t.Fatal(err)
	}
	if a := loaded.GetAdapter(); a.GetName() != "go-client" || a.GetKind() != pb.AdapterKind_ADAPTER_KIND_LORA || a.GetBytes() <= 0 {
		t.Errorf("loaded %v", a)
	}
	out := tokens(t, collect(t, c, ctx, &pb.GenerateRequest{
		Prompt: &pb.GenerateRequest_Text{Text: "Hello"}, Adapter: "go-client",
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(4)},
	}))
	if len(out) != 4 {
		t.Errorf("tokens %v, want 4", out)
	}
	gone, err := c.UnloadAdapterByName(ctx, "", "go-client")
	if err != nil || gone.GetName() != "go-client" {
		t.Fatalf("unload: %v, %v", gone, err)
	}
	_, err = c.LoadAdapterDir(ctx, "", "nothing", "/nonexistent/adapter")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"path"}) {
		t.Errorf("bad directory: %v", err)
	}
}
