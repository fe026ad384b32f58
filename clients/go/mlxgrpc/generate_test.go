package mlxgrpc_test

// Generate against the live server: streams, the unary form, structured output, cancellation.

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestGenerateGreedyIsDeterministic(t *testing.T) {
	s := live(t)
	var runs [2][]int32
	for i := range runs {
		evs := events(t, s, text("The quick brown fox", exact(8)))
		if len(evs) < 3 {
			t.Fatalf("run %d: %d events, want started, deltas, finished", i, len(evs))
		}
		started := evs[0].GetStarted()
		if started.GetPromptTokens() <= 0 || started.GetRequestId() == "" || started.GetModel() != s.generator.GetName() {
			t.Errorf("run %d: started = %v", i, started)
		}
		fin := evs[len(evs)-1].GetFinished()
		if fin.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH || fin.GetUsage().GetCompletionTokens() != 8 {
			t.Errorf("run %d: finished = %v", i, fin)
		}
		for _, ev := range evs[1 : len(evs)-1] {
			if ev.GetDelta() == nil {
				t.Fatalf("run %d: middle event %T, want delta", i, ev.Event)
			}
			runs[i] = append(runs[i], ev.GetDelta().GetTokenIds()...)
		}
		for _, id := range runs[i] {
			if id < 0 || id >= s.generator.GetVocabSize() {
				t.Errorf("run %d: token id %d out of vocab", i, id)
			}
		}
	}
	if len(runs[0]) != 8 || !slices.Equal(runs[0], runs[1]) {
		t.Errorf("greedy runs: %v vs %v", runs[0], runs[1])
	}
}

func TestCollectIsTheUnaryForm(t *testing.T) {
	s := live(t)
	gen := s.c.Generate(s.ctx, text("The quick brown fox", exact(6)))
	r, err := gen.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestID != gen.RequestID || r.Started.GetRequestId() != gen.RequestID || len(r.TokenIDs) != 6 {
		t.Errorf("result %+v for request %s", r, gen.RequestID)
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH || r.Finished.GetUsage().GetCompletionTokens() != 6 {
		t.Errorf("finished %v", r.Finished)
	}
	detok, err := s.c.Detokenize(s.ctx, &pb.DetokenizeRequest{TokenIds: r.TokenIDs})
	if err != nil || detok.GetText() != r.Text {
		t.Errorf("text %q, detokenized %q (%v)", r.Text, detok.GetText(), err)
	}
}

func TestGenerateChatAndLogprobs(t *testing.T) {
	s := live(t)
	if !s.generator.GetHasChatTemplate() {
		t.Skipf("%s has no chat template", s.generator.GetName())
	}
	r, err := s.c.Generate(s.ctx, &pb.GenerateRequest{
		Prompt:            &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "Hello"}}}},
		Stopping:          exact(4),
		TopLogprobs:       2,
		Logprobs:          true,
		Sampling:          &pb.SamplingParams{Temperature: proto.Float32(0.8), Seed: proto.Uint64(7)},
		SessionId:         "go-test",
		BypassPrefixCache: true,
	}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Logprobs) != 4 || len(r.TokenIDs) != 4 {
		t.Fatalf("%d logprobs for %d tokens, want 4", len(r.Logprobs), len(r.TokenIDs))
	}
	for i, lp := range r.Logprobs {
		if lp.GetTokenId() != r.TokenIDs[i] || lp.GetLogprob() > 0 || len(lp.GetTopLogprobs()) != 2 {
			t.Errorf("bad logprob %v for token %d", lp, r.TokenIDs[i])
		}
	}
	plain, err := s.c.Tokenize(s.ctx, &pb.TokenizeRequest{Text: "Hello"})
	if err != nil || int(r.Started.GetPromptTokens()) <= len(plain.GetTokenIds()) {
		t.Errorf("chat prompt %d tokens vs plain %d (%v): the template adds some", r.Started.GetPromptTokens(), len(plain.GetTokenIds()), err)
	}
}

func TestGenerateWithJSONSchema(t *testing.T) {
	s := live(t)
	format, err := mlxgrpc.JSONSchema(map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"answer": map[string]any{"enum": []string{"yes", "no"}}},
		"required":             []string{"answer"},
		"additionalProperties": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.c.Generate(s.ctx, &pb.GenerateRequest{
		Prompt:         &pb.GenerateRequest_Text{Text: "Answer:"},
		Stopping:       &pb.StoppingCriteria{MaxTokens: proto.Int32(32)},
		ResponseFormat: format,
	}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("reason %s, text %q", r.Finished.GetReason(), r.Text)
	}
	var answer struct{ Answer string }
	if err := json.Unmarshal([]byte(r.Text), &answer); err != nil || (answer.Answer != "yes" && answer.Answer != "no") {
		t.Fatalf("%q: %v", r.Text, err)
	}
	if formats := s.generator.GetCapabilities().GetResponseFormats(); !slices.Contains(formats, pb.ResponseFormatKind_RESPONSE_FORMAT_KIND_JSON_SCHEMA) {
		t.Fatalf("response formats %v", formats)
	}
	req := text("x", nil)
	req.ResponseFormat = mlxgrpc.Regex("[a-")
	_, err = s.c.Generate(s.ctx, req).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"response_format.regex"}) {
		t.Fatalf("an invalid regex: %v", err)
	}
}

func TestCancelRPCFromAnotherGoroutine(t *testing.T) {
	s := live(t)
	gen := s.c.Generate(s.ctx, text("Once upon a time", exact(2000)))
	// The id is known before anything was sent: cancel as soon as the server has the request.
	found := make(chan bool, 1)
	go func() {
		for range 200 {
			if ok, err := s.c.CancelByID(s.ctx, gen.RequestID); err != nil || ok {
				found <- ok
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		found <- false
	}()
	r, err := gen.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if !<-found {
		t.Fatal("Cancel never found the request")
	}
	if r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_CANCELLED || len(r.TokenIDs) >= 2000 {
		t.Errorf("finished %v after %d tokens, want CANCELLED", r.Finished, len(r.TokenIDs))
	}
	if int(r.Finished.GetUsage().GetCompletionTokens()) != len(r.TokenIDs) {
		t.Errorf("%d tokens streamed, usage %v", len(r.TokenIDs), r.Finished.GetUsage())
	}
	if ok, err := s.c.CancelByID(s.ctx, gen.RequestID); err != nil || ok {
		t.Errorf("second Cancel = %v, %v; want false", ok, err)
	}
}

func TestCancelClientSide(t *testing.T) {
	s := live(t)
	req := text("Once upon a time", exact(2000))
	cctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	var deltas int
	var last error
	for ev, err := range s.c.Generate(cctx, req).Events() {
		if err != nil {
			last = err
			break
		}
		if ev.GetFinished() != nil {
			t.Fatalf("stream finished (%s) despite cancellation", ev.GetFinished().GetReason())
		}
		if ev.GetDelta() != nil {
			if deltas++; deltas == 3 {
				cancel()
			}
		}
	}
	if d := mlxgrpc.Details(last); d == nil || d.Code != codes.Canceled {
		t.Errorf("after cancel: %v, want Canceled", last)
	}

	// Breaking out of the loop also cancels the call: the server drops the request.
	gen := s.c.Generate(s.ctx, req)
	for ev, err := range gen.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetDelta() != nil {
			break
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for ok, _ := s.c.CancelByID(s.ctx, gen.RequestID); ok; ok, _ = s.c.CancelByID(s.ctx, gen.RequestID) {
		if time.Now().After(deadline) {
			t.Fatal("request still running 5 s after the loop was left")
		}
		time.Sleep(25 * time.Millisecond)
	}
}
