package mlxgrpc_test

// Models at run time. Offline: LoadModel reports each step and returns the served
// model, a refusal before the first step is retried, a stream without SERVING is
// ErrLoadUnfinished, UnloadModel and ModelStatuses send and return what they should,
// KeepAlive reaches Generate and Embed. Live: the fixture's "llama" directory loaded
// again from the server's --model-root as "go-llama", used, listed and unloaded. A
// server without a model named "llama" (the default one never has it) skips that, even
// under MLXGRPC_REQUIRE_LIVE=1; one where LoadModel cannot run (no admin role, no
// --model-root) skips it too, and fails it under MLXGRPC_REQUIRE_LIVE=1.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

var loadStages = []pb.LoadStage{pb.LoadStage_LOAD_STAGE_RESOLVING, pb.LoadStage_LOAD_STAGE_PLANNING,
	pb.LoadStage_LOAD_STAGE_READING, pb.LoadStage_LOAD_STAGE_READING, pb.LoadStage_LOAD_STAGE_WARMING,
	pb.LoadStage_LOAD_STAGE_SERVING}

// lifecycle is an in-process InferenceService that loads and unloads nothing but
// answers as mlx-grpc does; LoadModel of source "partial" ends after RESOLVING.
type lifecycle struct {
	refusing
	mu       sync.Mutex
	loads    []*pb.LoadModelRequest
	unloads  []*pb.UnloadModelRequest
	generate []*pb.GenerateRequest
	embed    []*pb.EmbedRequest
}

func (l *lifecycle) LoadModel(req *pb.LoadModelRequest, stream grpc.ServerStreamingServer[pb.LoadModelResponse]) error {
	l.mu.Lock()
	l.loads = append(l.loads, req)
	l.mu.Unlock()
	if err := l.refuse("load"); err != nil {
		return err
	}
	for i, stage := range loadStages {
		step := &pb.LoadModelResponse{Stage: stage, ElapsedSeconds: 0.1 * float64(i)}
		switch stage {
		case pb.LoadStage_LOAD_STAGE_PLANNING:
			step.Evicted = []string{"idle-one"}
		case pb.LoadStage_LOAD_STAGE_READING:
			step.Done, step.Total = int64(5*(i-1)), 10
		case pb.LoadStage_LOAD_STAGE_SERVING:
			step.Model = &pb.ModelInfo{Name: req.GetName(), Kind: req.GetKind()}
		}
		if err := stream.Send(step); err != nil {
			return err
		}
		if req.GetSource() == "partial" {
			return nil
		}
	}
	return nil
}

func (l *lifecycle) UnloadModel(_ context.Context, req *pb.UnloadModelRequest) (*pb.UnloadModelResponse, error) {
	l.mu.Lock()
	l.unloads = append(l.unloads, req)
	l.mu.Unlock()
	if err := l.refuse("unload"); err != nil {
		return nil, err
	}
	return &pb.UnloadModelResponse{Name: req.GetName(), FreedBytes: 1234, State: pb.ModelState_MODEL_STATE_UNLOADED}, nil
}

func (l *lifecycle) ListModels(context.Context, *pb.ListModelsRequest) (*pb.ListModelsResponse, error) {
	return &pb.ListModelsResponse{
		Models: []*pb.ModelInfo{{Name: "ready"}},
		Statuses: []*pb.ModelStatus{{Name: "ready", State: pb.ModelState_MODEL_STATE_READY, ResidentBytes: 10},
			{Name: "lazy", State: pb.ModelState_MODEL_STATE_UNLOADED, OnDemand: true, KeepAliveSeconds: proto.Float64(30)}},
	}, nil
}

func (l *lifecycle) Generate(req *pb.GenerateRequest, stream grpc.ServerStreamingServer[pb.GenerateResponse]) error {
	l.mu.Lock()
	l.generate = append(l.generate, req)
	l.mu.Unlock()
	finished := &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_LENGTH}}
	return stream.Send(&pb.GenerateResponse{Event: finished})
}

func (l *lifecycle) Embed(req *pb.EmbedRequest, stream grpc.ServerStreamingServer[pb.EmbedResponse]) error {
	l.mu.Lock()
	l.embed = append(l.embed, req)
	l.mu.Unlock()
	return stream.Send(&pb.EmbedResponse{Embedding: []float32{1}})
}

func stagesOf(steps []*pb.LoadModelResponse) []pb.LoadStage {
	out := make([]pb.LoadStage, len(steps))
	for i, s := range steps {
		out[i] = s.GetStage()
	}
	return out
}

func TestLoadUnloadAndStatusesReachTheServer(t *testing.T) {
	fake := &lifecycle{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	var retries int
	c, err := mlxgrpc.Connect(serveRefusing(t, fake), mlxgrpc.WithRetryObserver(func(*mlxgrpc.ErrorDetails, time.Duration) { retries++ }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := &pb.LoadModelRequest{Name: "m", Source: "dir/m", Kind: pb.ModelKind_MODEL_KIND_EMBEDDING,
		Options: &pb.ModelOptions{ContextLength: 512}, KeepAliveSeconds: mlxgrpc.KeepAlive(0)}
	var steps []*pb.LoadModelResponse
	info, err := c.LoadModel(ctx, req, func(step *pb.LoadModelResponse) { steps = append(steps, step) })
	if err != nil || info.GetName() != "m" || info.GetKind() != pb.ModelKind_MODEL_KIND_EMBEDDING {
		t.Fatalf("LoadModel = %v, %v", info, err)
	}
	if !slices.Equal(stagesOf(steps), loadStages) || !slices.Equal(steps[1].GetEvicted(), []string{"idle-one"}) ||
		steps[2].GetDone() != 5 || steps[2].GetTotal() != 10 {
		t.Errorf("steps %v", steps)
	}
	// Refused once before the first step, retried with the same request.
	if retries != 1 || len(fake.loads) != 2 || !proto.Equal(fake.loads[0], req) || !proto.Equal(fake.loads[1], req) {
		t.Errorf("%d retries; the server saw %v, want %v twice", retries, fake.loads, req)
	}
	if fake.loads[0].KeepAliveSeconds == nil || fake.loads[0].GetKeepAliveSeconds() != 0 {
		t.Errorf("keep_alive_seconds 0 (unload once idle) did not arrive set: %v", fake.loads[0])
	}

	// Without a callback; the raw stream; a stream without SERVING.
	if info, err := c.LoadModel(ctx, &pb.LoadModelRequest{Name: "n", Source: "dir/n"}, nil); err != nil || info.GetName() != "n" {
		t.Errorf("LoadModel without onProgress = %v, %v", info, err)
	}
	var stages []pb.LoadStage
	for step, err := range c.LoadModelProgress(ctx, &pb.LoadModelRequest{Name: "p", Source: "dir/p"}) {
		if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, step.GetStage())
	}
	if !slices.Equal(stages, loadStages) {
		t.Errorf("LoadModelProgress stages %v", stages)
	}
	if _, err := c.LoadModel(ctx, &pb.LoadModelRequest{Name: "q", Source: "partial"}, nil); !errors.Is(err, mlxgrpc.ErrLoadUnfinished) {
		t.Errorf("a stream without SERVING: %v, want ErrLoadUnfinished", err)
	}

	gone, err := c.UnloadModel(ctx, "m", true)
	if err != nil || gone.GetName() != "m" || gone.GetFreedBytes() != 1234 || gone.GetState() != pb.ModelState_MODEL_STATE_UNLOADED {
		t.Errorf("UnloadModel = %v, %v", gone, err)
	}
	if _, err := c.UnloadModel(ctx, "n", false); err != nil {
		t.Fatal(err)
	}
	if len(fake.unloads) != 2 || !fake.unloads[0].GetCancelRequests() || fake.unloads[1].GetCancelRequests() {
		t.Errorf("the server saw %v", fake.unloads)
	}
	statuses, err := c.ModelStatuses(ctx)
	if err != nil || len(statuses) != 2 || statuses[0].GetState() != pb.ModelState_MODEL_STATE_READY ||
		statuses[1].GetName() != "lazy" || !statuses[1].GetOnDemand() || statuses[1].GetKeepAliveSeconds() != 30 {
		t.Errorf("ModelStatuses = %v, %v", statuses, err)
	}

	// keep_alive_seconds per request: the generated field, set or not.
	gen := text("hi", nil)
	gen.KeepAliveSeconds = mlxgrpc.KeepAlive(90 * time.Second)
	if _, err := c.Generate(ctx, gen).Collect(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(ctx, text("hi", nil)).Collect(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Embed(ctx, &pb.EmbedRequest{Inputs: []string{"a"}, KeepAliveSeconds: mlxgrpc.KeepAlive(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if fake.generate[0].GetKeepAliveSeconds() != 90 || fake.generate[1].KeepAliveSeconds != nil || fake.embed[0].GetKeepAliveSeconds() != -1 {
		t.Errorf("keep_alive_seconds arrived as %v, %v, %v", fake.generate[0], fake.generate[1], fake.embed[0])
	}
}

// Live: the fixture's "llama" loaded again at run time.

// llamaModel is the server's model named "llama", or skips the test: only the test
// fixture serves one, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func llamaModel(t *testing.T, s *server) *pb.ModelInfo {
	t.Helper()
	for _, m := range s.models {
		if m.GetName() == "llama" {
			return m
		}
	}
	t.Skipf("%s serves no model named \"llama\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

// loadingUnavailable skips (fails, under MLXGRPC_REQUIRE_LIVE=1) when err says this
// server loads nothing at run time for this caller.
func loadingUnavailable(t *testing.T, err error) {
	t.Helper()
	d := mlxgrpc.Details(err)
	switch {
	case d == nil:
	case d.Code == codes.PermissionDenied && d.ErrorInfo.GetReason() == "ADMIN_ROLE_REQUIRED":
		unavailable(t, "LoadModel needs the admin role here (PERMISSION_DENIED ADMIN_ROLE_REQUIRED): no token with it, and no --admin-loopback")
	case d.Code == codes.FailedPrecondition && d.ErrorInfo.GetReason() == "MODEL_ROOT_UNSET":
		unavailable(t, "the server has no --model-root: LoadModel is FAILED_PRECONDITION MODEL_ROOT_UNSET")
	}
}

func statusOf(t *testing.T, s *server, name string) *pb.ModelStatus {
	t.Helper()
	statuses, err := s.c.ModelStatuses(s.ctx)
	if err != nil {
		t.Fatalf("ModelStatuses: %v", err)
	}
	for _, st := range statuses {
		if st.GetName() == name {
			return st
		}
	}
	return nil
}

func TestLoadGenerateAndUnloadAModel(t *testing.T) {
	s := live(t)
	llama := llamaModel(t, s)
	var steps []*pb.LoadModelResponse
	info, err := s.c.LoadModel(s.ctx, &pb.LoadModelRequest{Name: "go-llama", Source: "llama"},
		func(step *pb.LoadModelResponse) { steps = append(steps, step) })
	if err != nil {
		loadingUnavailable(t, err)
		t.Fatalf("LoadModel: %v", err)
	}
	unloaded := false
	t.Cleanup(func() {
		if !unloaded {
			s.c.UnloadModel(context.Background(), "go-llama", true)
		}
	})
	if info.GetName() != "go-llama" || info.GetKind() != pb.ModelKind_MODEL_KIND_GENERATION || info.GetVocabSize() != llama.GetVocabSize() {
		t.Errorf("loaded %v", info)
	}
	stages := stagesOf(steps)
	if len(stages) == 0 || !slices.IsSorted(stages) || stages[len(stages)-1] != pb.LoadStage_LOAD_STAGE_SERVING ||
		slices.Index(stages, pb.LoadStage_LOAD_STAGE_SERVING) != len(stages)-1 {
		t.Errorf("stages %v: want them in order, SERVING last and once", stages)
	}
	if steps[len(steps)-1].GetModel().GetName() != "go-llama" {
		t.Errorf("last step %v", steps[len(steps)-1])
	}

	req := text("Hello", exact(4))
	req.Model = "go-llama"
	r, err := s.c.Generate(s.ctx, req).Collect()
	if err != nil || len(r.TokenIDs) != 4 || r.Started.GetModel() != "go-llama" {
		t.Fatalf("Generate on go-llama: %v, %v", r, err)
	}
	if st := statusOf(t, s, "go-llama"); st.GetState() != pb.ModelState_MODEL_STATE_READY || st.GetOnDemand() {
		t.Errorf("status of go-llama: %v, want READY", st)
	}

	gone, err := s.c.UnloadModel(s.ctx, "go-llama", false)
	unloaded = err == nil
	if err != nil || gone.GetName() != "go-llama" {
		t.Fatalf("UnloadModel = %v, %v", gone, err)
	}
	if st := statusOf(t, s, "go-llama"); st != nil && st.GetState() == pb.ModelState_MODEL_STATE_READY {
		t.Errorf("status after unloading: %v", st)
	}
	_, err = s.c.Generate(s.ctx, req).Collect()
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.NotFound {
		t.Errorf("Generate on the unloaded model: %v, want NotFound", err)
	}
}

func TestLoadingFromOutsideTheRootIsInvalid(t *testing.T) {
	s := live(t)
	llamaModel(t, s)
	_, err := s.c.LoadModel(s.ctx, &pb.LoadModelRequest{Name: "go-escape", Source: "../escape"}, nil)
	loadingUnavailable(t, err)
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"source"}) {
		t.Errorf("source ../escape: %v, want InvalidArgument on source", err)
	}
	if st := statusOf(t, s, "go-escape"); st != nil {
		t.Errorf("listed after a refused load: %v", st)
	}
}
