package mlxgrpc

import pb "mlxgrpc.dev/go/mlxgrpc/v1"

// Where speculative decoding takes its draft tokens from (pb.SpeculationMode).
const (
	SpeculationDefault = pb.SpeculationMode_SPECULATION_MODE_UNSPECIFIED // the server's default
	SpeculationOff     = pb.SpeculationMode_SPECULATION_MODE_OFF
	SpeculationNgram   = pb.SpeculationMode_SPECULATION_MODE_NGRAM // prompt lookup
	SpeculationDraft   = pb.SpeculationMode_SPECULATION_MODE_DRAFT // the server's draft model
)

// Speculation is a request's speculative decoding: where drafts come from and
// the most draft tokens verified per step (0: the server's default; at most 8).
// It never changes the output, only how soon it arrives; the finished event's
// Usage reports DraftTokens and AcceptedDraftTokens. A model's
// Capabilities.Speculation.Modes lists the modes it can use.
//
//	req.Speculation = mlxgrpc.Speculation(mlxgrpc.SpeculationNgram, 6)
func Speculation(mode pb.SpeculationMode, numDraftTokens int32) *pb.SpeculationOptions {
	return &pb.SpeculationOptions{Mode: mode, NumDraftTokens: numDraftTokens}
}
