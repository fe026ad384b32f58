package mlxgrpc_test

// Tests against a live server at MLXGRPC_ADDRESS (skipped when it is unset, a
// failure under MLXGRPC_REQUIRE_LIVE=1). They discover the models with
// ListModels, so any server will do: the default one or the test fixture.

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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
	embedder  *pb.ModelInfo // nil when none is served
}

// unavailable skips the test, or fails it under MLXGRPC_REQUIRE_LIVE=1.
func unavailable(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("MLXGRPC_REQUIRE_LIVE") == "1" {
		t.Fatalf("%s (MLXGRPC_REQUIRE_LIVE=1)", reason)
	}
	t.Skip(reason)
}

func live(t *testing.T, opts ...mlxgrpc.Option) *server {
	t.Helper()
	addr := os.Getenv("MLXGRPC_ADDRESS")
	if addr == "" {
		unavailable(t, "MLXGRPC_ADDRESS is not set")
	}
	c, err := mlxgrpc.Connect(addr, append([]mlxgrpc.Option{mlxgrpc.WithDefaultTimeout(2 * time.Minute)}, opts...)...)
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
		if m.GetKind() == pb.ModelKind_MODEL_KIND_EMBEDDING && s.embedder == nil {
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

func TestGenerateGreedyIsDeterministic(t *testing.T) {
	s := live(t)
	var runs [2][]int32
	for i := range runs {
		evs := events(t, s, text("The quick brown fox", exact(8)))
		if len(evs) < 3 {
			t.Fatalf("run %d: %d events, want started, deltas, finished", i, len(evs))
		}
		started := evs[0].GetStarted()
		if started.GetPromptTokens() <= 0 || started.GetRequestId() == "" || started.GetModel() != s.generator.GetName() {
			t.Errorf("run %d: started = %v", i, started)
		}
		fin := evs[len(evs)-1].GetFinished()
		if fin.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH || fin.GetUsage().GetCompletionTokens() != 8 {
			t.Errorf("run %d: finished = %v", i, fin)
		}
		for _, ev := range evs[1 : len(evs)-1] {
			if ev.GetDelta() == nil {
				t.Fatalf("run %d: middle event %T, want delta", i, ev.Event)
			}
			runs[i] = append(runs[i], ev.GetDelta().GetTokenIds()...)
		}
		for _, id := range runs[i] {
			if id < 0 || id >= s.generator.GetVocabSize() {
				t.Errorf("run %d: token id %d out of vocab", i, id)
			}
		}
	}
	if len(runs[0]) != 8 || !slices.Equal(runs[0], runs[1]) {
		t.Errorf("greedy runs: %v vs %v", runs[0], runs[1])
	}
}

func TestCollectIsTheUnaryForm(t *testing.T) {
	s := live(t)
	gen := s.c.Generate(s.ctx, text("The quick brown fox", exact(6)))
	r, err := gen.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestID != gen.RequestID || r.Started.GetRequestId() != gen.RequestID || len(r.TokenIDs) != 6 {
		t.Errorf("result %+v for request %s", r, gen.RequestID)
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH || r.Finished.GetUsage().GetCompletionTokens() != 6 {
		t.Errorf("finished %v", r.Finished)
	}
	detok, err := s.c.Detokenize(s.ctx, &pb.DetokenizeRequest{TokenIds: r.TokenIDs})
	if err != nil || detok.GetText() != r.Text {
		t.Errorf("text %q, detokenized %q (%v)", r.Text, detok.GetText(), err)
	}
}

func TestGenerateChatAndLogprobs(t *testing.T) {
	s := live(t)
	if !s.generator.GetHasChatTemplate() {
		t.Skipf("%s has no chat template", s.generator.GetName())
	}
	r, err := s.c.Generate(s.ctx, &pb.GenerateRequest{
		Prompt:            &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "Hello"}}}},
		Stopping:          exact(4),
		TopLogprobs:       2,
		Logprobs:          true,
		Sampling:          &pb.SamplingParams{Temperature: proto.Float32(0.8), Seed: proto.Uint64(7)},
		SessionId:         "go-test",
		BypassPrefixCache: true,
	}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Logprobs) != 4 || len(r.TokenIDs) != 4 {
		t.Fatalf("%d logprobs for %d tokens, want 4", len(r.Logprobs), len(r.TokenIDs))
	}
	for i, lp := range r.Logprobs {
		if lp.GetTokenId() != r.TokenIDs[i] || lp.GetLogprob() > 0 || len(lp.GetTopLogprobs()) != 2 {
			t.Errorf("bad logprob %v for token %d", lp, r.TokenIDs[i])
		}
	}
	plain, err := s.c.Tokenize(s.ctx, &pb.TokenizeRequest{Text: "Hello"})
	if err != nil || int(r.Started.GetPromptTokens()) <= len(plain.GetTokenIds()) {
		t.Errorf("chat prompt %d tokens vs plain %d (%v): the template adds some", r.Started.GetPromptTokens(), len(plain.GetTokenIds()), err)
	}
}

func TestTokenizeDetokenizeRoundTrip(t *testing.T) {
	s := live(t)
	const text = "Hello, world! The stock market crashed today."
	tok, err := s.c.Tokenize(s.ctx, &pb.TokenizeRequest{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.GetTokenIds()) == 0 || len(tok.GetTokens()) != len(tok.GetTokenIds()) {
		t.Fatalf("tokenize: %d ids, %d tokens", len(tok.GetTokenIds()), len(tok.GetTokens()))
	}
	detok, err := s.c.Detokenize(s.ctx, &pb.DetokenizeRequest{TokenIds: tok.GetTokenIds(), SkipSpecialTokens: true})
	if err != nil || detok.GetText() != text {
		t.Errorf("round trip = %q (%v), want %q", detok.GetText(), err, text)
	}
}

func TestEmbedSimilarity(t *testing.T) {
	s := live(t)
	if s.embedder == nil {
		unavailable(t, "the server has no embedding model")
	}
	inputs := []string{"A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."}
	embs, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	if len(embs) != len(inputs) {
		t.Fatalf("%d responses for %d inputs", len(embs), len(inputs))
	}
	for i, e := range embs {
		if int(e.GetIndex()) != i || len(e.GetEmbedding()) != int(s.embedder.GetEmbeddingDimensions()) || e.GetTokens() <= 0 {
			t.Errorf("response %d: index %d, %d dims, %d tokens", i, e.GetIndex(), len(e.GetEmbedding()), e.GetTokens())
		}
		if n := math.Sqrt(dot(e.GetEmbedding(), e.GetEmbedding())); math.Abs(n-1) > 1e-3 {
			t.Errorf("input %d: L2 norm %f, want 1", i, n)
		}
	}
	similar, unrelated := dot(embs[0].GetEmbedding(), embs[1].GetEmbedding()), dot(embs[0].GetEmbedding(), embs[2].GetEmbedding())
	if similar <= unrelated+0.2 {
		t.Errorf("similar sentences %f, unrelated %f", similar, unrelated)
	}
	short, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs[:1], Dimensions: 64})
	if err != nil {
		t.Fatal(err)
	}
	if v := short[0].GetEmbedding(); len(v) != 64 || math.Abs(math.Sqrt(dot(v, v))-1) > 1e-3 {
		t.Errorf("dimensions=64: len %d norm %f", len(v), math.Sqrt(dot(v, v)))
	}
}

func TestInvalidTemperatureDetails(t *testing.T) {
	s := live(t)
	req := text("hi", nil)
	req.Sampling = &pb.SamplingParams{Temperature: proto.Float32(-1)}
	_, err := s.c.Generate(s.ctx, req).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.InvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	if !slices.Equal(d.Fields(), []string{"sampling.temperature"}) {
		t.Errorf("field violations %v, want sampling.temperature", d.Fields())
	}
	if ei := d.ErrorInfo; ei.GetDomain() != "mlxgrpc.v1" || ei.GetReason() != "INVALID_FIELD" || ei.GetMetadata()["field"] != "sampling.temperature" {
		t.Errorf("ErrorInfo = %v", ei)
	}
	if _, ok := d.RetryDelay(); ok {
		t.Error("RetryInfo on an invalid request")
	}
}

func TestUnknownModelIsNotFound(t *testing.T) {
	s := live(t)
	_, err := s.c.ModelInfo(s.ctx, "no-such-model")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.NotFound {
		t.Errorf("GetModelInfo: %v, want NotFound", err)
	}
	req := text("hi", nil)
	req.Model = "no-such-model"
	if _, err := s.c.Generate(s.ctx, req).Collect(); mlxgrpc.Details(err) == nil || mlxgrpc.Details(err).Code != codes.NotFound {
		t.Errorf("Generate: %v, want NotFound", err)
	}
}

func TestCancelRPCFromAnotherGoroutine(t *testing.T) {
	s := live(t)
	gen := s.c.Generate(s.ctx, text("Once upon a time", exact(2000)))
	// The id is known before anything was sent: cancel as soon as the server has the request.
	found := make(chan bool, 1)
	go func() {
		for range 200 {
			if ok, err := s.c.CancelByID(s.ctx, gen.RequestID); err != nil || ok {
				found <- ok
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		found <- false
	}()
	r, err := gen.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if !<-found {
		t.Fatal("Cancel never found the request")
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_CANCELLED || len(r.TokenIDs) >= 2000 {
		t.Errorf("finished %v after %d tokens, want CANCELLED", r.Finished, len(r.TokenIDs))
	}
	if int(r.Finished.GetUsage().GetCompletionTokens()) != len(r.TokenIDs) {
		t.Errorf("%d tokens streamed, usage %v", len(r.TokenIDs), r.Finished.GetUsage())
	}
	if ok, err := s.c.CancelByID(s.ctx, gen.RequestID); err != nil || ok {
		t.Errorf("second Cancel = %v, %v; want false", ok, err)
	}
}

func TestCancelClientSide(t *testing.T) {
	s := live(t)
	req := text("Once upon a time", exact(2000))
	cctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var deltas int
	var last error
	for ev, err := range s.c.Generate(cctx, req).Events() {
		if err != nil {
			last = err
			break
		}
		if ev.GetFinished() != nil {
			t.Fatalf("stream finished (%s) despite cancellation", ev.GetFinished().GetReason())
		}
		if ev.GetDelta() != nil {
			if deltas++; deltas == 3 {
				cancel()
			}
		}
	}
	if d := mlxgrpc.Details(last); d == nil || d.Code != codes.Canceled {
		t.Errorf("after cancel: %v, want Canceled", last)
	}

	// Breaking out of the loop also cancels the call: the server drops the request.
	gen := s.c.Generate(s.ctx, req)
	for ev, err := range gen.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetDelta() != nil {
			break
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for ok, _ := s.c.CancelByID(s.ctx, gen.RequestID); ok; ok, _ = s.c.CancelByID(s.ctx, gen.RequestID) {
		if time.Now().After(deadline) {
			t.Fatal("request still running 5 s after the loop was left")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestModelInfoAndPlan(t *testing.T) {
	s := live(t)
	info, err := s.c.ModelInfo(s.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != s.models[0].GetName() || info.GetVocabSize() <= 0 || info.GetContextLength() <= 0 {
		t.Errorf("info = name %q vocab %d context %d", info.GetName(), info.GetVocabSize(), info.GetContextLength())
	}
	if !info.GetCapabilities().GetGeneration() || info.GetKind() != pb.ModelKind_MODEL_KIND_GENERATION {
		t.Errorf("capabilities %v kind %s", info.GetCapabilities(), info.GetKind())
	}
	if s.embedder != nil && (s.embedder.GetEmbeddingDimensions() <= 0 || !s.embedder.GetCapabilities().GetEmbeddings()) {
		t.Errorf("embedding model %v", s.embedder)
	}
	plan, err := s.c.PlanMemory(s.ctx, &pb.PlanMemoryRequest{Model: info.GetName(), ContextTokens: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if m := plan.GetPlan().GetMaxSafeContext(); m <= 0 || m > int64(info.GetContextLength()) {
		t.Errorf("max_safe_context %d, context length %d", m, info.GetContextLength())
	}
}

func TestDetailsOfNonStatusError(t *testing.T) {
	if mlxgrpc.Details(nil) != nil || mlxgrpc.Details(errors.New("plain")) != nil {
		t.Error("Details of a non-status error should be nil")
	}
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
