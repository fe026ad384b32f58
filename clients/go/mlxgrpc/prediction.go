package mlxgrpc

import pb "mlxgrpc.dev/go/mlxgrpc/v1"

// Predicted outputs: set GenerateRequest.Prediction to what the answer is expected
// to mostly repeat (a file being edited, a passage being corrected). Its tokens are
// proposed as speculative drafts and verified by the model, so the output is the
// same as without it, only sooner where it matches; the finished event's Usage
// reports AcceptedPredictionTokens and RejectedPredictionTokens (both counted in
// DraftTokens). It needs a model whose Capabilities.Speculation.ExternalTokens is
// set; with SpeculationOff it is INVALID_ARGUMENT.
//
//	req.Prediction = mlxgrpc.PredictionText(source)

// PredictionText predicts the output as text, tokenized by the server with the
// model's tokenizer (no special tokens).
func PredictionText(text string) *pb.Prediction {
	return &pb.Prediction{Content: &pb.Prediction_Text{Text: text}}
}

// PredictionTokens predicts the output as token ids, used as they are (a
// Result's TokenIDs, for one).
func PredictionTokens(ids ...int32) *pb.Prediction {
	return &pb.Prediction{Content: &pb.Prediction_Tokens{Tokens: &pb.TokenIds{Ids: ids}}}
}
