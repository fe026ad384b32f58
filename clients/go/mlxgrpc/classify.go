package mlxgrpc

import (
	"context"

	"google.golang.org/grpc"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Classify scores the labels of each of req.Inputs with a sequence classifier
// (Capabilities.Classify: a BERT-family *ForSequenceClassification model, or a
// reranker with its one label; an empty Model selects the server's first
// classifier, else its first reranker). The response's Results are one per input,
// in input order: Index is the input's position in req.Inputs, Tokens what it
// used, Labels its labels highest first (the TopK highest when TopK > 0). Scores
// are softmax probabilities for a single-label classifier (an input's sum to 1)
// and each label's sigmoid for a multi-label one or a reranker. req is not
// modified (a copy gets the client's WithPriority when its Priority is 0); a
// refusal with RetryInfo is retried like any other call.
//
//	r, err := client.Classify(ctx, &pb.ClassifyRequest{Model: "classifier", Inputs: texts, TopK: 1})
//	for _, c := range r.GetResults() {
//		fmt.Printf("%s %.2f %s\n", c.GetLabels()[0].GetLabel(), c.GetLabels()[0].GetScore(), texts[c.GetIndex()])
//	}
func (c *Client) Classify(ctx context.Context, req *pb.ClassifyRequest, opts ...grpc.CallOption) (*pb.ClassifyResponse, error) {
	return c.InferenceServiceClient.Classify(ctx, c.classifyRequest(req), opts...)
}
