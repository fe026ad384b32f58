package mlxgrpc

import (
	"encoding/json"
	"fmt"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Tools: put them in ChatMessages.Tools with a ToolChoice, and the model's calls
// come back in Result.ToolCalls (streaming: TokenDelta.ToolCallDeltas as they are
// written, TokenDelta.ToolCalls once complete), the answer ending with
// FINISH_REASON_TOOL_CALLS. Run them, append Result.Message() and a ToolResult
// per call to the conversation, and generate again. A model's
// Capabilities.Chat.ToolCalling says whether it can (without it, tools are
// FAILED_PRECONDITION); ChatMessages.ParallelToolCalls and EnableThinking are
// set with proto.Bool.

// NewTool describes a function the model may call. parameters is the JSON
// Schema of its arguments (an object): a string or []byte of JSON text, any
// value encoding/json marshals (a map, a struct), or nil for no parameters.
func NewTool(name, description string, parameters any) (*pb.Tool, error) {
	var schema string
	if parameters != nil {
		var err error
		if schema, err = jsonText(parameters); err != nil {
			return nil, fmt.Errorf("mlxgrpc: encoding the parameters of tool %q: %w", name, err)
		}
	}
	return &pb.Tool{Name: name, Description: description, ParametersJsonSchema: schema}, nil
}

// ToolChoiceAuto lets the model answer or call tools, as it chooses (the default).
func ToolChoiceAuto() *pb.ToolChoice {
	return &pb.ToolChoice{Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
}

// ToolChoiceNone keeps the model from calling tools (they are still shown to it).
func ToolChoiceNone() *pb.ToolChoice {
	return &pb.ToolChoice{Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_NONE}
}

// ToolChoiceRequired makes the model call at least one tool, enforced by the
// grammar: the arguments validate against the tool's parameters.
func ToolChoiceRequired() *pb.ToolChoice {
	return &pb.ToolChoice{Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}
}

// ToolChoiceFunction makes the model call the tool named name, enforced by the grammar.
func ToolChoiceFunction(name string) *pb.ToolChoice {
	return &pb.ToolChoice{Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION, FunctionName: name}
}

// TemplateKwargs encodes further chat-template variables for
// ChatMessages.TemplateKwargs: each value as JSON text, e.g.
// {"reasoning_effort": "low"} becomes {"reasoning_effort": `"low"`}.
func TemplateKwargs(vars map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(vars))
	for k, v := range vars {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("mlxgrpc: encoding template variable %q: %w", k, err)
		}
		out[k] = string(b)
	}
	return out, nil
}

// ToolResult is the "tool" message answering the call with id callID (a
// ToolCall's Id): content is the tool's output, a string or []byte as it is, or
// any value encoding/json marshals.
func ToolResult(callID string, content any) (*pb.ChatMessage, error) {
	text, err := jsonText(content)
	if err != nil {
		return nil, fmt.Errorf("mlxgrpc: encoding the result of call %q: %w", callID, err)
	}
	return &pb.ChatMessage{Role: "tool", ToolCallId: callID, Content: text}, nil
}

// Message is the assistant message of the answer, to append to the
// conversation before the next turn: its text, reasoning and tool calls.
func (r *Answer) Message() *pb.ChatMessage {
	return &pb.ChatMessage{Role: "assistant", Content: r.Text, Reasoning: r.Reasoning, ToolCalls: r.ToolCalls}
}

// jsonText is v as JSON text: a string or []byte as it is, anything else marshalled.
func jsonText(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}
