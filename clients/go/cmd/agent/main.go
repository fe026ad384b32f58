// Command agent runs one turn of an agent loop: the model calls a get_weather
// tool (tool choice REQUIRED), the call runs here, its result goes back as a
// "tool" message, and the model answers (tool choice NONE). The server address
// comes from MLXGRPC_ADDRESS (default localhost:50051), the model from
// MLXGRPC_MODEL (default "tools", the test fixture's tool-capable model), the
// bearer token, when the server needs one, from MLXGRPC_TOKEN. It exits non-zero
// unless the first turn ended with FINISH_REASON_TOOL_CALLS and a call.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// weather is the tool, run locally: a fake forecast for the city.
func weather(city string) map[string]any {
	return map[string]any{"city": city, "temperature_c": 21, "sky": "clear"}
}

func main() {
	addr := os.Getenv("MLXGRPC_ADDRESS")
	if addr == "" {
		addr = "localhost:50051"
	}
	model := os.Getenv("MLXGRPC_MODEL")
	if model == "" {
		model = "tools"
	}
	client, err := mlxgrpc.Connect(addr, mlxgrpc.WithToken(os.Getenv("MLXGRPC_TOKEN")),
		mlxgrpc.WithDefaultTimeout(60*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	info, err := client.ModelInfo(ctx, model)
	if err != nil {
		log.Fatalf("GetModelInfo: %v", err)
	}
	chat := info.GetCapabilities().GetChat()
	fmt.Printf("model %q: tool calling=%v (parser %q, enforced=%v), thinking=%v\n", info.GetName(),
		chat.GetToolCalling(), chat.GetToolParser(), chat.GetToolChoiceEnforced(), chat.GetReasoningStart() != "")

	getWeather, err := mlxgrpc.NewTool("get_weather", "The current weather in a city", map[string]any{
		"type": "object", "required": []string{"city"}, "additionalProperties": false,
		"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 16}},
	})
	if err != nil {
		log.Fatal(err)
	}
	messages := []*pb.ChatMessage{{Role: "user", Content: "What is the weather in Paris?"}}
	turn := func(choice *pb.ToolChoice, maxTokens int32) *mlxgrpc.Result {
		r, err := client.Generate(ctx, &pb.GenerateRequest{
			Model: model,
			Prompt: &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{
				Messages: messages, Tools: []*pb.Tool{getWeather}, ToolChoice: choice,
				ParallelToolCalls: proto.Bool(false), // one call, then the answer ends
				EnableThinking:    proto.Bool(false), // no reasoning before the call
			}},
			Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(maxTokens)},
		}).Collect()
		if err != nil {
			log.Fatalf("Generate: %v", err)
		}
		return r
	}

	// 1. The model must call the tool (the grammar enforces the call's arguments).
	first := turn(mlxgrpc.ToolChoiceRequired(), 96)
	fmt.Printf("turn 1: %s, %d call(s)\n", first.Finished.GetReason(), len(first.ToolCalls))
	if first.Finished.GetReason() != pb.FinishReason_FINISH_REASON_TOOL_CALLS || len(first.ToolCalls) == 0 {
		log.Fatalf("turn 1 did not end with a tool call (text %q)", first.Text)
	}

	// 2. Run each call here and send its result back, after the assistant's message.
	messages = append(messages, first.Message())
	for _, call := range first.ToolCalls {
		fmt.Printf("  call %s: %s(%s)\n", call.GetId(), call.GetName(), call.GetArgumentsJson())
		var args struct{ City string }
		if err := json.Unmarshal([]byte(call.GetArgumentsJson()), &args); err != nil {
			log.Fatalf("arguments of %s: %v", call.GetId(), err)
		}
		result, err := mlxgrpc.ToolResult(call.GetId(), weather(args.City))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("  result: %s\n", result.GetContent())
		messages = append(messages, result)
	}

	// 3. The answer, with no more calls.
	answer := turn(mlxgrpc.ToolChoiceNone(), 32)
	fmt.Printf("turn 2: %q [%s]\n", answer.Text, answer.Finished.GetReason())
}
