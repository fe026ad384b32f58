package mlxgrpc_test

// Predicted outputs: the helpers (offline), and against the live server that a
// prediction never changes the output while the usage counts its tokens.

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestPredictionHelpers(t *testing.T) {
	got := mlxgrpc.PredictionText("def f():\n    return 1\n")
	if got.GetText() != "def f():\n    return 1\n" || got.GetTokens() != nil {
		t.Errorf("PredictionText: %v", got)
	}
	if _, ok := mlxgrpc.PredictionText("").GetContent().(*pb.Prediction_Text); !ok {
		t.Error("an empty text prediction leaves the oneof unset")
	}
	ids := []int32{5, 6, 7}
	tokens := mlxgrpc.PredictionTokens(ids...)
	want := &pb.Prediction{Content: &pb.Prediction_Tokens{Tokens: &pb.TokenIds{Ids: []int32{5, 6, 7}}}}
	if !proto.Equal(tokens, want) || tokens.GetText() != "" {
		t.Errorf("PredictionTokens: %v", tokens)
	}
	req := text("x", nil)
	req.Prediction = mlxgrpc.PredictionTokens(ids...)
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back pb.GenerateRequest
	if err := proto.Unmarshal(wire, &back); err != nil || !slices.Equal(back.GetPrediction().GetTokens().GetIds(), ids) {
		t.Errorf("round trip: %v, %v", back.GetPrediction(), err)
	}
}

func TestPredictionNeverChangesTheOutput(t *testing.T) {
	s := live(t)
	if !s.generator.GetCapabilities().GetSpeculation().GetExternalTokens() {
		t.Skipf("%s does not verify predicted tokens", s.generator.GetName())
	}
	run := func(prediction *pb.Prediction) *mlxgrpc.Result {
		t.Helper()
		req := text(copyPrompt, &pb.StoppingCriteria{MaxTokens: proto.Int32(24)}) // no sampling: greedy
		req.Prediction = prediction
		r, err := s.c.Generate(s.ctx, req).Collect()
		if err != nil {
			t.Fatalf("Generate with prediction %v: %v", prediction, err)
		}
		return r
	}
	plain := run(nil)
	if plain.Text == "" {
		t.Fatal("no output to predict")
	}
	if u := plain.Finished.GetUsage(); u.GetAcceptedPredictionTokens() != 0 || u.GetRejectedPredictionTokens() != 0 {
		t.Errorf("usage without a prediction %v", u)
	}
	for _, prediction := range []*pb.Prediction{mlxgrpc.PredictionText(plain.Text), mlxgrpc.PredictionTokens(plain.TokenIDs...)} {
		predicted := run(prediction)
		if !slices.Equal(predicted.TokenIDs, plain.TokenIDs) || predicted.Text != plain.Text {
			t.Errorf("the prediction changed the output:\n%v %q\nwithout:\n%v %q", predicted.TokenIDs, predicted.Text, plain.TokenIDs, plain.Text)
		}
		u := predicted.Finished.GetUsage()
		if u.GetAcceptedPredictionTokens() <= 0 || u.GetAcceptedPredictionTokens()+u.GetRejectedPredictionTokens() > u.GetDraftTokens() {
			t.Errorf("usage with prediction %v: %v", prediction, u)
		}
	}
}

func TestPredictionWithSpeculationOffIsInvalid(t *testing.T) {
	s := live(t)
	if !s.generator.GetCapabilities().GetSpeculation().GetExternalTokens() {
		t.Skipf("%s does not verify predicted tokens", s.generator.GetName())
	}
	req := text(copyPrompt, &pb.StoppingCriteria{MaxTokens: proto.Int32(4)})
	req.Speculation = mlxgrpc.Speculation(mlxgrpc.SpeculationOff, 0)
	req.Prediction = mlxgrpc.PredictionText(passage)
	_, err := s.c.Generate(s.ctx, req).Collect()
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"prediction"}) {
		t.Fatalf("a prediction with speculation off: %v", err)
	}
}
