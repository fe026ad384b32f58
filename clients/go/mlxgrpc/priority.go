package mlxgrpc

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// MaxPriority bounds GenerateRequest.Priority, EmbedRequest.Priority,
// RerankRequest.Priority, ClassifyRequest.Priority, EmbedSparseRequest.Priority and
// TranscribeRequest.Priority (-MaxPriority to MaxPriority; 0, the default, is the
// server's normal level).
const MaxPriority = 100

// WithPriority sets the priority of every Generate, Embed, Rerank, Classify,
// EmbedSparse and Transcribe request of this client that leaves its own Priority at 0
// (a batch job's low priority, say).
// Higher starts first among waiting requests; waiting raises a request's
// priority, so none starves; the output never changes. A request picks its own
// with req.Priority.
func WithPriority(p int32) Option {
	return func(o *options) error {
		if p < -MaxPriority || p > MaxPriority {
			return fmt.Errorf("mlxgrpc: priority must be between %d and %d, not %d", -MaxPriority, MaxPriority, p)
		}
		o.priority = p
		return nil
	}
}

// withPriority returns req, or a copy carrying the client's default priority
// when req has none; req itself is never modified.
func withPriority[T interface {
	proto.Message
	GetPriority() int32
}](req T, def int32, set func(T, int32)) T {
	if def == 0 || req.GetPriority() != 0 {
		return req
	}
	out := proto.Clone(req).(T)
	set(out, def)
	return out
}

func (c *Client) generateRequest(req *pb.GenerateRequest) *pb.GenerateRequest {
	return withPriority(req, c.priority, func(r *pb.GenerateRequest, p int32) { r.Priority = p })
}

func (c *Client) embedRequest(req *pb.EmbedRequest) *pb.EmbedRequest {
	return withPriority(req, c.priority, func(r *pb.EmbedRequest, p int32) { r.Priority = p })
}

func (c *Client) rerankRequest(req *pb.RerankRequest) *pb.RerankRequest {
	return withPriority(req, c.priority, func(r *pb.RerankRequest, p int32) { r.Priority = p })
}

func (c *Client) classifyRequest(req *pb.ClassifyRequest) *pb.ClassifyRequest {
	return withPriority(req, c.priority, func(r *pb.ClassifyRequest, p int32) { r.Priority = p })
}

func (c *Client) embedSparseRequest(req *pb.EmbedSparseRequest) *pb.EmbedSparseRequest {
	return withPriority(req, c.priority, func(r *pb.EmbedSparseRequest, p int32) { r.Priority = p })
}

func (c *Client) transcribeRequest(req *pb.TranscribeRequest) *pb.TranscribeRequest {
	return withPriority(req, c.priority, func(r *pb.TranscribeRequest, p int32) { r.Priority = p })
}
