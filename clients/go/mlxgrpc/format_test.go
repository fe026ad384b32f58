package mlxgrpc_test

import (
	"encoding/json"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestFormatHelpers(t *testing.T) {
	f, err := mlxgrpc.JSONSchema(map[string]any{"type": "string"})
	if err != nil || f.GetJsonSchema() != `{"type":"string"}` {
		t.Fatalf("JSONSchema(map) = %v, %v", f, err)
	}
	if f, _ := mlxgrpc.JSONSchema(`{"type": "integer"}`); f.GetJsonSchema() != `{"type": "integer"}` {
		t.Fatalf("JSONSchema(string) = %v", f)
	}
	if _, err := mlxgrpc.JSONSchema(func() {}); err == nil {
		t.Fatal("JSONSchema(func) should fail")
	}
	if !mlxgrpc.JSONObject().GetJsonObject() || mlxgrpc.Regex("a+").GetRegex() != "a+" ||
		mlxgrpc.Grammar(`start: "x"`).GetGrammar() != `start: "x"` ||
		!slices.Equal(mlxgrpc.Choice("a", "b").GetChoice().GetOptions(), []string{"a", "b"}) {
		t.Fatal("format helpers set the wrong field")
	}
}

func TestGenerateWithJSONSchema(t *testing.T) {
	c, ctx := live(t)
	format, err := mlxgrpc.JSONSchema(map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"answer": map[string]any{"enum": []string{"yes", "no"}}},
		"required":             []string{"answer"},
		"additionalProperties": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var finished *pb.GenerationFinished
	for _, ev := range collect(t, c, ctx, &pb.GenerateRequest{
		Prompt:         &pb.GenerateRequest_Text{Text: "Answer:"},
		Stopping:       &pb.StoppingCriteria{MaxTokens: proto.Int32(32)},
		ResponseFormat: format,
	}) {
		text += ev.GetDelta().GetText()
		if f := ev.GetFinished(); f != nil {
			finished = f
		}
	}
	if finished.GetReason() != pb.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("reason %s, text %q", finished.GetReason(), text)
	}
	var answer struct{ Answer string }
	if err := json.Unmarshal([]byte(text), &answer); err != nil || (answer.Answer != "yes" && answer.Answer != "no") {
		t.Fatalf("%q: %v", text, err)
	}
	info, err := c.ModelInfo(ctx, "")
	if err != nil || !slices.Contains(info.GetCapabilities().GetResponseFormats(), pb.ResponseFormatKind_RESPONSE_FORMAT_KIND_JSON_SCHEMA) {
		t.Fatalf("response formats %v, %v", info.GetCapabilities().GetResponseFormats(), err)
	}
	var failed error
	for _, err := range c.Generate(ctx, &pb.GenerateRequest{
		Prompt:         &pb.GenerateRequest_Text{Text: "x"},
		ResponseFormat: mlxgrpc.Regex("[a-"),
	}) {
		failed = err
	}
	d := mlxgrpc.Details(failed)
	if d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"response_format.regex"}) {
		t.Fatalf("an invalid regex: %v", failed)
	}
}
