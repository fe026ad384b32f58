package mlxgrpc_test

// Classify: the request reaches the server as it is, with the client's default
// priority, and the response comes back whole, a refusal retried (offline); against
// a live server's "classifier" (three labels, softmax), "classifier-multi" (three
// labels, sigmoid) and "reranker" (one label), the scores, TopK and truncation. A
// server without a model named "classifier" (the default one never has it) skips
// those, even under MLXGRPC_REQUIRE_LIVE=1.

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// labelling is an in-process InferenceService whose Classify gives each input two
// labels, "long" scoring its length / 10 (at most 1) and "short" the rest of 1,
// after `refusals` refusals with RetryInfo.
type labelling struct {
	refusing
	mu   sync.Mutex
	seen []*pb.ClassifyRequest
}

func (l *labelling) Classify(_ context.Context, req *pb.ClassifyRequest) (*pb.ClassifyResponse, error) {
	l.mu.Lock()
	l.seen = append(l.seen, req)
	l.mu.Unlock()
	if err := l.refuse(req.GetRequestId()); err != nil {
		return nil, err
	}
	var results []*pb.Classification
	for i, text := range req.GetInputs() {
		long := float32(math.Min(float64(len(text))/10, 1))
		labels := []*pb.LabelScore{{Label: "long", Score: long}, {Label: "short", Score: 1 - long}}
		slices.SortStableFunc(labels, func(a, b *pb.LabelScore) int { return cmp.Compare(b.GetScore(), a.GetScore()) })
		if k := int(req.GetTopK()); k > 0 && k < len(labels) {
			labels = labels[:k]
		}
		results = append(results, &pb.Classification{Index: int32(i), Labels: labels, Tokens: int32(len(text) + 2)})
	}
	model := req.GetModel()
	if model == "" {
		model = "classifier"
	}
	return &pb.ClassifyResponse{Model: model, Results: results}, nil
}

func TestClassifyReachesTheServer(t *testing.T) {
	fake := &labelling{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake), mlxgrpc.WithPriority(-20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := &pb.ClassifyRequest{Inputs: []string{"0123456789ab", "abc"}, Truncate: mlxgrpc.TruncationNone, RequestId: "c-1"}
	r, err := c.Classify(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.ClassifyResponse{Model: "classifier", Results: []*pb.Classification{
		{Index: 0, Tokens: 14, Labels: []*pb.LabelScore{{Label: "long", Score: 1}, {Label: "short", Score: 0}}},
		{Index: 1, Tokens: 5, Labels: []*pb.LabelScore{{Label: "short", Score: 1 - float32(0.3)}, {Label: "long", Score: 0.3}}}}}
	if !proto.Equal(r, want) {
		t.Errorf("Classify = %v, want %v", r, want)
	}
	top, err := c.Classify(ctx, &pb.ClassifyRequest{Model: "other", Inputs: []string{"abc"}, TopK: 1, Priority: 7})
	if err != nil || top.GetModel() != "other" || len(top.GetResults()[0].GetLabels()) != 1 ||
		top.GetResults()[0].GetLabels()[0].GetLabel() != "short" {
		t.Errorf("TopK 1 = %v, %v", top, err)
	}
	// Refused once, retried with the same request; the client's priority unless the request has one.
	if len(fake.seen) != 3 || !proto.Equal(fake.seen[0], fake.seen[1]) {
		t.Fatalf("the server saw %v", fake.seen)
	}
	sent := proto.Clone(req).(*pb.ClassifyRequest)
	sent.Priority = -20
	if !proto.Equal(fake.seen[0], sent) {
		t.Errorf("the server got %v, want %v", fake.seen[0], sent)
	}
	if s := fake.seen[2]; s.GetPriority() != 7 || s.GetTopK() != 1 || s.GetModel() != "other" {
		t.Errorf("the second request arrived as %v", s)
	}
	if req.GetPriority() != 0 {
		t.Errorf("the caller's request was modified: %v", req)
	}
}

// Live: the fixture's tiny random-weight classifiers: their scores mean nothing, but
// their sums, order, TopK and truncation hold.

var classifyTexts = []string{"I loved this film.", "The service was slow and the food cold.",
	"Rivers flow into lakes and oceans."}

// servedModel is the server's model named name, or skips the test: only the test
// fixture serves the classifiers, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func servedModel(t *testing.T, s *server, name string) *pb.ModelInfo {
	t.Helper()
	for _, m := range s.models {
		if m.GetName() == name {
			if c := m.GetCapabilities(); !c.GetClassify() || c.GetEmbeddings() {
				t.Fatalf("model %q has capabilities %v, want classify and not embeddings", name, c)
			}
			return m
		}
	}
	t.Skipf("%s serves no model named %q (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address, name)
	return nil
}

// checkClassified fails unless r has one result per input in input order, each with
// `labels` labels highest first, and returns each result's score sums.
func checkClassified(t *testing.T, r *pb.ClassifyResponse, model string, inputs, labels int) []float64 {
	t.Helper()
	if r.GetModel() != model || len(r.GetResults()) != inputs {
		t.Fatalf("model %q, %d results; want %q, %d", r.GetModel(), len(r.GetResults()), model, inputs)
	}
	var sums []float64
	for i, c := range r.GetResults() {
		if int(c.GetIndex()) != i || c.GetTokens() <= 0 || len(c.GetLabels()) != labels {
			t.Errorf("result %d: index %d, %d tokens, %d labels", i, c.GetIndex(), c.GetTokens(), len(c.GetLabels()))
		}
		sum := 0.0
		for j, l := range c.GetLabels() {
			sum += float64(l.GetScore())
			if l.GetScore() < 0 || l.GetScore() > 1 || (j > 0 && l.GetScore() > c.GetLabels()[j-1].GetScore()) {
				t.Errorf("result %d label %d scores %f", i, j, l.GetScore())
			}
		}
		sums = append(sums, sum)
	}
	return sums
}

func TestClassifyScores(t *testing.T) {
	s := live(t)
	servedModel(t, s, "classifier")
	r, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: classifyTexts})
	if err != nil {
		t.Fatal(err)
	}
	for i, sum := range checkClassified(t, r, "classifier", len(classifyTexts), 3) {
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("single-label result %d sums to %f", i, sum)
		}
	}
	servedModel(t, s, "classifier-multi")
	multi, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier-multi", Inputs: classifyTexts,
		RequestId: "go-classify-live", Priority: -10})
	if err != nil {
		t.Fatal(err)
	}
	if sums := checkClassified(t, multi, "classifier-multi", len(classifyTexts), 3); !slices.ContainsFunc(sums,
		func(sum float64) bool { return math.Abs(sum-1) > 1e-3 }) {
		t.Errorf("multi-label sums %v: each label's sigmoid should not sum to 1", sums)
	}
	servedModel(t, s, "reranker")
	one, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "reranker", Inputs: classifyTexts})
	if err != nil {
		t.Fatal(err)
	}
	checkClassified(t, one, "reranker", len(classifyTexts), 1)
}

func TestClassifyTopKAndTruncation(t *testing.T) {
	s := live(t)
	m := servedModel(t, s, "classifier")
	every, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: classifyTexts})
	if err != nil {
		t.Fatal(err)
	}
	top, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: classifyTexts, TopK: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range top.GetResults() {
		if len(c.GetLabels()) != 1 || c.GetLabels()[0].GetLabel() != every.GetResults()[i].GetLabels()[0].GetLabel() {
			t.Errorf("TopK 1 result %d: %v, want the head of %v", i, c.GetLabels(), every.GetResults()[i].GetLabels())
		}
	}
	inputs := []string{classifyTexts[0], overLong(m)}
	cut, err := s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	checkClassified(t, cut, "classifier", 2, 3)
	if n := cut.GetResults()[1].GetTokens(); n != m.GetContextLength() {
		t.Errorf("the long input was cut to %d tokens, want the limit %d", n, m.GetContextLength())
	}
	_, err = s.c.Classify(s.ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: inputs, Truncate: mlxgrpc.TruncationNone})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"inputs[1]"}) {
		t.Errorf("TruncationNone on a long input: %v, want InvalidArgument naming inputs[1]", err)
	}
}

func TestClassifyWrongCalls(t *testing.T) {
	s := live(t)
	servedModel(t, s, "classifier")
	type call struct {
		req   *pb.ClassifyRequest
		code  codes.Code
		field string
	}
	calls := map[string]call{
		"no inputs":        {&pb.ClassifyRequest{Model: "classifier"}, codes.InvalidArgument, "inputs"},
		"a negative TopK":  {&pb.ClassifyRequest{Model: "classifier", Inputs: classifyTexts, TopK: -1}, codes.InvalidArgument, "top_k"},
		"an unknown model": {&pb.ClassifyRequest{Model: "no-such-model", Inputs: classifyTexts}, codes.NotFound, ""},
	}
	if s.embedder != nil {
		calls["an embedding model"] = call{&pb.ClassifyRequest{Model: s.embedder.GetName(), Inputs: classifyTexts},
			codes.FailedPrecondition, ""}
	}
	for name, call := range calls {
		_, err := s.c.Classify(s.ctx, call.req)
		d := mlxgrpc.Details(err)
		if d == nil || d.Code != call.code || (call.field != "" && !slices.Equal(d.Fields(), []string{call.field})) {
			t.Errorf("%s: %v, want %s naming %q", name, err, call.code, call.field)
		}
	}
	_, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: "classifier", Inputs: []string{"x"}})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
		t.Errorf("Embed on the classifier: %v, want FailedPrecondition", err)
	}
}
