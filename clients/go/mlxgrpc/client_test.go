package mlxgrpc_test

// The other calls against the live server: tokens, embeddings, errors, model info.

import (
	"errors"
	"math"
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

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

func TestModelLoads(t *testing.T) {
	s := live(t)
	before, err := s.c.ModelLoads(s.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var generators []string
	for _, m := range s.models {
		if m.GetKind() == pb.ModelKind_MODEL_KIND_GENERATION {
			generators = append(generators, m.GetName())
		}
	}
	var loaded []string
	for _, l := range before {
		loaded = append(loaded, l.GetModel())
	}
	if !slices.Equal(loaded, generators) {
		t.Fatalf("loads for %v, want every generation model %v", loaded, generators)
	}
	if l := before[0]; l.GetMaxRunningRequests() <= 0 || l.GetMemoryBudgetBytes() <= 0 {
		t.Errorf("load %v, want max_running_requests and a memory budget", l)
	}
	if _, err := s.c.Generate(s.ctx, text("Counting for the load report", exact(5))).Collect(); err != nil {
		t.Fatal(err)
	}
	after, err := s.c.ModelLoads(s.ctx, s.generator.GetName())
	if err != nil {
		t.Fatal(err)
	}
	if got := after[0].GetGeneratedTokens() - before[0].GetGeneratedTokens(); got < 5 {
		t.Errorf("generated tokens grew by %d, want >= 5", got)
	}
	if after[0].GetGeneratedTokensPerSecond() <= 0 {
		t.Errorf("tokens/s %f right after a generation", after[0].GetGeneratedTokensPerSecond())
	}
	_, err = s.c.ModelLoads(s.ctx, "no-such-model")
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.NotFound {
		t.Errorf("an unknown model: %v, want NotFound", err)
	}
	if s.embedder != nil {
		_, err = s.c.ModelLoads(s.ctx, s.embedder.GetName())
		if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
			t.Errorf("an embedding model: %v, want FailedPrecondition", err)
		}
	}
}

func TestServerChecksTheToken(t *testing.T) {
	s := live(t) // its client carries $MLXGRPC_TOKEN
	tok := os.Getenv("MLXGRPC_TOKEN")
	if tok == "" {
		t.Skip("MLXGRPC_TOKEN is not set: the server may have no tokens")
	}
	for _, other := range []string{"", tok + "-not"} {
		c, err := mlxgrpc.Connect(s.address, mlxgrpc.WithToken(other))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ModelInfo(s.ctx, "")
		c.Close()
		if d := mlxgrpc.Details(err); d == nil || d.Code != codes.Unauthenticated {
			t.Errorf("token %q: %v, want Unauthenticated", other, err)
		}
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
