package mlxgrpc_test

// EmbedSparse: the request reaches the server as it is, with the client's default
// priority, and the answer comes back as SparseVectors in input order, a refusal
// retried (offline); against a live server's "splade" (a random-weight SPLADE
// model), the vectors' form, TopK, truncation and wrong calls. A server without a
// model named "splade" (the default one never has it) skips those, even under
// MLXGRPC_REQUIRE_LIVE=1.

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// weighing is an in-process InferenceService whose EmbedSparse gives each input its
// distinct bytes, ascending, each weighing its count (the TopK heaviest), answering
// in reverse order after `refusals` refusals with RetryInfo.
type weighing struct {
	refusing
	mu   sync.Mutex
	seen []*pb.EmbedSparseRequest
}

func (w *weighing) EmbedSparse(_ context.Context, req *pb.EmbedSparseRequest) (*pb.EmbedSparseResponse, error) {
	w.mu.Lock()
	w.seen = append(w.seen, req)
	w.mu.Unlock()
	if err := w.refuse(req.GetRequestId()); err != nil {
		return nil, err
	}
	var out []*pb.SparseEmbedding
	for i, text := range req.GetInputs() {
		var ids []int32
		for _, b := range []byte(text) {
			if !slices.Contains(ids, int32(b)) {
				ids = append(ids, int32(b))
			}
		}
		weight := func(id int32) float32 { return float32(strings.Count(text, string(rune(id)))) }
		slices.SortFunc(ids, func(a, b int32) int { return cmp.Or(cmp.Compare(weight(b), weight(a)), cmp.Compare(a, b)) })
		if k := int(req.GetTopK()); k > 0 && k < len(ids) {
			ids = ids[:k]
		}
		slices.Sort(ids)
		e := &pb.SparseEmbedding{Index: int32(i), TokenIds: ids, Tokens: int32(len(text) + 2)}
		for _, id := range ids {
			e.Weights = append(e.Weights, weight(id))
		}
		out = append([]*pb.SparseEmbedding{e}, out...)
	}
	model := cmp.Or(req.GetModel(), "splade")
	return &pb.EmbedSparseResponse{Model: model, Embeddings: out}, nil
}

func TestEmbedSparseReachesTheServer(t *testing.T) {
	fake := &weighing{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake), mlxgrpc.WithPriority(-20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := &pb.EmbedSparseRequest{Inputs: []string{"abca", "b"}, Truncate: mlxgrpc.TruncationNone, RequestId: "s-1"}
	r, err := c.EmbedSparse(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "splade" || len(r.Vectors) != 2 {
		t.Fatalf("EmbedSparse = %+v", r)
	}
	first, second := r.Vectors[0], r.Vectors[1]
	if first.Index != 0 || first.Tokens != 6 || !slices.Equal(first.TokenIDs, []int32{'a', 'b', 'c'}) ||
		!slices.Equal(first.Weights, []float32{2, 1, 1}) || second.Index != 1 || !slices.Equal(second.TokenIDs, []int32{'b'}) {
		t.Errorf("vectors %+v, want input order with ids ascending", r.Vectors)
	}
	if first.Weight('a') != 2 || first.Weight('z') != 0 || first.Map()['c'] != 1 || first.Dot(second) != 1 {
		t.Errorf("Weight, Map or Dot of %+v", first)
	}
	top, err := c.EmbedSparse(ctx, &pb.EmbedSparseRequest{Model: "other", Inputs: []string{"abbcc"}, TopK: 2, Priority: 7})
	if err != nil || top.Model != "other" || !slices.Equal(top.Vectors[0].TokenIDs, []int32{'b', 'c'}) {
		t.Errorf("TopK 2 = %+v, %v", top, err)
	}
	// Refused once, retried with the same request; the client's priority unless the request has one.
	if len(fake.seen) != 3 || !proto.Equal(fake.seen[0], fake.seen[1]) {
		t.Fatalf("the server saw %v", fake.seen)
	}
	sent := proto.Clone(req).(*pb.EmbedSparseRequest)
	sent.Priority = -20
	if !proto.Equal(fake.seen[0], sent) {
		t.Errorf("the server got %v, want %v", fake.seen[0], sent)
	}
	if s := fake.seen[2]; s.GetPriority() != 7 || s.GetTopK() != 2 || s.GetModel() != "other" {
		t.Errorf("the second request arrived as %v", s)
	}
	if req.GetPriority() != 0 {
		t.Errorf("the caller's request was modified: %v", req)
	}
}

// Live: the fixture's tiny random-weight SPLADE model: its weights mean nothing, but
// their form, TopK and truncation hold.

var sparseTexts = []string{"Where do rivers flow?", "Rivers flow into lakes and oceans.", "def add(a, b): return a + b"}

// spladeModel is the server's model named "splade", or skips the test: only the test
// fixture serves one, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func spladeModel(t *testing.T, s *server) *pb.ModelInfo {
	t.Helper()
	for _, m := range s.models {
		if m.GetName() == "splade" {
			if c := m.GetCapabilities(); !c.GetSparseEmbeddings() || c.GetEmbeddings() || m.GetEmbeddingDimensions() != 0 {
				t.Fatalf("model splade has capabilities %v, want sparse embeddings only", c)
			}
			return m
		}
	}
	t.Skipf("%s serves no model named \"splade\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

// checkSparse fails unless r has one vector per input in input order, ids ascending
// within the vocabulary, weights above 0.
func checkSparse(t *testing.T, r *mlxgrpc.SparseEmbeddings, inputs int, vocab int32) {
	t.Helper()
	if r.Model != "splade" || len(r.Vectors) != inputs {
		t.Fatalf("model %q, %d vectors; want splade, %d", r.Model, len(r.Vectors), inputs)
	}
	for i, v := range r.Vectors {
		if v.Index != i || v.Tokens <= 0 || len(v.TokenIDs) == 0 || len(v.TokenIDs) != len(v.Weights) {
			t.Errorf("vector %d: index %d, %d tokens, %d ids, %d weights", i, v.Index, v.Tokens, len(v.TokenIDs), len(v.Weights))
			continue
		}
		if !slices.IsSorted(v.TokenIDs) || len(slices.Compact(slices.Clone(v.TokenIDs))) != len(v.TokenIDs) ||
			v.TokenIDs[len(v.TokenIDs)-1] >= vocab {
			t.Errorf("vector %d: ids %v not ascending within %d", i, v.TokenIDs, vocab)
		}
		if slices.ContainsFunc(v.Weights, func(w float32) bool { return w <= 0 }) {
			t.Errorf("vector %d: a weight is not above 0: %v", i, v.Weights)
		}
	}
}

func TestEmbedSparseLive(t *testing.T) {
	s := live(t)
	m := spladeModel(t, s)
	every, err := s.c.EmbedSparse(s.ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: sparseTexts,
		RequestId: "go-sparse-live", Priority: -10})
	if err != nil {
		t.Fatal(err)
	}
	checkSparse(t, every, len(sparseTexts), m.GetVocabSize())
	top, err := s.c.EmbedSparse(s.ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: sparseTexts, TopK: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkSparse(t, top, len(sparseTexts), m.GetVocabSize())
	for i, v := range top.Vectors {
		all := every.Vectors[i]
		order := slices.Clone(all.TokenIDs)
		slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(all.Weight(b), all.Weight(a)) })
		want := slices.Clone(order[:3])
		slices.Sort(want)
		if !slices.Equal(v.TokenIDs, want) {
			t.Errorf("TopK 3 vector %d: %v, want the 3 heaviest %v", i, v.TokenIDs, want)
		}
	}
	inputs := []string{sparseTexts[0], overLong(m)}
	cut, err := s.c.EmbedSparse(s.ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	checkSparse(t, cut, 2, m.GetVocabSize())
	if n := cut.Vectors[1].Tokens; n != int(m.GetContextLength()) {
		t.Errorf("the long input was cut to %d tokens, want the limit %d", n, m.GetContextLength())
	}
	_, err = s.c.EmbedSparse(s.ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: inputs, Truncate: mlxgrpc.TruncationNone})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"inputs[1]"}) {
		t.Errorf("TruncationNone on a long input: %v, want InvalidArgument naming inputs[1]", err)
	}
}

func TestEmbedSparseWrongCalls(t *testing.T) {
	s := live(t)
	spladeModel(t, s)
	type call struct {
		req   *pb.EmbedSparseRequest
		code  codes.Code
		field string
	}
	calls := map[string]call{
		"no inputs":        {&pb.EmbedSparseRequest{Model: "splade"}, codes.InvalidArgument, "inputs"},
		"a negative TopK":  {&pb.EmbedSparseRequest{Model: "splade", Inputs: sparseTexts, TopK: -1}, codes.InvalidArgument, "top_k"},
		"an unknown model": {&pb.EmbedSparseRequest{Model: "no-such-model", Inputs: sparseTexts}, codes.NotFound, ""},
	}
	if s.embedder != nil {
		calls["an embedding model"] = call{&pb.EmbedSparseRequest{Model: s.embedder.GetName(), Inputs: sparseTexts},
			codes.FailedPrecondition, ""}
	}
	for name, call := range calls {
		_, err := s.c.EmbedSparse(s.ctx, call.req)
		d := mlxgrpc.Details(err)
		if d == nil || d.Code != call.code || (call.field != "" && !slices.Equal(d.Fields(), []string{call.field})) {
			t.Errorf("%s: %v, want %s naming %q", name, err, call.code, call.field)
		}
	}
	_, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: "splade", Inputs: []string{"x"}})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
		t.Errorf("Embed on the SPLADE model: %v, want FailedPrecondition", err)
	}
}
