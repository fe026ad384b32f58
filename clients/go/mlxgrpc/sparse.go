package mlxgrpc

import (
	"context"
	"slices"

	"google.golang.org/grpc"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// SparseVector is one input's sparse vector from a SPLADE model: TokenIDs are the
// vocabulary ids with a nonzero weight, ascending, and Weights their weights in the
// same order (each above 0); every other id weighs 0.
type SparseVector struct {
	Index    int // the input's position in EmbedSparseRequest.Inputs
	Tokens   int // tokens the input used, after truncation
	TokenIDs []int32
	Weights  []float32
}

// Weight is id's weight (0 when the vector does not list it).
func (v SparseVector) Weight(id int32) float32 {
	if i, found := slices.BinarySearch(v.TokenIDs, id); found {
		return v.Weights[i]
	}
	return 0
}

// Map is the vector as id -> weight.
func (v SparseVector) Map() map[int32]float32 {
	m := make(map[int32]float32, len(v.TokenIDs))
	for i, id := range v.TokenIDs {
		m[id] = v.Weights[i]
	}
	return m
}

// Dot is the dot product with o (a query's vector against a document's).
func (v SparseVector) Dot(o SparseVector) float64 {
	var sum float64
	for i, j := 0, 0; i < len(v.TokenIDs) && j < len(o.TokenIDs); {
		switch a, b := v.TokenIDs[i], o.TokenIDs[j]; {
		case a < b:
			i++
		case a > b:
			j++
		default:
			sum += float64(v.Weights[i]) * float64(o.Weights[j])
			i, j = i+1, j+1
		}
	}
	return sum
}

// SparseEmbeddings is EmbedSparse's answer: the model that embedded and one vector
// per input, in input order.
type SparseEmbeddings struct {
	Model   string
	Vectors []SparseVector
}

// EmbedSparse embeds each of req.Inputs as a sparse vector over the vocabulary with
// a SPLADE model (Capabilities.SparseEmbeddings: a BERT *ForMaskedLM checkpoint; an
// empty Model selects the server's first). Vectors come back in input order, each
// with its ids ascending (the TopK heaviest when TopK > 0). req is not modified (a
// copy gets the client's WithPriority when its Priority is 0); a refusal with
// RetryInfo is retried like any other call.
//
//	q, err := client.EmbedSparse(ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: []string{query}})
//	d, err := client.EmbedSparse(ctx, &pb.EmbedSparseRequest{Model: "splade", Inputs: docs})
//	for _, v := range d.Vectors {
//		fmt.Printf("%.3f %s\n", q.Vectors[0].Dot(v), docs[v.Index])
//	}
func (c *Client) EmbedSparse(ctx context.Context, req *pb.EmbedSparseRequest, opts ...grpc.CallOption) (*SparseEmbeddings, error) {
	r, err := c.InferenceServiceClient.EmbedSparse(ctx, c.embedSparseRequest(req), opts...)
	if err != nil {
		return nil, err
	}
	out := &SparseEmbeddings{Model: r.GetModel(), Vectors: make([]SparseVector, 0, len(r.GetEmbeddings()))}
	for _, e := range r.GetEmbeddings() {
		out.Vectors = append(out.Vectors, SparseVector{Index: int(e.GetIndex()), Tokens: int(e.GetTokens()),
			TokenIDs: e.GetTokenIds(), Weights: e.GetWeights()})
	}
	slices.SortStableFunc(out.Vectors, func(a, b SparseVector) int { return a.Index - b.Index })
	return out, nil
}
