package mlxgrpc_test

// Adapters against the live server: the default generation model's first loaded
// adapter (from ListAdapters) is used, and loaded again from its directory under
// another name. A server with no adapter loaded skips these (fails them under
// MLXGRPC_REQUIRE_LIVE=1).

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// loadedAdapter is the first adapter of the server's default generation model.
func loadedAdapter(t *testing.T, s *server) *pb.AdapterInfo {
	t.Helper()
	adapters, err := s.c.Adapters(s.ctx, "")
	if err != nil {
		t.Fatalf("ListAdapters: %v", err)
	}
	if len(adapters) == 0 {
		unavailable(t, "model "+s.generator.GetName()+" has no adapter loaded (serve it with --adapter NAME=DIR)")
	}
	return adapters[0]
}

func tokenIDs(t *testing.T, s *server, req *pb.GenerateRequest) []int32 {
	t.Helper()
	r, err := s.c.Generate(s.ctx, req).Collect()
	if err != nil {
		t.Fatalf("Generate with adapter %q: %v", req.GetAdapter(), err)
	}
	return r.TokenIDs
}

func TestGenerateWithAnAdapter(t *testing.T) {
	s := live(t)
	adapter := loadedAdapter(t, s)
	req := text("The quick brown fox", exact(8))
	base := tokenIDs(t, s, req)
	req.Adapter = adapter.GetName()
	tuned := tokenIDs(t, s, req)
	if len(tuned) != 8 || slices.Equal(tuned, base) {
		t.Errorf("with adapter %v, base %v: want 8 other tokens", tuned, base)
	}
	req.Adapter = "no-such-adapter"
	_, err := s.c.Generate(s.ctx, req).Collect()
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.NotFound || d.ErrorInfo.GetReason() != "ADAPTER_NOT_FOUND" {
		t.Errorf("unknown adapter: %v", err)
	}
}

func TestLoadAndUnloadAnAdapter(t *testing.T) {
	s := live(t)
	adapter := loadedAdapter(t, s)
	loaded, err := s.c.LoadAdapterDir(s.ctx, "", "go-client", adapter.GetSource())
	if err != nil {
		t.Fatal(err)
	}
	if a := loaded.GetAdapter(); a.GetName() != "go-client" || a.GetKind() != adapter.GetKind() || a.GetBytes() != adapter.GetBytes() {
		t.Errorf("loaded %v, from %v", a, adapter)
	}
	req := text("The quick brown fox", exact(8))
	req.Adapter = "go-client"
	again := tokenIDs(t, s, req)
	req.Adapter = adapter.GetName()
	if first := tokenIDs(t, s, req); !slices.Equal(again, first) {
		t.Errorf("the same weights under another name: %v vs %v", again, first)
	}
	gone, err := s.c.UnloadAdapterByName(s.ctx, "", "go-client")
	if err != nil || gone.GetName() != "go-client" {
		t.Fatalf("unload: %v, %v", gone, err)
	}
	after, err := s.c.Adapters(s.ctx, "")
	if err != nil || slices.ContainsFunc(after, func(a *pb.AdapterInfo) bool { return a.GetName() == "go-client" }) {
		t.Errorf("after unloading: %v, %v", after, err)
	}
	_, err = s.c.LoadAdapterDir(s.ctx, "", "nothing", "/nonexistent/adapter")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"path"}) {
		t.Errorf("bad directory: %v", err)
	}
}
