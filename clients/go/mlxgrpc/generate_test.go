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

func TestGenerateNSeededChoices(t *testing.T) {
	s := live(t)
	sampling := func(seed uint64) *pb.SamplingParams {
		return &pb.SamplingParams{Temperature: proto.Float32(1), Seed: proto.Uint64(seed)}
	}
	req := text("Once upon a time", exact(6))
	req.N, req.Sampling = 2, sampling(7)
	evs := events(t, s, req)
	if len(evs) < 5 || evs[0].GetStarted() == nil || evs[len(evs)-1].GetFinished() == nil {
		t.Fatalf("events %v: want started, deltas, a finished per choice, one last", evs)
	}
	for i := range int32(2) {
		var mine []*pb.GenerateResponse
		for _, ev := range evs[1:] {
			if ev.GetChoiceIndex() == i {
				mine = append(mine, ev)
			}
		}
		last := mine[len(mine)-1].GetFinished()
		if last.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH || last.GetUsage().GetCompletionTokens() != 6 {
			t.Errorf("choice %d ends with %v, want finished (length, 6 tokens)", i, mine[len(mine)-1])
		}
		for _, ev := range mine[:len(mine)-1] {
			if ev.GetDelta() == nil {
				t.Errorf("choice %d: %v before its finished event, want deltas", i, ev)
			}
		}
	}
	gen := s.c.Generate(s.ctx, req)
	r, err := gen.Collect()
	if err != nil || len(r.Answers) != 2 || r.Answers[0] != &r.Answer {
		t.Fatalf("collect: %d answers (%v)", len(r.Answers), err)
	}
	// Choice i of a request seeded s is the request seeded s + i alone.
	for i, a := range r.Answers {
		alone := text("Once upon a time", exact(6))
		alone.Sampling = sampling(7 + uint64(i))
		one, err := s.c.Generate(s.ctx, alone).Collect()
		if err != nil || a.Index != int32(i) || len(a.TokenIDs) != 6 || !slices.Equal(a.TokenIDs, one.TokenIDs) || a.Text != one.Text {
			t.Errorf("choice %d %v, alone with seed %d %v (%v)", i, a.TokenIDs, 7+i, one.TokenIDs, err)
		}
	}
}

func TestGeneratePromptLogprobs(t *testing.T) {
	s := live(t)
	prompt := "The quick brown fox jumps over"
	req := text(prompt, exact(3))
	req.PromptLogprobs = proto.Int32(2)
	evs := events(t, s, req)
	at := slices.IndexFunc(evs, func(ev *pb.GenerateResponse) bool { return ev.GetPromptLogprobs() != nil })
	firstDelta := slices.IndexFunc(evs, func(ev *pb.GenerateResponse) bool { return ev.GetDelta() != nil })
	if at < 1 || firstDelta < at {
		t.Fatalf("prompt_logprobs event at %d, first delta at %d: want it after started, before the deltas", at, firstDelta)
	}
	ids, err := s.c.Tokenize(s.ctx, &pb.TokenizeRequest{Text: prompt, AddSpecialTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := evs[at].GetPromptLogprobs().GetTokens()
	if int(evs[0].GetStarted().GetPromptTokens()) != len(ids.GetTokenIds()) || len(tokens) != len(ids.GetTokenIds())-1 {
		t.Fatalf("%d prompt logprobs for %d prompt tokens, want one fewer", len(tokens), evs[0].GetStarted().GetPromptTokens())
	}
	for i, lp := range tokens {
		top := lp.GetTopLogprobs()
		if lp.GetTokenId() != ids.GetTokenIds()[i+1] || lp.GetLogprob() > 0 || len(top) != 2 || top[0].GetLogprob() < top[1].GetLogprob() {
			t.Errorf("prompt token %d: %v", i+1, lp)
		}
	}
	r, err := s.c.Generate(s.ctx, req).Collect()
	if err != nil || len(r.PromptLogprobs) != len(tokens) || len(r.TokenIDs) != 3 {
		t.Errorf("collect: %d prompt logprobs, %d tokens (%v)", len(r.PromptLogprobs), len(r.TokenIDs), err)
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
