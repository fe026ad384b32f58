package mlxgrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Generation is one Generate request: range over Events for its stream, or
// Collect it whole. Nothing is sent until one of them is called.
type Generation struct {
	// RequestID names the request on the server: the request's own, or one
	// assigned here when it had none. Any goroutine or process may pass it to
	// CancelByID at once.
	RequestID string

	client *Client
	ctx    context.Context
	req    *pb.GenerateRequest
	opts   []grpc.CallOption
}

// Answer is one choice of a generation: GenerateRequest.N of them (one by
// default), each from its own events (GenerateResponse.ChoiceIndex).
type Answer struct {
	Index    int32
	TokenIDs []int32
	Text     string
	Logprobs []*pb.TokenLogprob
	// Reasoning is the model's thinking, kept out of Text.
	Reasoning string
	// ToolCalls are the complete calls the model made (the stream's
	// TokenDelta.ToolCalls; its ToolCallDeltas are only their pieces). The
	// answer then ends with FINISH_REASON_TOOL_CALLS.
	ToolCalls []*pb.ToolCall
	// Finished holds the finish reason (FINISH_REASON_TOOL_CALLS after tool
	// calls), usage and timings.
	Finished *pb.GenerationFinished
}

// Result is everything one generation produced. Its Answer (Text, TokenIDs,
// Finished, ...) is the first choice's; Answers holds every choice's by
// index, the first (the same Answer) included.
type Result struct {
	RequestID string
	Started   *pb.GenerationStarted
	// PromptLogprobs are the prompt tokens' log probabilities (every prompt
	// token but the first), when the request set PromptLogprobs.
	PromptLogprobs []*pb.TokenLogprob
	Answer
	Answers []*Answer
}

func (r *Result) answer(i int32) *Answer {
	i = max(i, 0)
	for int32(len(r.Answers)) <= i {
		if len(r.Answers) == 0 {
			r.Answers = append(r.Answers, &r.Answer)
		} else {
			r.Answers = append(r.Answers, &Answer{Index: int32(len(r.Answers))})
		}
	}
	return r.Answers[i]
}

// Generate prepares a generation; req is not modified (a copy gets the
// client-side request id when it has none, and the client's WithPriority when
// its Priority is 0).
//
//	gen := client.Generate(ctx, req)
//	for ev, err := range gen.Events() {
//		if err != nil { ... }
//		fmt.Print(ev.GetDelta().GetText())
//	}
func (c *Client) Generate(ctx context.Context, req *pb.GenerateRequest, opts ...grpc.CallOption) *Generation {
	req = c.generateRequest(req)
	if req.GetRequestId() == "" {
		req = proto.Clone(req).(*pb.GenerateRequest)
		req.RequestId = newRequestID()
	}
	return &Generation{RequestID: req.GetRequestId(), client: c, ctx: ctx, req: req, opts: opts}
}

// Events streams the generation: started, the prompt's logprobs when asked
// for, deltas, finished (one per choice, each with its ChoiceIndex, when the
// request sets N). A delta carries
// the answer's Text, and for chat prompts the model's Reasoning, pieces of tool
// calls (ToolCallDeltas) and the calls they completed (ToolCalls). The iterator
// yields (event, nil) per event and at most one (nil, err) at the end if the
// call fails. A refusal with RetryInfo before the first event is retried.
// Breaking out of the loop, or cancelling ctx, cancels the call; the server
// then stops generating.
func (g *Generation) Events() iter.Seq2[*pb.GenerateResponse, error] {
	return func(yield func(*pb.GenerateResponse, error) bool) {
		ctx, cancel := g.client.callContext(g.ctx)
		defer cancel()
		stream, ev, err := openStream(ctx, g.client.retry, func(ctx context.Context) (grpc.ServerStreamingClient[pb.GenerateResponse], error) {
			return g.client.InferenceServiceClient.Generate(ctx, g.req, g.opts...)
		})
		for err == nil {
			if !yield(ev, nil) {
				return
			}
			ev, err = stream.Recv()
		}
		if err != io.EOF {
			yield(nil, err)
		}
	}
}

// Collect runs the generation to its end: the unary form of Generate. Each
// choice's token ids, text, logprobs, reasoning and complete tool calls are
// joined in order.
func (g *Generation) Collect() (*Result, error) {
	r := &Result{RequestID: g.RequestID}
	r.answer(0)
	for ev, err := range g.Events() {
		if err != nil {
			return r, err
		}
		switch e := ev.Event.(type) {
		case *pb.GenerateResponse_Started:
			r.Started = e.Started
		case *pb.GenerateResponse_PromptLogprobs:
			r.PromptLogprobs = append(r.PromptLogprobs, e.PromptLogprobs.GetTokens()...)
		case *pb.GenerateResponse_Delta:
			c := r.answer(ev.GetChoiceIndex())
			c.TokenIDs = append(c.TokenIDs, e.Delta.GetTokenIds()...)
			c.Text += e.Delta.GetText()
			c.Logprobs = append(c.Logprobs, e.Delta.GetLogprobs()...)
			c.Reasoning += e.Delta.GetReasoning()
			c.ToolCalls = append(c.ToolCalls, e.Delta.GetToolCalls()...)
		case *pb.GenerateResponse_Finished:
			r.answer(ev.GetChoiceIndex()).Finished = e.Finished
		}
	}
	return r, nil
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
