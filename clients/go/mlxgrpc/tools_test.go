package mlxgrpc_test

// Tools: the helpers and the request they build reach the server as they are, and
// Collect joins reasoning and complete calls (offline); against a live server's
// "tools" model, tool choice REQUIRED, FUNCTION and NONE, and a tool's result sent
// back. A server without a model named "tools" (the default one never has it) skips
// the live ones, even under MLXGRPC_REQUIRE_LIVE=1.

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestToolHelpers(t *testing.T) {
	tool, err := mlxgrpc.NewTool("get_weather", "The weather in a city", map[string]any{
		"type": "object", "required": []string{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
	})
	want := &pb.Tool{Name: "get_weather", Description: "The weather in a city",
		ParametersJsonSchema: `{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}`}
	if err != nil || !proto.Equal(tool, want) {
		t.Errorf("NewTool(map) = %v, %v; want %v", tool, err, want)
	}
	if tool, _ := mlxgrpc.NewTool("now", "", nil); tool.GetParametersJsonSchema() != "" {
		t.Errorf("NewTool(nil) = %v, want no parameters", tool)
	}
	if tool, _ := mlxgrpc.NewTool("f", "", `{"type": "object"}`); tool.GetParametersJsonSchema() != `{"type": "object"}` {
		t.Errorf("NewTool(text) = %v", tool)
	}
	if _, err := mlxgrpc.NewTool("f", "", func() {}); err == nil {
		t.Error("NewTool(func) should fail")
	}

	choices := map[*pb.ToolChoice]*pb.ToolChoice{
		mlxgrpc.ToolChoiceAuto():             {Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
		mlxgrpc.ToolChoiceNone():             {Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_NONE},
		mlxgrpc.ToolChoiceRequired():         {Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
		mlxgrpc.ToolChoiceFunction("get_it"): {Mode: pb.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION, FunctionName: "get_it"},
	}
	for got, want := range choices {
		if !proto.Equal(got, want) {
			t.Errorf("tool choice %v, want %v", got, want)
		}
	}

	kwargs, err := mlxgrpc.TemplateKwargs(map[string]any{"reasoning_effort": "low", "n": 3, "flag": true})
	if err != nil || len(kwargs) != 3 || kwargs["reasoning_effort"] != `"low"` || kwargs["n"] != "3" || kwargs["flag"] != "true" {
		t.Errorf("TemplateKwargs = %v, %v", kwargs, err)
	}
	if _, err := mlxgrpc.TemplateKwargs(map[string]any{"f": func() {}}); err == nil {
		t.Error("TemplateKwargs(func) should fail")
	}

	msg, err := mlxgrpc.ToolResult("call_1", map[string]any{"temperature": 21})
	if want := (&pb.ChatMessage{Role: "tool", ToolCallId: "call_1", Content: `{"temperature":21}`}); err != nil || !proto.Equal(msg, want) {
		t.Errorf("ToolResult(map) = %v, %v; want %v", msg, err, want)
	}
	if msg, _ := mlxgrpc.ToolResult("call_2", "sunny"); msg.GetContent() != "sunny" || msg.GetToolCallId() != "call_2" {
		t.Errorf("ToolResult(text) = %v", msg)
	}
	if _, err := mlxgrpc.ToolResult("call_3", make(chan int)); err == nil {
		t.Error("ToolResult(chan) should fail")
	}
}

// scripted is an in-process InferenceService that records each Generate request and
// answers it with the given events.
type scripted struct {
	pb.UnimplementedInferenceServiceServer
	events []*pb.GenerateResponse
	mu     sync.Mutex
	seen   []*pb.GenerateRequest
}

func (s *scripted) Generate(req *pb.GenerateRequest, stream grpc.ServerStreamingServer[pb.GenerateResponse]) error {
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	for _, ev := range s.events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

func delta(d *pb.TokenDelta) *pb.GenerateResponse {
	return &pb.GenerateResponse{Event: &pb.GenerateResponse_Delta{Delta: d}}
}

func TestCollectJoinsReasoningAndToolCalls(t *testing.T) {
	call := &pb.ToolCall{Id: "call_0", Name: "get_weather", ArgumentsJson: `{"city": "Paris"}`}
	other := &pb.ToolCall{Id: "call_1", Name: "get_time", ArgumentsJson: `{}`}
	fake := &scripted{events: []*pb.GenerateResponse{
		{Event: &pb.GenerateResponse_Started{Started: &pb.GenerationStarted{PromptTokens: 12}}},
		delta(&pb.TokenDelta{TokenIds: []int32{1, 2}, Reasoning: "The user wants "}),
		delta(&pb.TokenDelta{TokenIds: []int32{3}, Reasoning: "the weather.", Text: "Let me look."}),
		delta(&pb.TokenDelta{TokenIds: []int32{4}, ToolCallDeltas: []*pb.ToolCallDelta{{Index: 0, Id: "call_0", Name: "get_weather", ArgumentsJson: `{"city": `}}}),
		delta(&pb.TokenDelta{TokenIds: []int32{5}, ToolCallDeltas: []*pb.ToolCallDelta{{Index: 0, ArgumentsJson: `"Paris"}`}},
			ToolCalls: []*pb.ToolCall{call}}),
		delta(&pb.TokenDelta{TokenIds: []int32{6}, ToolCallDeltas: []*pb.ToolCallDelta{{Index: 1, Id: "call_1", Name: "get_time", ArgumentsJson: `{}`}},
			ToolCalls: []*pb.ToolCall{other}}),
		{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_TOOL_CALLS}}},
	}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	weather, _ := mlxgrpc.NewTool("get_weather", "", `{"type": "object"}`)
	chat := &pb.ChatMessages{
		Messages:          []*pb.ChatMessage{{Role: "user", Content: "Weather in Paris?"}},
		Tools:             []*pb.Tool{weather},
		ToolChoice:        mlxgrpc.ToolChoiceRequired(),
		ParallelToolCalls: proto.Bool(false),
		EnableThinking:    proto.Bool(false),
		TemplateKwargs:    map[string]string{"reasoning_effort": `"low"`},
	}
	req := &pb.GenerateRequest{Prompt: &pb.GenerateRequest_Chat{Chat: chat}}
	r, err := c.Generate(context.Background(), req).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.seen[0].GetChat(); !proto.Equal(got, chat) {
		t.Errorf("the server got %v, want %v", got, chat)
	}
	if r.Text != "Let me look." || r.Reasoning != "The user wants the weather." || !slices.Equal(r.TokenIDs, []int32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("text %q, reasoning %q, tokens %v", r.Text, r.Reasoning, r.TokenIDs)
	}
	// The complete calls, once each: the deltas are only their pieces.
	if len(r.ToolCalls) != 2 || !proto.Equal(r.ToolCalls[0], call) || !proto.Equal(r.ToolCalls[1], other) {
		t.Errorf("tool calls %v", r.ToolCalls)
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_TOOL_CALLS {
		t.Errorf("finished %v", r.Finished)
	}
	want := &pb.ChatMessage{Role: "assistant", Content: "Let me look.", Reasoning: "The user wants the weather.", ToolCalls: []*pb.ToolCall{call, other}}
	if msg := r.Message(); !proto.Equal(msg, want) {
		t.Errorf("Message() = %v, want %v", msg, want)
	}

	// A plain answer: no calls, no reasoning.
	fake.events = []*pb.GenerateResponse{delta(&pb.TokenDelta{TokenIds: []int32{7}, Text: "Sunny."}),
		{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_EOS}}}}
	r, err = c.Generate(context.Background(), req).Collect()
	if err != nil || r.Text != "Sunny." || r.Reasoning != "" || r.ToolCalls != nil || r.Message().GetToolCalls() != nil {
		t.Errorf("plain answer %+v, %v", r, err)
	}
}

func TestCollectSplitsChoicesAndKeepsPromptLogprobs(t *testing.T) {
	prompt := []*pb.TokenLogprob{{TokenId: 5, Logprob: -1.5}, {TokenId: 6, Logprob: -0.5}}
	finished := func(reason pb.FinishReason, choice int32) *pb.GenerateResponse {
		return &pb.GenerateResponse{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: reason}}, ChoiceIndex: choice}
	}
	second := func(d *pb.TokenDelta) *pb.GenerateResponse { ev := delta(d); ev.ChoiceIndex = 1; return ev }
	fake := &scripted{events: []*pb.GenerateResponse{
		{Event: &pb.GenerateResponse_Started{Started: &pb.GenerationStarted{PromptTokens: 3}}},
		{Event: &pb.GenerateResponse_PromptLogprobs{PromptLogprobs: &pb.PromptLogprobs{Tokens: prompt}}},
		second(&pb.TokenDelta{TokenIds: []int32{1}, Text: "a"}),
		delta(&pb.TokenDelta{TokenIds: []int32{2}, Text: "b"}),
		second(&pb.TokenDelta{TokenIds: []int32{3}, Text: "c"}),
		finished(pb.FinishReason_FINISH_REASON_EOS, 0),
		finished(pb.FinishReason_FINISH_REASON_LENGTH, 1),
	}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Generate(context.Background(), &pb.GenerateRequest{N: 2, PromptLogprobs: proto.Int32(0)}).Collect()
	if err != nil || len(r.Answers) != 2 || len(r.PromptLogprobs) != 2 || !proto.Equal(r.PromptLogprobs[1], prompt[1]) {
		t.Fatalf("result %+v, %v", r, err)
	}
	first, other := r.Answers[0], r.Answers[1]
	if first != &r.Answer || r.Text != "b" || !slices.Equal(r.TokenIDs, []int32{2}) || r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_EOS {
		t.Errorf("first choice %+v", first)
	}
	if other.Index != 1 || other.Text != "ac" || !slices.Equal(other.TokenIDs, []int32{1, 3}) || other.Finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH {
		t.Errorf("second choice %+v", other)
	}
}

// Live: the "tools" model (the CI fixture's tiny random-weight Qwen3-style model).

// toolsModel is the server's model named "tools", or skips the test: only the test
// fixture serves one, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func toolsModel(t *testing.T, s *server) *pb.ModelInfo {
	t.Helper()
	for _, m := range s.models {
		if m.GetName() == "tools" {
			if !m.GetCapabilities().GetChat().GetToolCalling() {
				t.Fatalf("model \"tools\" has no tool calling: %v", m.GetCapabilities().GetChat())
			}
			return m
		}
	}
	t.Skipf("%s serves no model named \"tools\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

var liveTools = func() []*pb.Tool {
	weather, _ := mlxgrpc.NewTool("get_weather", "The current weather in a city", map[string]any{
		"type": "object", "required": []string{"city"}, "additionalProperties": false,
		"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 16}},
	})
	clock, _ := mlxgrpc.NewTool("get_time", "The time in a time zone", map[string]any{
		"type": "object", "required": []string{"zone"}, "additionalProperties": false,
		"properties": map[string]any{"zone": map[string]any{"type": "string", "pattern": "^[A-Z]{3}$"}},
	})
	return []*pb.Tool{weather, clock}
}()

// required is each live tool's required argument.
var required = map[string]string{"get_weather": "city", "get_time": "zone"}

func toolTurn(messages []*pb.ChatMessage, choice *pb.ToolChoice, maxTokens int32) *pb.GenerateRequest {
	return &pb.GenerateRequest{
		Model: "tools",
		Prompt: &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{
			Messages: messages, Tools: liveTools, ToolChoice: choice,
			// One call, then the answer ends: random weights would rather start another.
			ParallelToolCalls: proto.Bool(false), EnableThinking: proto.Bool(false),
		}},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(maxTokens)},
	}
}

var askWeather = []*pb.ChatMessage{{Role: "user", Content: "What is the weather in Paris?"}}

// checkCalls fails unless r ended with tool calls, each of a given tool (name, when
// not empty), with a JSON object of arguments holding the tool's required key.
func checkCalls(t *testing.T, r *mlxgrpc.Result, name string) {
	t.Helper()
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_TOOL_CALLS || len(r.ToolCalls) == 0 {
		t.Fatalf("finished %s with %d calls (text %q)", r.Finished.GetReason(), len(r.ToolCalls), r.Text)
	}
	for _, call := range r.ToolCalls {
		key, known := required[call.GetName()]
		if !known || (name != "" && call.GetName() != name) || call.GetId() == "" {
			t.Errorf("call %v, want one of get_weather/get_time (%q)", call, name)
			continue
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(call.GetArgumentsJson()), &args); err != nil {
			t.Errorf("arguments %q are not a JSON object: %v", call.GetArgumentsJson(), err)
		} else if _, ok := args[key]; !ok {
			t.Errorf("arguments %q lack %q", call.GetArgumentsJson(), key)
		}
	}
}

func TestToolChoiceRequiredCallsATool(t *testing.T) {
	s := live(t)
	toolsModel(t, s)
	r, err := s.c.Generate(s.ctx, toolTurn(askWeather, mlxgrpc.ToolChoiceRequired(), 96)).Collect()
	if err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r, "")

	// The calls and their results go back; NONE answers in text.
	history := append(slices.Clone(askWeather), r.Message())
	for _, call := range r.ToolCalls {
		msg, err := mlxgrpc.ToolResult(call.GetId(), map[string]any{"temperature_c": 21, "sky": "clear"})
		if err != nil {
			t.Fatal(err)
		}
		history = append(history, msg)
	}
	answer, err := s.c.Generate(s.ctx, toolTurn(history, mlxgrpc.ToolChoiceNone(), 8)).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if answer.ToolCalls != nil || answer.Started.GetPromptTokens() <= r.Started.GetPromptTokens()+int32(len(r.TokenIDs)) {
		t.Errorf("second turn: %d calls, %d prompt tokens after %d + %d", len(answer.ToolCalls),
			answer.Started.GetPromptTokens(), r.Started.GetPromptTokens(), len(r.TokenIDs))
	}
}

func TestToolChoiceFunctionCallsThatOne(t *testing.T) {
	s := live(t)
	toolsModel(t, s)
	r, err := s.c.Generate(s.ctx, toolTurn(askWeather, mlxgrpc.ToolChoiceFunction("get_time"), 96)).Collect()
	if err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r, "get_time")
}

func TestToolChoiceNoneNeverCalls(t *testing.T) {
	s := live(t)
	toolsModel(t, s)
	var deltas, calls int
	for ev, err := range s.c.Generate(s.ctx, toolTurn(askWeather, mlxgrpc.ToolChoiceNone(), 24)).Events() {
		if err != nil {
			t.Fatal(err)
		}
		deltas += len(ev.GetDelta().GetToolCallDeltas())
		calls += len(ev.GetDelta().GetToolCalls())
		if f := ev.GetFinished(); f != nil && f.GetReason() == pb.FinishReason_FINISH_REASON_TOOL_CALLS {
			t.Errorf("finished %s", f.GetReason())
		}
	}
	if deltas != 0 || calls != 0 {
		t.Errorf("%d call pieces and %d calls with tool choice NONE", deltas, calls)
	}
}

func TestToolsOnAModelWithoutToolCalling(t *testing.T) {
	s := live(t)
	if s.generator.GetCapabilities().GetChat().GetToolCalling() {
		t.Skipf("%s has tool calling", s.generator.GetName())
	}
	req := toolTurn(askWeather, mlxgrpc.ToolChoiceAuto(), 8)
	req.Model = s.generator.GetName()
	_, err := s.c.Generate(s.ctx, req).Collect()
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.FailedPrecondition {
		t.Errorf("tools on %s: %v, want FailedPrecondition", s.generator.GetName(), err)
	}
}
