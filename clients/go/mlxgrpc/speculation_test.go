package mlxgrpc_test

// Speculative decoding: the helper (offline), and against the live server that it
// never changes the output while the usage counts the drafts.

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestSpeculationOptions(t *testing.T) {
	got := mlxgrpc.Speculation(mlxgrpc.SpeculationNgram, 6)
	want := &pb.SpeculationOptions{Mode: pb.SpeculationMode_SPECULATION_MODE_NGRAM, NumDraftTokens: 6}
	if !proto.Equal(got, want) {
		t.Errorf("Speculation(NGRAM, 6) = %v, want %v", got, want)
	}
	if def := mlxgrpc.Speculation(mlxgrpc.SpeculationDefault, 0); def.GetMode() != pb.SpeculationMode_SPECULATION_MODE_UNSPECIFIED || def.GetNumDraftTokens() != 0 {
		t.Errorf("the server's default: %v", def)
	}
	if mlxgrpc.SpeculationOff != pb.SpeculationMode_SPECULATION_MODE_OFF || mlxgrpc.SpeculationDraft != pb.SpeculationMode_SPECULATION_MODE_DRAFT {
		t.Error("mode constants differ from the generated enum")
	}
}

// copyPrompt is copy-heavy: the continuation repeats text the prompt holds, which
// prompt lookup drafts.
const passage = "The lighthouse keeper climbed the narrow stairs every evening at dusk, lit the great lamp, " +
	"and wrote the names of the ships that passed in a worn leather book."
const copyPrompt = "Repeat exactly: " + passage + "\n" + passage + "\n"

func TestSpeculationNeverChangesTheOutput(t *testing.T) {
	s := live(t)
	run := func(spec *pb.SpeculationOptions) *mlxgrpc.Result {
		t.Helper()
		req := text(copyPrompt, exact(32)) // no sampling: greedy
		req.Speculation = spec
		r, err := s.c.Generate(s.ctx, req).Collect()
		if err != nil {
			t.Fatalf("Generate with %v: %v", spec, err)
		}
		return r
	}
	off := run(mlxgrpc.Speculation(mlxgrpc.SpeculationOff, 0))
	if u := off.Finished.GetUsage(); len(off.TokenIDs) != 32 || u.GetDraftTokens() != 0 || u.GetAcceptedDraftTokens() != 0 {
		t.Fatalf("OFF: %d tokens, usage %v", len(off.TokenIDs), u)
	}
	if !slices.Contains(s.generator.GetCapabilities().GetSpeculation().GetModes(), mlxgrpc.SpeculationNgram) {
		t.Skipf("%s does not speculate with NGRAM", s.generator.GetName())
	}
	ngram := run(mlxgrpc.Speculation(mlxgrpc.SpeculationNgram, 6))
	if !slices.Equal(ngram.TokenIDs, off.TokenIDs) || ngram.Text != off.Text {
		t.Errorf("NGRAM changed the output:\n%v %q\nOFF:\n%v %q", ngram.TokenIDs, ngram.Text, off.TokenIDs, off.Text)
	}
	u := ngram.Finished.GetUsage()
	if u.GetDraftTokens() < u.GetAcceptedDraftTokens() || u.GetAcceptedDraftTokens() < 0 || u.GetCompletionTokens() != 32 {
		t.Errorf("NGRAM usage %v", u)
	}
}
