package mlxgrpc_test

import (
	"slices"
	"testing"

	"mlxgrpc.dev/go/mlxgrpc"
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
