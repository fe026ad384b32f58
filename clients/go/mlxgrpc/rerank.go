package mlxgrpc

import (
	"context"

	"google.golang.org/grpc"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// What Embed, Rerank, Classify and EmbedSparse do with an input longer than the
// model's input limit (GetModelInfo's ContextLength): EmbedRequest.Truncate,
// RerankRequest.Truncate, ClassifyRequest.Truncate and EmbedSparseRequest.Truncate.
const (
	TruncationDefault = pb.Truncation_TRUNCATION_UNSPECIFIED // the server's default: TruncationEnd
	// TruncationEnd keeps the tokens that fit, from the start (a reranked pair cuts
	// the longer of query and document first); the response's Tokens says how many
	// were used.
	TruncationEnd = pb.Truncation_TRUNCATION_END
	// TruncationNone refuses the request: INVALID_ARGUMENT whose BadRequest field
	// names the input ("inputs[3]", "documents[1]").
	TruncationNone = pb.Truncation_TRUNCATION_NONE
)

// Rerank scores req.Documents against req.Query with a reranking model (a
// cross-encoder, Capabilities.Rerank; an empty Model selects the server's first).
// The response's Results are one per document, or the TopN highest when TopN > 0,
// most relevant first: Index is the document's position in req.Documents, Score
// the model's relevance logit (higher is more relevant; 1/(1+e^-Score) for a
// probability), Tokens what the query and document used together. req is not
// modified (a copy gets the client's WithPriority when its Priority is 0); a
// refusal with RetryInfo is retried like any other call.
//
//	r, err := client.Rerank(ctx, &pb.RerankRequest{Query: q, Documents: docs, TopN: 3})
//	for _, res := range r.GetResults() {
//		fmt.Printf("%.3f %s\n", res.GetScore(), docs[res.GetIndex()])
//	}
func (c *Client) Rerank(ctx context.Context, req *pb.RerankRequest, opts ...grpc.CallOption) (*pb.RerankResponse, error) {
	return c.InferenceServiceClient.Rerank(ctx, c.rerankRequest(req), opts...)
}
