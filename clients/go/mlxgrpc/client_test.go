package mlxgrpc_test

// Tests against a live server at MLXGRPC_ADDRESS (skipped when it is unset),
// serving the "llama" fixture model (vocab 640, context 4096, greedy output
// deterministic) and the "all-minilm-l6-v2" embedding model.

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

func live(t *testing.T) (*mlxgrpc.Client, context.Context) {
	t.Helper()
	addr := os.Getenv("MLXGRPC_ADDRESS")
	if addr == "" {
		t.Skip("MLXGRPC_ADDRESS is not set")
	}
	c, err := mlxgrpc.Connect(addr, mlxgrpc.WithDefaultTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// collect drains a Generate stream into its events.
func collect(t *testing.T, c *mlxgrpc.Client, ctx context.Context, req *pb.GenerateRequest) []*pb.GenerateResponse {
	t.Helper()
	var evs []*pb.GenerateResponse
	for ev, err := range c.Generate(ctx, req) {
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestGenerateGreedyIsDeterministic(t *testing.T) {
	c, ctx := live(t)
	req := &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "The quick brown fox"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(8)},
	}
	var runs [2][]int32
	for i := range runs {
		evs := collect(t, c, ctx, req)
		if len(evs) < 3 {
			t.Fatalf("run %d: %d events, want started, deltas, finished", i, len(evs))
		}
		started := evs[0].GetStarted()
		if started == nil {
			t.Fatalf("run %d: first event is %T, want started", i, evs[0].Event)
		}
		if started.GetPromptTokens() <= 0 || started.GetRequestId() == "" || started.GetModel() != "llama" {
			t.Errorf("run %d: started = %v", i, started)
		}
		fin := evs[len(evs)-1].GetFinished()
		if fin == nil {
			t.Fatalf("run %d: last event is %T, want finished", i, evs[len(evs)-1].Event)
		}
		if fin.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH {
			t.Errorf("run %d: finish reason %s, want LENGTH", i, fin.GetReason())
		}
		if fin.GetUsage().GetCompletionTokens() != 8 || fin.GetUsage().GetPromptTokens() != started.GetPromptTokens() {
			t.Errorf("run %d: usage %v", i, fin.GetUsage())
		}
		for _, ev := range evs[1 : len(evs)-1] {
			d := ev.GetDelta()
			if d == nil {
				t.Fatalf("run %d: middle event %T, want delta", i, ev.Event)
			}
			runs[i] = append(runs[i], d.GetTokenIds()...)
		}
		if len(runs[i]) != 8 {
			t.Errorf("run %d: %d tokens, want 8", i, len(runs[i]))
		}
		for _, id := range runs[i] {
			if id < 0 || id >= 640 {
				t.Errorf("run %d: token id %d out of vocab", i, id)
			}
		}
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Errorf("greedy runs differ: %v vs %v", runs[0], runs[1])
	}
}

func TestGenerateChatAndLogprobs(t *testing.T) {
	c, ctx := live(t)
	evs := collect(t, c, ctx, &pb.GenerateRequest{
		Prompt:            &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "Hello"}}}},
		Stopping:          &pb.StoppingCriteria{MaxTokens: proto.Int32(4)},
		TopLogprobs:       2,
		Logprobs:          true,
		Sampling:          &pb.SamplingParams{Temperature: proto.Float32(0.8), Seed: proto.Uint64(7)},
		SessionId:         "go-test",
		RequestId:         "go-test-chat-" + time.Now().Format("150405.000000000"),
		BypassPrefixCache: true,
	})
	var n int
	for _, ev := range evs {
		d := ev.GetDelta()
		if d == nil {
			continue
		}
		if len(d.GetLogprobs()) != len(d.GetTokenIds()) {
			t.Fatalf("%d logprobs for %d tokens", len(d.GetLogprobs()), len(d.GetTokenIds()))
		}
		for i, lp := range d.GetLogprobs() {
			n++
			if lp.GetTokenId() != d.GetTokenIds()[i] || lp.GetLogprob() > 0 || len(lp.GetTopLogprobs()) != 2 {
				t.Errorf("bad logprob %v for token %d", lp, d.GetTokenIds()[i])
			}
		}
	}
	if n != 4 {
		t.Errorf("%d tokens with logprobs, want 4", n)
	}
}

func TestTokenizeDetokenizeRoundTrip(t *testing.T) {
	c, ctx := live(t)
	const text = "Hello, world! The stock market crashed today."
	tok, err := c.Tokenize(ctx, &pb.TokenizeRequest{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.GetTokenIds()) == 0 || len(tok.GetTokens()) != len(tok.GetTokenIds()) {
		t.Fatalf("tokenize: %d ids, %d tokens", len(tok.GetTokenIds()), len(tok.GetTokens()))
	}
	detok, err := c.Detokenize(ctx, &pb.DetokenizeRequest{TokenIds: tok.GetTokenIds(), SkipSpecialTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	if detok.GetText() != text {
		t.Errorf("round trip = %q, want %q", detok.GetText(), text)
	}
}

func TestEmbedSimilarity(t *testing.T) {
	c, ctx := live(t)
	inputs := []string{"A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."}
	embs, err := c.Embed(ctx, &pb.EmbedRequest{Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	if len(embs) != len(inputs) {
		t.Fatalf("%d responses for %d inputs", len(embs), len(inputs))
	}
	for i, e := range embs {
		if int(e.GetIndex()) != i {
			t.Errorf("response %d has index %d", i, e.GetIndex())
		}
		if len(e.GetEmbedding()) != 384 {
			t.Errorf("input %d: %d dims, want 384", i, len(e.GetEmbedding()))
		}
		if n := math.Sqrt(dot(e.GetEmbedding(), e.GetEmbedding())); math.Abs(n-1) > 1e-3 {
			t.Errorf("input %d: L2 norm %f, want 1", i, n)
		}
		if e.GetTokens() <= 0 {
			t.Errorf("input %d: tokens %d", i, e.GetTokens())
		}
	}
	if s := dot(embs[0].GetEmbedding(), embs[1].GetEmbedding()); s <= 0.7 {
		t.Errorf("similar sentences: cosine %f, want > 0.7", s)
	}
	if s := dot(embs[0].GetEmbedding(), embs[2].GetEmbedding()); s >= 0.2 {
		t.Errorf("unrelated sentences: cosine %f, want < 0.2", s)
	}

	// dimensions truncates and re-normalizes.
	short, err := c.Embed(ctx, &pb.EmbedRequest{Inputs: inputs[:1], Dimensions: 64})
	if err != nil {
		t.Fatal(err)
	}
	if v := short[0].GetEmbedding(); len(v) != 64 || math.Abs(math.Sqrt(dot(v, v))-1) > 1e-3 {
		t.Errorf("dimensions=64: len %d norm %f", len(v), math.Sqrt(dot(v, v)))
	}
}

func TestInvalidTemperatureDetails(t *testing.T) {
	c, ctx := live(t)
	var got error
	for _, err := range c.Generate(ctx, &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "hi"},
		Sampling: &pb.SamplingParams{Temperature: proto.Float32(-1)},
	}) {
		got = err
	}
	d := mlxgrpc.Details(got)
	if d == nil {
		t.Fatalf("want a status error, got %v", got)
	}
	if d.Code != codes.InvalidArgument {
		t.Errorf("code %s, want InvalidArgument", d.Code)
	}
	if !slices.Contains(d.Fields(), "sampling.temperature") {
		t.Errorf("field violations %v, want sampling.temperature", d.Fields())
	}
	if ei := d.ErrorInfo; ei.GetDomain() != "mlxgrpc.v1" || ei.GetReason() == "" || ei.GetMetadata()["field"] != "sampling.temperature" {
		t.Errorf("ErrorInfo = %v", ei)
	}
}

func TestUnknownModelIsNotFound(t *testing.T) {
	c, ctx := live(t)
	_, err := c.ModelInfo(ctx, "no-such-model")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.NotFound {
		t.Errorf("GetModelInfo: %v, want NotFound", err)
	}
	var gerr error
	for _, err := range c.Generate(ctx, &pb.GenerateRequest{Model: "no-such-model", Prompt: &pb.GenerateRequest_Text{Text: "hi"}}) {
		gerr = err
	}
	if d := mlxgrpc.Details(gerr); d == nil || d.Code != codes.NotFound {
		t.Errorf("Generate: %v, want NotFound", gerr)
	}
}

func TestCancelRPC(t *testing.T) {
	c, ctx := live(t)
	var (
		id       string
		deltas   int
		tokens   int
		finished *pb.GenerationFinished
	)
	for ev, err := range c.Generate(ctx, &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "Once upon a time"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(2000)},
	}) {
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		switch {
		case ev.GetStarted() != nil:
			id = ev.GetStarted().GetRequestId()
		case ev.GetDelta() != nil:
			tokens += len(ev.GetDelta().GetTokenIds())
			if deltas++; deltas == 3 {
				ok, err := c.CancelByID(ctx, id)
				if err != nil || !ok {
					t.Fatalf("Cancel(%s) = %v, %v; want true", id, ok, err)
				}
			}
		case ev.GetFinished() != nil:
			finished = ev.GetFinished()
		}
	}
	if finished == nil {
		t.Fatal("stream ended without a finished event")
	}
	if finished.GetReason() != pb.FinishReason_FINISH_REASON_CANCELLED {
		t.Errorf("finish reason %s, want CANCELLED", finished.GetReason())
	}
	if tokens >= 2000 || int(finished.GetUsage().GetCompletionTokens()) != tokens {
		t.Errorf("%d tokens streamed, usage %v", tokens, finished.GetUsage())
	}
	// The request is gone now: a second Cancel finds nothing.
	if ok, err := c.CancelByID(ctx, id); err != nil || ok {
		t.Errorf("second Cancel = %v, %v; want false", ok, err)
	}
}

func TestCancelClientSide(t *testing.T) {
	c, ctx := live(t)
	req := &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "Once upon a time"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(2000)},
	}
	// Cancelling the context ends the stream with CANCELLED.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deltas int
	var last error
	for ev, err := range c.Generate(cctx, req) {
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

	// Breaking out of the loop also cancels the call, and returns at once.
	start := time.Now()
	for ev, err := range c.Generate(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetDelta() != nil {
			break
		}
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("break took %s", time.Since(start))
	}
}

func TestModelInfo(t *testing.T) {
	c, ctx := live(t)
	info, err := c.ModelInfo(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "llama" || info.GetVocabSize() != 640 || info.GetContextLength() != 4096 {
		t.Errorf("info = name %q vocab %d context %d", info.GetName(), info.GetVocabSize(), info.GetContextLength())
	}
	if !info.GetCapabilities().GetGeneration() || info.GetKind() != pb.ModelKind_MODEL_KIND_GENERATION || !info.GetHasChatTemplate() {
		t.Errorf("capabilities %v kind %s chat template %v", info.GetCapabilities(), info.GetKind(), info.GetHasChatTemplate())
	}
}

func TestListModels(t *testing.T) {
	c, ctx := live(t)
	r, err := c.ListModels(ctx, &pb.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range r.GetModels() {
		names = append(names, m.GetName())
	}
	if len(names) == 0 || names[0] != "llama" || !slices.Contains(names, "all-minilm-l6-v2") {
		t.Fatalf("models %v, want llama first and all-minilm-l6-v2", names)
	}
	for _, m := range r.GetModels() {
		if m.GetName() == "all-minilm-l6-v2" {
			if m.GetEmbeddingDimensions() != 384 || !m.GetCapabilities().GetEmbeddings() {
				t.Errorf("embedding model: dims %d capabilities %v", m.GetEmbeddingDimensions(), m.GetCapabilities())
			}
		}
	}
}

func TestModelLoads(t *testing.T) {
	c, ctx := live(t)
	before, err := c.ModelLoads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || before[0].GetModel() != "llama" || before[0].GetMaxRunningRequests() != 4 ||
		before[0].GetMemoryBudgetBytes() <= 0 {
		t.Fatalf("loads %v, want llama alone with max_running_requests 4 and a budget", before)
	}
	req := &pb.GenerateRequest{Prompt: &pb.GenerateRequest_Text{Text: "Counting for the load report"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(5)}}
	for _, err := range c.Generate(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
	}
	after, err := c.ModelLoads(ctx, "llama")
	if err != nil {
		t.Fatal(err)
	}
	if got := after[0].GetGeneratedTokens() - before[0].GetGeneratedTokens(); got < 5 {
		t.Errorf("generated tokens grew by %d, want >= 5", got)
	}
	_, err = c.ModelLoads(ctx, "all-minilm-l6-v2")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
		t.Errorf("an embedding model: %v, want FailedPrecondition", err)
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
