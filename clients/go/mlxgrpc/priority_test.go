package mlxgrpc_test

// Priority: the client's default and a request's own reach the server (offline),
// the tenant refusals are retried or not like the others (offline), and against
// the live server a priority never changes the output.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// priorities records the priority of every Generate and Embed it serves.
type priorities struct {
	refusing
	mu   sync.Mutex
	seen []int32
}

func (p *priorities) record(v int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, v)
}

func (p *priorities) Generate(req *pb.GenerateRequest, stream grpc.ServerStreamingServer[pb.GenerateResponse]) error {
	p.record(req.GetPriority())
	return p.refusing.Generate(req, stream)
}

func (p *priorities) Embed(req *pb.EmbedRequest, stream grpc.ServerStreamingServer[pb.EmbedResponse]) error {
	p.record(req.GetPriority())
	return stream.Send(&pb.EmbedResponse{Index: 0, Embedding: []float32{1}})
}

func TestPriorityReachesTheServer(t *testing.T) {
	p := &priorities{}
	addr := serveRefusing(t, p)
	ctx := context.Background()
	c, err := mlxgrpc.Connect(addr, mlxgrpc.WithPriority(-20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	own := &pb.GenerateRequest{Priority: 30}
	for _, req := range []*pb.GenerateRequest{{}, own} {
		if _, err := c.Generate(ctx, req).Collect(); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range []*pb.EmbedRequest{{Inputs: []string{"a"}}, {Inputs: []string{"a"}, Priority: 5}} {
		if _, err := c.Embed(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := mlxgrpc.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Generate(ctx, &pb.GenerateRequest{}).Collect(); err != nil {
		t.Fatal(err)
	}
	if want := []int32{-20, 30, -20, 5, 0}; !slices.Equal(p.seen, want) {
		t.Errorf("priorities %v, want %v", p.seen, want)
	}
	if own.GetPriority() != 30 || own.GetRequestId() != "" {
		t.Errorf("the caller's request was modified: %v", own)
	}
	for _, bad := range []int32{mlxgrpc.MaxPriority + 1, -mlxgrpc.MaxPriority - 1} {
		if _, err := mlxgrpc.Connect(addr, mlxgrpc.WithPriority(bad)); err == nil {
			t.Errorf("priority %d accepted", bad)
		}
	}
}

func TestTenantRefusals(t *testing.T) {
	limited := &refusing{refusals: 1, code: codes.ResourceExhausted, delay: 100 * time.Millisecond, reason: "TENANT_LIMIT"}
	var reasons []string
	c, err := mlxgrpc.Connect(serveRefusing(t, limited), mlxgrpc.WithRetryObserver(func(d *mlxgrpc.ErrorDetails, _ time.Duration) {
		reasons = append(reasons, d.ErrorInfo.GetReason())
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Generate(context.Background(), &pb.GenerateRequest{}).Collect(); err != nil || len(limited.ids) != 2 {
		t.Errorf("TENANT_LIMIT: %v after %d attempts", err, len(limited.ids))
	}
	if !slices.Equal(reasons, []string{"TENANT_LIMIT"}) {
		t.Errorf("retried for %v", reasons)
	}
	denied := &refusing{refusals: 5, code: codes.PermissionDenied, delay: 100 * time.Millisecond, reason: "ADMIN_ROLE_REQUIRED"}
	c2, err := mlxgrpc.Connect(serveRefusing(t, denied))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.ModelInfo(context.Background(), "m")
	if status.Code(err) != codes.PermissionDenied || len(denied.ids) != 1 {
		t.Errorf("ADMIN_ROLE_REQUIRED: %v after %d attempts", err, len(denied.ids))
	}
	if d := mlxgrpc.Details(err); d.ErrorInfo.GetReason() != "ADMIN_ROLE_REQUIRED" {
		t.Errorf("details %+v", d)
	}
}

func TestPriorityNeverChangesTheOutput(t *testing.T) {
	s := live(t)
	var first *mlxgrpc.Result
	for _, priority := range []int32{0, 10, -10} {
		req := text("The quick brown fox", exact(8)) // no sampling: greedy
		req.Priority = priority
		r, err := s.c.Generate(s.ctx, req).Collect()
		if err != nil {
			t.Fatalf("Generate with priority %d: %v", priority, err)
		}
		if first == nil {
			first = r
		} else if !slices.Equal(r.TokenIDs, first.TokenIDs) || r.Text != first.Text {
			t.Errorf("priority %d changed the output: %q, not %q", priority, r.Text, first.Text)
		}
	}
}
