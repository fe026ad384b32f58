package mlxgrpc_test

// Rerank and truncation: the request reaches the server as it is, with the client's
// default priority, and the response comes back whole, a refusal retried (offline);
// Embed with TruncationNone refuses an over-long input on any live server; against a
// live server's "reranker" model, the ranking, TopN and truncation. A server without
// a model named "reranker" (the default one never has it) skips those, even under
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

// ranking is an in-process InferenceService whose Rerank scores documents by their
// length (longest first), after `refusals` refusals with RetryInfo.
type ranking struct {
	refusing
	mu   sync.Mutex
	seen []*pb.RerankRequest
}

func (r *ranking) Rerank(_ context.Context, req *pb.RerankRequest) (*pb.RerankResponse, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req)
	r.mu.Unlock()
	if err := r.refuse(req.GetRequestId()); err != nil {
		return nil, err
	}
	var results []*pb.RerankResult
	for i, d := range req.GetDocuments() {
		results = append(results, &pb.RerankResult{Index: int32(i), Score: float32(len(d)) - 0.5, Tokens: int32(i + 3)})
	}
	slices.SortStableFunc(results, func(a, b *pb.RerankResult) int { return cmp.Compare(b.GetScore(), a.GetScore()) })
	if n := int(req.GetTopN()); n > 0 && n < len(results) {
		results = results[:n]
	}
	model := req.GetModel()
	if model == "" {
		model = "reranker"
	}
	return &pb.RerankResponse{Model: model, Results: results}, nil
}

func TestTruncationConstants(t *testing.T) {
	if mlxgrpc.TruncationDefault != 0 || mlxgrpc.TruncationEnd != pb.Truncation_TRUNCATION_END ||
		mlxgrpc.TruncationNone != pb.Truncation_TRUNCATION_NONE {
		t.Errorf("truncation constants %v %v %v", mlxgrpc.TruncationDefault, mlxgrpc.TruncationEnd, mlxgrpc.TruncationNone)
	}
}

func TestRerankReachesTheServer(t *testing.T) {
	fake := &ranking{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake), mlxgrpc.WithPriority(-20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := &pb.RerankRequest{Query: "q", Documents: []string{"bb", "a", "cccc"}, Truncate: mlxgrpc.TruncationNone, RequestId: "r-1"}
	r, err := c.Rerank(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.RerankResponse{Model: "reranker", Results: []*pb.RerankResult{
		{Index: 2, Score: 3.5, Tokens: 5}, {Index: 0, Score: 1.5, Tokens: 3}, {Index: 1, Score: 0.5, Tokens: 4}}}
	if !proto.Equal(r, want) {
		t.Errorf("Rerank = %v, want %v", r, want)
	}
	top, err := c.Rerank(ctx, &pb.RerankRequest{Model: "other", Query: "q", Documents: req.Documents, TopN: 2, Priority: 7})
	if err != nil || top.GetModel() != "other" || len(top.GetResults()) != 2 ||
		!proto.Equal(top.GetResults()[0], want.Results[0]) || !proto.Equal(top.GetResults()[1], want.Results[1]) {
		t.Errorf("TopN 2 = %v, %v", top, err)
	}
	// Refused once, retried with the same request; the client's priority unless the request has one.
	if len(fake.seen) != 3 || !proto.Equal(fake.seen[0], fake.seen[1]) {
		t.Fatalf("the server saw %v", fake.seen)
	}
	sent := proto.Clone(req).(*pb.RerankRequest)
	sent.Priority = -20
	if !proto.Equal(fake.seen[0], sent) {
		t.Errorf("the server got %v, want %v", fake.seen[0], sent)
	}
	if p := fake.seen[2].GetPriority(); p != 7 || fake.seen[2].GetTopN() != 2 || fake.seen[2].GetModel() != "other" {
		t.Errorf("the second request arrived as %v", fake.seen[2])
	}
	if req.GetPriority() != 0 {
		t.Errorf("the caller's request was modified: %v", req)
	}
}

// overLong is a text of twice the model's input limit in tokens (a word is at least
// one), yet well within the server's byte limit on an input (32 bytes per token).
func overLong(m *pb.ModelInfo) string {
	return strings.Repeat("word ", 2*int(m.GetContextLength()))
}

func TestEmbedTruncation(t *testing.T) {
	s := live(t)
	if s.embedder == nil {
		unavailable(t, "the server has no embedding model")
	}
	inputs := []string{"short", overLong(s.embedder)}
	cut, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	if n := cut[1].GetTokens(); len(cut) != 2 || n <= 0 || n > s.embedder.GetContextLength() {
		t.Errorf("the default cut the long input to %d tokens (limit %d)", n, s.embedder.GetContextLength())
	}
	end, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs[1:], Truncate: mlxgrpc.TruncationEnd})
	if err != nil || end[0].GetTokens() != cut[1].GetTokens() {
		t.Errorf("TruncationEnd: %v, %v; want %d tokens", end, err, cut[1].GetTokens())
	}
	_, err = s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs, Truncate: mlxgrpc.TruncationNone})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"inputs[1]"}) {
		t.Errorf("TruncationNone on an over-long input: %v, want InvalidArgument naming inputs[1]", err)
	}
	if ok, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs[:1], Truncate: mlxgrpc.TruncationNone}); err != nil || len(ok) != 1 {
		t.Errorf("TruncationNone within the limit: %v, %v", ok, err)
	}
}

// Live: the "reranker" model (the CI fixture's tiny random-weight cross-encoder: its
// scores mean nothing, but their order, TopN and truncation hold).

const rerankQuery = "where do rivers flow?"

var rerankDocuments = []string{"Rivers flow into lakes and oceans.", "def add(a, b): return a + b",
	"The assistant answered the question politely.", "Mountains rise above the valleys; forests cover them.",
	"Numbers: 0 1 2 3 4 5 6 7 8 9"}

// rerankerModel is the server's model named "reranker", or skips the test: only the
// test fixture serves one, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func rerankerModel(t *testing.T, s *server) *pb.ModelInfo {
	t.Helper()
	for _, m := range s.models {
		if m.GetName() == "reranker" {
			if c := m.GetCapabilities(); !c.GetRerank() || c.GetEmbeddings() {
				t.Fatalf("model \"reranker\" has capabilities %v, want rerank and not embeddings", c)
			}
			return m
		}
	}
	t.Skipf("%s serves no model named \"reranker\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

// checkRanking fails unless r has every one of n documents once, by descending score.
func checkRanking(t *testing.T, r *pb.RerankResponse, n int) {
	t.Helper()
	if r.GetModel() != "reranker" {
		t.Errorf("model %q", r.GetModel())
	}
	var indices []int
	for i, res := range r.GetResults() {
		indices = append(indices, int(res.GetIndex()))
		if i > 0 && res.GetScore() > r.GetResults()[i-1].GetScore() {
			t.Errorf("result %d scores %f, above result %d's %f", i, res.GetScore(), i-1, r.GetResults()[i-1].GetScore())
		}
		if res.GetTokens() <= 0 {
			t.Errorf("result %d used %d tokens", i, res.GetTokens())
		}
	}
	slices.Sort(indices)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(indices, want) {
		t.Errorf("indices %v, want a permutation of 0..%d", indices, n-1)
	}
}

func indices(results []*pb.RerankResult) []int32 {
	var out []int32
	for _, r := range results {
		out = append(out, r.GetIndex())
	}
	return out
}

func TestRerankScoresMostRelevantFirst(t *testing.T) {
	s := live(t)
	rerankerModel(t, s)
	r, err := s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: rerankDocuments})
	if err != nil {
		t.Fatal(err)
	}
	checkRanking(t, r, len(rerankDocuments))
	again, err := s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: rerankDocuments,
		RequestId: "go-rerank-live", Priority: -10})
	if err != nil || !slices.Equal(indices(again.GetResults()), indices(r.GetResults())) {
		t.Errorf("again: %v, %v; want the order %v", again, err, indices(r.GetResults()))
	}
}

func TestRerankTopNIsTheHeadOfTheRanking(t *testing.T) {
	s := live(t)
	rerankerModel(t, s)
	every, err := s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: rerankDocuments})
	if err != nil {
		t.Fatal(err)
	}
	top, err := s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: rerankDocuments, TopN: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := indices(top.GetResults()), indices(every.GetResults()[:2]); !slices.Equal(got, want) {
		t.Fatalf("TopN 2 gave %v, want %v", got, want)
	}
	for i, res := range top.GetResults() {
		if d := res.GetScore() - every.GetResults()[i].GetScore(); d > 1e-5 || d < -1e-5 {
			t.Errorf("result %d scores %f, %f in the full ranking", i, res.GetScore(), every.GetResults()[i].GetScore())
		}
	}
}

func TestRerankTruncation(t *testing.T) {
	s := live(t)
	m := rerankerModel(t, s)
	documents := []string{rerankDocuments[0], overLong(m)}
	cut, err := s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: documents})
	if err != nil {
		t.Fatal(err)
	}
	checkRanking(t, cut, len(documents))
	for _, res := range cut.GetResults() {
		if res.GetIndex() == 1 && res.GetTokens() != m.GetContextLength() {
			t.Errorf("the long document was cut to %d tokens, want the limit %d", res.GetTokens(), m.GetContextLength())
		}
	}
	_, err = s.c.Rerank(s.ctx, &pb.RerankRequest{Model: "reranker", Query: rerankQuery, Documents: documents,
		Truncate: mlxgrpc.TruncationNone})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"documents[1]"}) {
		t.Errorf("TruncationNone on a long document: %v, want InvalidArgument naming documents[1]", err)
	}
}

func TestRerankWrongCalls(t *testing.T) {
	s := live(t)
	rerankerModel(t, s)
	type call struct {
		req  *pb.RerankRequest
		code codes.Code
	}
	calls := map[string]call{
		"no documents":     {&pb.RerankRequest{Model: "reranker", Query: rerankQuery}, codes.InvalidArgument},
		"an unknown model": {&pb.RerankRequest{Model: "no-such-model", Query: rerankQuery, Documents: rerankDocuments}, codes.NotFound},
	}
	if s.embedder != nil {
		calls["an embedding model"] = call{&pb.RerankRequest{Model: s.embedder.GetName(), Query: rerankQuery, Documents: rerankDocuments},
			codes.FailedPrecondition}
	}
	for name, call := range calls {
		_, err := s.c.Rerank(s.ctx, call.req)
		if d := mlxgrpc.Details(err); d == nil || d.Code != call.code {
			t.Errorf("%s: %v, want %s", name, err, call.code)
		}
	}
	_, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: "reranker", Inputs: []string{"x"}})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
		t.Errorf("Embed on the reranker: %v, want FailedPrecondition", err)
	}
}
