package mlxgrpc

import (
	"fmt"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Structured output: set GenerateRequest.ResponseFormat to one of these and the
// generated text follows it. A complete output ends with FINISH_REASON_STOP;
// FINISH_REASON_LENGTH means max_tokens cut it short (JSON may not parse).

// JSONSchema constrains the output to JSON that validates against schema: a
// JSON Schema document as a string or []byte, or any value encoding/json
// marshals (a map, a struct).
func JSONSchema(schema any) (*pb.ResponseFormat, error) {
	text, err := jsonText(schema)
	if err != nil {
		return nil, fmt.Errorf("mlxgrpc: encoding the JSON schema: %w", err)
	}
	return &pb.ResponseFormat{Format: &pb.ResponseFormat_JsonSchema{JsonSchema: text}}, nil
}

// JSONObject constrains the output to any JSON object.
func JSONObject() *pb.ResponseFormat {
	return &pb.ResponseFormat{Format: &pb.ResponseFormat_JsonObject{JsonObject: true}}
}

// Regex constrains the whole output to match pattern (Rust regex syntax).
func Regex(pattern string) *pb.ResponseFormat {
	return &pb.ResponseFormat{Format: &pb.ResponseFormat_Regex{Regex: pattern}}
}

// Grammar constrains the output to a Lark grammar (start rule "start").
func Grammar(lark string) *pb.ResponseFormat {
	return &pb.ResponseFormat{Format: &pb.ResponseFormat_Grammar{Grammar: lark}}
}

// Choice constrains the output to exactly one of options.
func Choice(options ...string) *pb.ResponseFormat {
	return &pb.ResponseFormat{Format: &pb.ResponseFormat_Choice_{Choice: &pb.ResponseFormat_Choice{Options: options}}}
}
