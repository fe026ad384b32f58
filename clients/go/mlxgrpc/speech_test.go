package mlxgrpc_test

// Speech to text: audio signature detection and files, the request Transcribe sends
// (the client's request id and priority, a refusal retried) and the Transcript its
// events make (offline); against a live server with a model named "whisper" (the test
// fixture's tiny random-weight Whisper), its kind and capabilities, a transcript of
// clients/testdata/speech.wav, its events in order, audio of the wrong media type, a
// language and a task the English-only model refuses, and the wrong models. A server
// without a model named "whisper" (the default one never has it) skips the live ones,
// even under MLXGRPC_REQUIRE_LIVE=1.

import (
	"context"
	"errors"
	"iter"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// speechWAV is clients/testdata/speech.wav, 2 seconds of 16 kHz 16-bit mono PCM.
const speechWAV = "../../testdata/speech.wav"

// audioSignatures are the first bytes of a file of each format, by media type.
var audioSignatures = map[string][][]byte{
	mlxgrpc.MediaTypeWAV:  {[]byte("RIFF\x24\xfa\x00\x00WAVEfmt ")},
	mlxgrpc.MediaTypeFLAC: {[]byte("fLaC\x00\x00\x00\x22\x10\x00\x10\x00")},
	mlxgrpc.MediaTypeOgg:  {[]byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00")},
	mlxgrpc.MediaTypeMP3: {
		[]byte("ID3\x04\x00\x00\x00\x00\x00\x23"),
		{0xFF, 0xFB, 0x90, 0x64}, // MPEG-1 layer III
		{0xFF, 0xF3, 0x48, 0xC4}, // MPEG-2 layer III
		{0xFF, 0xE2},             // MPEG-2.5: the sync's 11 bits and no more
	},
}

func TestAudioMediaTypeOf(t *testing.T) {
	for want, all := range audioSignatures {
		for _, data := range all {
			if got, err := mlxgrpc.AudioMediaTypeOf(data); err != nil || got != want {
				t.Errorf("AudioMediaTypeOf(% x) = %q, %v; want %q", data, got, err, want)
			}
		}
	}
	unknown := [][]byte{nil, []byte("hello, world"), []byte("RIFF\x24\x00\x00\x00WAV"), []byte("RIFF\x24\x00\x00\x00AVI LIST"),
		[]byte("RIFF\x24\x00\x00\x00WEBPVP8 "), []byte("fLa"), []byte("Ogg"), []byte("ID"), {0xFF}, {0xFF, 0xC0}, {0xFE, 0xFB}}
	for _, images := range signatures { // an image is not audio (JPEG's FF D8 is no frame sync)
		unknown = append(unknown, images)
	}
	for _, videos := range videoSignatures { // nor is a video
		unknown = append(unknown, videos[0])
	}
	for _, data := range unknown {
		if got, err := mlxgrpc.AudioMediaTypeOf(data); !errors.Is(err, mlxgrpc.ErrUnknownAudioType) {
			t.Errorf("AudioMediaTypeOf(%q) = %q, %v; want ErrUnknownAudioType", data, got, err)
		}
	}
	// ... nor audio an image or a video.
	for _, all := range audioSignatures {
		if got, err := mlxgrpc.MediaTypeOf(all[0]); !errors.Is(err, mlxgrpc.ErrUnknownImageType) {
			t.Errorf("MediaTypeOf(% x) = %q, %v; want ErrUnknownImageType", all[0], got, err)
		}
		if got, err := mlxgrpc.VideoMediaTypeOf(all[0]); !errors.Is(err, mlxgrpc.ErrUnknownVideoType) {
			t.Errorf("VideoMediaTypeOf(% x) = %q, %v; want ErrUnknownVideoType", all[0], got, err)
		}
	}
}

func TestAudioFile(t *testing.T) {
	dir := t.TempDir()
	for want, all := range audioSignatures {
		path := filepath.Join(dir, "audio")
		if err := os.WriteFile(path, all[0], 0o644); err != nil {
			t.Fatal(err)
		}
		audio, err := mlxgrpc.AudioFile(path)
		if err != nil || audio.GetMediaType() != want || string(audio.GetData()) != string(all[0]) {
			t.Errorf("AudioFile(%s) = %v, %v; want %s", want, audio, err, want)
		}
	}
	if audio, err := mlxgrpc.AudioFile(gradientPNG); !errors.Is(err, mlxgrpc.ErrUnknownAudioType) || audio != nil {
		t.Errorf("AudioFile(gradient.png) = %v, %v; want ErrUnknownAudioType", audio, err)
	}
	if _, err := mlxgrpc.AudioFile(filepath.Join(dir, "missing.wav")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("AudioFile(missing) = %v; want os.ErrNotExist", err)
	}
	audio, err := mlxgrpc.AudioFile(speechWAV)
	if err != nil || audio.GetMediaType() != mlxgrpc.MediaTypeWAV || len(audio.GetData()) != 44+2*16000*2 {
		t.Errorf("AudioFile(speech.wav) = %v (%d bytes), %v", audio.GetMediaType(), len(audio.GetData()), err)
	}
	want := &pb.Audio{Data: []byte("x"), MediaType: "audio/flac"}
	if got := mlxgrpc.AudioData([]byte("x"), mlxgrpc.MediaTypeFLAC); !proto.Equal(got, want) {
		t.Errorf("AudioData = %v, want %v", got, want)
	}
}

// transcribing is an in-process InferenceService whose Transcribe, after `refusals`
// refusals with RetryInfo, sends started (echoing the request id, "whisper" for an
// empty model), one segment per letter of the prompt and finished.
type transcribing struct {
	refusing
	mu   sync.Mutex
	seen []*pb.TranscribeRequest
}

func (f *transcribing) Transcribe(req *pb.TranscribeRequest, stream grpc.ServerStreamingServer[pb.TranscribeResponse]) error {
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
	if err := f.refuse(req.GetRequestId()); err != nil {
		return err
	}
	model := req.GetModel()
	if model == "" {
		model = "whisper"
	}
	for _, ev := range script(req.GetRequestId(), model, req.GetPrompt()) {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

// script is a transcription's events: one segment a second per letter of text
// (spaces skipped).
func script(id, model, text string) []*pb.TranscribeResponse {
	var words []string
	for _, w := range []byte(text) {
		if w != ' ' {
			words = append(words, string(w))
		}
	}
	evs := []*pb.TranscribeResponse{{Event: &pb.TranscribeResponse_Started{Started: &pb.TranscriptionStarted{
		RequestId: id, Model: model, AudioSeconds: float64(len(words))}}}}
	for i, w := range words {
		evs = append(evs, &pb.TranscribeResponse{Event: &pb.TranscribeResponse_Segment{Segment: &pb.TranscriptSegment{
			Index: int32(i), StartSeconds: float64(i), EndSeconds: float64(i + 1), Text: w, TokenIds: []int32{int32(w[0]), 7},
			AvgLogprob: -0.5, NoSpeechProb: 0.25, CompressionRatio: 1.5}}})
	}
	return append(evs, &pb.TranscribeResponse{Event: &pb.TranscribeResponse_Finished{Finished: &pb.TranscriptionFinished{
		Text: strings.Join(words, ""), Language: "en", Segments: int32(len(words)), Seconds: 0.125}}})
}

func TestTranscribeReachesTheServer(t *testing.T) {
	fake := &transcribing{refusing: refusing{refusals: 1, code: codes.ResourceExhausted, delay: 50 * time.Millisecond}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake), mlxgrpc.WithPriority(-20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := &pb.TranscribeRequest{Audio: mlxgrpc.AudioData([]byte("RIFF"), mlxgrpc.MediaTypeWAV), Language: "en",
		Task: mlxgrpc.TaskTranslate, Prompt: "a b c"}
	tr := c.Transcribe(ctx, req)
	if len(tr.RequestID) != 32 {
		t.Errorf("client-side request id %q", tr.RequestID)
	}
	got, err := tr.Collect()
	if err != nil {
		t.Fatal(err)
	}
	want := &mlxgrpc.Transcript{RequestID: tr.RequestID, Model: "whisper", AudioSeconds: 3, Text: "abc", Language: "en",
		SegmentCount: 3, Seconds: 0.125}
	for i, w := range []string{"a", "b", "c"} {
		want.Segments = append(want.Segments, mlxgrpc.Segment{Index: i, StartSeconds: float64(i), EndSeconds: float64(i + 1),
			Text: w, TokenIDs: []int32{int32(w[0]), 7}, AvgLogprob: -0.5, NoSpeechProb: 0.25, CompressionRatio: 1.5})
	}
	checkTranscript(t, got, want)
	// Refused once, retried with the same request: the client's id and priority.
	if len(fake.seen) != 2 || !proto.Equal(fake.seen[0], fake.seen[1]) {
		t.Fatalf("the server saw %v", fake.seen)
	}
	sent := proto.Clone(req).(*pb.TranscribeRequest)
	sent.RequestId, sent.Priority = tr.RequestID, -20
	if !proto.Equal(fake.seen[0], sent) {
		t.Errorf("the server got %v, want %v", fake.seen[0], sent)
	}
	if req.GetPriority() != 0 || req.GetRequestId() != "" {
		t.Errorf("the caller's request was modified: %v", req)
	}

	// The raw stream, with a request's own id, model and priority.
	own := &pb.TranscribeRequest{Model: "tiny", Audio: req.Audio, RequestId: "go-t-1", Priority: 7, Prompt: "x y"}
	var kinds []string
	for ev, err := range c.Transcribe(ctx, own).Events() {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.TranscribeResponse_Started:
			kinds = append(kinds, "started:"+e.Started.GetRequestId()+":"+e.Started.GetModel())
		case *pb.TranscribeResponse_Segment:
			kinds = append(kinds, "segment:"+e.Segment.GetText())
		case *pb.TranscribeResponse_Finished:
			kinds = append(kinds, "finished:"+e.Finished.GetText())
		}
	}
	if w := []string{"started:go-t-1:tiny", "segment:x", "segment:y", "finished:xy"}; !slices.Equal(kinds, w) {
		t.Errorf("events %v, want %v", kinds, w)
	}
	if s := fake.seen[2]; len(fake.seen) != 3 || !proto.Equal(s, own) {
		t.Errorf("the second request arrived as %v, want %v", s, own)
	}
}

func TestCollectTranscript(t *testing.T) {
	events := script("id-1", "whisper", "hi there")
	of := func(evs []*pb.TranscribeResponse, fail error) iter.Seq2[*pb.TranscribeResponse, error] {
		return func(yield func(*pb.TranscribeResponse, error) bool) {
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
			}
			if fail != nil {
				yield(nil, fail)
			}
		}
	}
	whole, err := mlxgrpc.CollectTranscript("mine", of(events, nil))
	if err != nil || whole.RequestID != "id-1" || whole.Text != "hithere" || len(whole.Segments) != 7 ||
		whole.SegmentCount != 7 || whole.Segments[6].Index != 6 || whole.Segments[6].Text != "e" {
		t.Errorf("CollectTranscript = %+v, %v", whole, err)
	}
	// Cut short: what arrived, and the error.
	cut := status.Error(codes.Unavailable, "gone")
	part, err := mlxgrpc.CollectTranscript("mine", of(events[:3], cut))
	if !errors.Is(err, cut) || part.RequestID != "id-1" || len(part.Segments) != 2 || part.Text != "" {
		t.Errorf("cut short: %+v, %v", part, err)
	}
	// Ended without finished.
	part, err = mlxgrpc.CollectTranscript("mine", of(events[1:3], nil))
	if !errors.Is(err, mlxgrpc.ErrTranscriptUnfinished) || part.RequestID != "mine" || len(part.Segments) != 2 {
		t.Errorf("unfinished: %+v, %v", part, err)
	}
}

func checkTranscript(t *testing.T, got, want *mlxgrpc.Transcript) {
	t.Helper()
	if got.RequestID != want.RequestID || got.Model != want.Model || got.AudioSeconds != want.AudioSeconds ||
		got.Text != want.Text || got.Language != want.Language || got.SegmentCount != want.SegmentCount ||
		got.Seconds != want.Seconds || len(got.Segments) != len(want.Segments) {
		t.Fatalf("transcript %+v, want %+v", got, want)
	}
	for i, s := range got.Segments {
		w := want.Segments[i]
		if s.Index != w.Index || s.StartSeconds != w.StartSeconds || s.EndSeconds != w.EndSeconds || s.Text != w.Text ||
			!slices.Equal(s.TokenIDs, w.TokenIDs) || s.AvgLogprob != w.AvgLogprob || s.NoSpeechProb != w.NoSpeechProb ||
			s.CompressionRatio != w.CompressionRatio {
			t.Errorf("segment %d: %+v, want %+v", i, s, w)
		}
	}
}

// Live: the fixture's tiny random-weight Whisper: its text means nothing, but the
// stream's form, the request id, the audio's duration and the language hold.

// whisperServer is the live server when it serves a model named "whisper", or skips
// the test: only the test fixture does, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func whisperServer(t *testing.T) *server {
	t.Helper()
	s := live(t)
	for _, m := range s.models {
		if m.GetName() == "whisper" {
			return s
		}
	}
	t.Skipf("%s serves no model named \"whisper\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

// speech is clients/testdata/speech.wav as mediaType ("" for the one detected).
func speech(t *testing.T, mediaType string) *pb.Audio {
	t.Helper()
	audio, err := mlxgrpc.AudioFile(speechWAV)
	if err != nil {
		t.Fatal(err)
	}
	if mediaType != "" {
		audio.MediaType = mediaType
	}
	return audio
}

func TestSpeechModelInfo(t *testing.T) {
	s := whisperServer(t)
	info, err := s.c.ModelInfo(s.ctx, "whisper")
	if err != nil {
		t.Fatal(err)
	}
	c := info.GetCapabilities()
	if info.GetKind() != pb.ModelKind_MODEL_KIND_SPEECH || !c.GetTranscription() || c.GetGeneration() {
		t.Errorf("whisper: kind %v, capabilities %v; want MODEL_KIND_SPEECH, transcription and no generation",
			info.GetKind(), c)
	}
}

func TestTranscribeLive(t *testing.T) {
	s := whisperServer(t)
	tr, err := s.c.Transcribe(s.ctx, &pb.TranscribeRequest{Model: "whisper", Audio: speech(t, ""),
		RequestId: "go-transcribe-live", Priority: -10}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	if tr.RequestID != "go-transcribe-live" || tr.Model != "whisper" || math.Abs(tr.AudioSeconds-2.0) > 0.05 {
		t.Errorf("request id %q, model %q, %.3f s of audio; want go-transcribe-live, whisper, 2.0",
			tr.RequestID, tr.Model, tr.AudioSeconds)
	}
	if len(tr.Segments) < 1 || tr.SegmentCount != len(tr.Segments) || tr.Language != "en" || tr.Seconds <= 0 {
		t.Errorf("%d segments (finished says %d), language %q, %.3f s; want at least one, as many, en",
			len(tr.Segments), tr.SegmentCount, tr.Language, tr.Seconds)
	}
	// The random weights give no order in time; the indices and the token ids hold.
	for i, seg := range tr.Segments {
		if seg.Index != i || len(seg.TokenIDs) == 0 {
			t.Errorf("segment %d: index %d, %d token ids", i, seg.Index, len(seg.TokenIDs))
		}
	}
}

func TestTranscribeEventsLive(t *testing.T) {
	s := whisperServer(t)
	tr := s.c.Transcribe(s.ctx, &pb.TranscribeRequest{Audio: speech(t, ""), Language: "en"}) // the first speech model
	var kinds []string
	for ev, err := range tr.Events() {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.TranscribeResponse_Started:
			kinds = append(kinds, "started")
			if e.Started.GetRequestId() != tr.RequestID || e.Started.GetModel() != "whisper" {
				t.Errorf("started %v, want request id %q and model whisper", e.Started, tr.RequestID)
			}
		case *pb.TranscribeResponse_Segment:
			kinds = append(kinds, "segment")
		case *pb.TranscribeResponse_Finished:
			kinds = append(kinds, "finished")
			if e.Finished.GetLanguage() != "en" || int(e.Finished.GetSegments()) != len(kinds)-2 {
				t.Errorf("finished %v after %d segments", e.Finished, len(kinds)-2)
			}
		}
	}
	if len(kinds) < 3 || kinds[0] != "started" || kinds[len(kinds)-1] != "finished" ||
		slices.ContainsFunc(kinds[1:len(kinds)-1], func(k string) bool { return k != "segment" }) {
		t.Errorf("events %v, want started, segments, finished", kinds)
	}
}

func TestTranscribeWrongCalls(t *testing.T) {
	s := whisperServer(t)
	type call struct {
		req   *pb.TranscribeRequest
		code  codes.Code
		field string
	}
	calls := map[string]call{
		"WAV bytes as audio/mpeg": {&pb.TranscribeRequest{Model: "whisper", Audio: speech(t, mlxgrpc.MediaTypeMP3)},
			codes.InvalidArgument, "audio.media_type"},
		"no audio":            {&pb.TranscribeRequest{Model: "whisper"}, codes.InvalidArgument, "audio"},
		"an unknown language": {&pb.TranscribeRequest{Model: "whisper", Audio: speech(t, ""), Language: "de"}, codes.InvalidArgument, "language"},
		"translating English-only": {&pb.TranscribeRequest{Model: "whisper", Audio: speech(t, ""), Task: mlxgrpc.TaskTranslate},
			codes.InvalidArgument, "task"},
		"an unknown model": {&pb.TranscribeRequest{Model: "no-such-model", Audio: speech(t, "")}, codes.NotFound, ""},
	}
	for name, call := range calls {
		_, err := s.c.Transcribe(s.ctx, call.req).Collect()
		d := mlxgrpc.Details(err)
		if d == nil || d.Code != call.code || (call.field != "" && !slices.Contains(d.Fields(), call.field)) {
			t.Errorf("%s: %v (fields %v), want %s naming %q", name, err, d.Fields(), call.code, call.field)
		}
	}
}

func TestTranscribeOnATextModel(t *testing.T) {
	s := whisperServer(t)
	_, err := s.c.Transcribe(s.ctx, &pb.TranscribeRequest{Model: "llama", Audio: speech(t, "")}).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.FailedPrecondition || d.ErrorInfo.GetReason() != "UNSUPPORTED_OPERATION" {
		t.Errorf("Transcribe on llama: %v, want FailedPrecondition with reason UNSUPPORTED_OPERATION", err)
	}
}
