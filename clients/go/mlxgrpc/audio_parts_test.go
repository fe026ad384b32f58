package mlxgrpc_test

// Audio in the prompt: the audio parts a user message is built of (bytes, files, the
// media type detected) and the request reaching a server as built (offline); against a
// live server with a model named "omni" (the test fixture's tiny Qwen3-Omni, which takes
// audio and images), its capabilities, streamed text for clients/testdata/speech.wav
// whose tokens lengthen the prompt, a media type that does not match the bytes, too many
// files, and audio refused by the image-only "vision". A server without a model named
// "omni" (the default one never has it) skips the live ones, even under
// MLXGRPC_REQUIRE_LIVE=1.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func TestAudioPart(t *testing.T) {
	for mediaType, all := range audioSignatures {
		part := mlxgrpc.AudioPart(all[0], mediaType)
		want := &pb.ContentPart{Part: &pb.ContentPart_Audio{Audio: &pb.Audio{Data: all[0], MediaType: mediaType}}}
		if !proto.Equal(part, want) {
			t.Errorf("AudioPart(% x, %q) = %v, want %v", all[0], mediaType, part, want)
		}
	}
	// The media type is sent as given, even one that does not match the bytes.
	wav := audioSignatures[mlxgrpc.MediaTypeWAV][0]
	if got := mlxgrpc.AudioPart(wav, mlxgrpc.MediaTypeMP3).GetAudio().GetMediaType(); got != mlxgrpc.MediaTypeMP3 {
		t.Errorf("AudioPart(WAV, audio/mpeg) has media type %q, want audio/mpeg", got)
	}
}

func TestAudioFilePart(t *testing.T) {
	dir := t.TempDir()
	for want, all := range audioSignatures {
		path := filepath.Join(dir, "audio")
		if err := os.WriteFile(path, all[0], 0o644); err != nil {
			t.Fatal(err)
		}
		part, err := mlxgrpc.AudioFilePart(path)
		if err != nil || part.GetAudio().GetMediaType() != want || string(part.GetAudio().GetData()) != string(all[0]) {
			t.Errorf("AudioFilePart(%s) = %v, %v; want %s", want, part, err, want)
		}
	}
	for _, path := range []string{gradientPNG, clipMP4} {
		if part, err := mlxgrpc.AudioFilePart(path); !errors.Is(err, mlxgrpc.ErrUnknownAudioType) || part != nil {
			t.Errorf("AudioFilePart(%s) = %v, %v; want ErrUnknownAudioType", path, part, err)
		}
	}
	if _, err := mlxgrpc.AudioFilePart(filepath.Join(dir, "missing.wav")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("AudioFilePart(missing) = %v; want os.ErrNotExist", err)
	}
	data, err := os.ReadFile(speechWAV)
	if err != nil {
		t.Fatal(err)
	}
	part, err := mlxgrpc.AudioFilePart(speechWAV)
	if err != nil || !proto.Equal(part, mlxgrpc.AudioPart(data, mlxgrpc.MediaTypeWAV)) {
		t.Errorf("AudioFilePart(speech.wav) = %v, %v; want its bytes as audio/wav", part.GetAudio().GetMediaType(), err)
	}
}

func TestUserMessageWithAudio(t *testing.T) {
	wav := audioSignatures[mlxgrpc.MediaTypeWAV][0]
	png := signatures[mlxgrpc.MediaTypePNG]
	msg := mlxgrpc.UserMessage(mlxgrpc.AudioPart(wav, mlxgrpc.MediaTypeWAV),
		mlxgrpc.ImagePart(png, mlxgrpc.MediaTypePNG), mlxgrpc.TextPart("What is said, and what is shown?"))
	want := &pb.ChatMessage{Role: "user", Parts: []*pb.ContentPart{
		{Part: &pb.ContentPart_Audio{Audio: &pb.Audio{Data: wav, MediaType: "audio/wav"}}},
		{Part: &pb.ContentPart_Image{Image: &pb.Image{Data: png, MediaType: "image/png"}}},
		{Part: &pb.ContentPart_Text{Text: "What is said, and what is shown?"}},
	}}
	if !proto.Equal(msg, want) || msg.GetContent() != "" {
		t.Errorf("UserMessage = %v, want %v", msg, want)
	}
	if _, ok := msg.GetParts()[0].GetPart().(*pb.ContentPart_Audio); !ok {
		t.Errorf("part 0 is %T, want audio", msg.GetParts()[0].GetPart())
	}

	// The request reaches the server as built, bytes and all.
	fake := &scripted{events: []*pb.GenerateResponse{
		{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_LENGTH}}}}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Generate(context.Background(), imageRequest("omni", msg)).Collect(); err != nil {
		t.Fatal(err)
	}
	if got := fake.seen[0].GetChat().GetMessages()[0]; !proto.Equal(got, want) {
		t.Errorf("the server got %v, want %v", got, want)
	}
}

// Live: the fixture's "omni" (Qwen3-Omni: audio and images) and image-only "vision" models.

// omniServer is the live server when it serves a model named "omni", or skips the
// test: only the test fixture does, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func omniServer(t *testing.T) *server {
	t.Helper()
	s := live(t)
	for _, m := range s.models {
		if m.GetName() == "omni" {
			return s
		}
	}
	t.Skipf("%s serves no model named \"omni\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

const audioQuestion = "What is said in the audio?"

// askAboutTheSpeech is a user message of speech.wav (sent as mediaType, "" for the one
// detected) then the question.
func askAboutTheSpeech(t *testing.T, mediaType string) *pb.ChatMessage {
	t.Helper()
	audio, err := mlxgrpc.AudioFilePart(speechWAV)
	if err != nil {
		t.Fatal(err)
	}
	if mediaType != "" {
		audio.GetAudio().MediaType = mediaType
	}
	return mlxgrpc.UserMessage(audio, mlxgrpc.TextPart(audioQuestion))
}

func TestAudioModelInfo(t *testing.T) {
	s := omniServer(t)
	info, err := s.c.ModelInfo(s.ctx, "omni")
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetCapabilities().GetMedia().GetAudio() {
		t.Errorf("omni's capabilities.media = %v, want audio true", info.GetCapabilities().GetMedia())
	}
	info, err = s.c.ModelInfo(s.ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetCapabilities().GetMedia() == nil || info.GetCapabilities().GetMedia().GetAudio() {
		t.Errorf("vision's capabilities.media = %v, want images only (audio false)", info.GetCapabilities().GetMedia())
	}
}

func TestAudioOnAnAudioModelStreamsText(t *testing.T) {
	s := omniServer(t)
	var tokens int
	var started *pb.GenerationStarted
	var finished *pb.GenerationFinished
	for ev, err := range s.c.Generate(s.ctx, imageRequest("omni", askAboutTheSpeech(t, ""))).Events() {
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if st := ev.GetStarted(); st != nil {
			started = st
		}
		tokens += len(ev.GetDelta().GetTokenIds())
		if f := ev.GetFinished(); f != nil {
			finished = f
		}
	}
	if tokens < 1 || finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("%d tokens, finished %v; want at least one token and LENGTH (max_tokens 4)", tokens, finished)
	}
	// The same request without the audio: the 2 seconds of speech are part of the prompt,
	// about 13 tokens a second between 2 marker tokens (at least 10 a second counted here;
	// the fixture's are exactly 28).
	textOnly, err := s.c.Generate(s.ctx, imageRequest("omni", mlxgrpc.UserMessage(mlxgrpc.TextPart(audioQuestion)))).Collect()
	if err != nil {
		t.Fatal(err)
	}
	with, without := started.GetPromptTokens(), textOnly.Started.GetPromptTokens()
	if without < 1 || with < without+2*10+2 {
		t.Errorf("prompt tokens: %d with the audio, %d without; want at least 22 more with it", with, without)
	}
}

func TestAudioOfTheWrongMediaType(t *testing.T) {
	s := omniServer(t)
	_, err := s.c.Generate(s.ctx, imageRequest("omni", askAboutTheSpeech(t, mlxgrpc.MediaTypeMP3))).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.InvalidArgument || !slices.Contains(d.Fields(), "chat.messages[0].parts[0].audio.media_type") {
		t.Errorf("WAV bytes as audio/mpeg: %v (fields %v), want InvalidArgument naming chat.messages[0].parts[0].audio.media_type",
			err, d.Fields())
	}
}

func TestTooManyAudioFiles(t *testing.T) {
	s := omniServer(t)
	audio, err := mlxgrpc.AudioFilePart(speechWAV)
	if err != nil {
		t.Fatal(err)
	}
	msg := mlxgrpc.UserMessage(audio, audio, audio, audio, audio, mlxgrpc.TextPart(audioQuestion))
	_, err = s.c.Generate(s.ctx, imageRequest("omni", msg)).Collect()
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 4 audio files") {
		t.Errorf("5 audio files: %v, want InvalidArgument saying at most 4 audio files", err)
	}
}

func TestAudioOnAnImageOnlyModel(t *testing.T) {
	s := omniServer(t)
	_, err := s.c.Generate(s.ctx, imageRequest("vision", askAboutTheSpeech(t, ""))).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.FailedPrecondition || d.ErrorInfo.GetReason() != "UNSUPPORTED_OPERATION" ||
		!strings.Contains(d.Message, "does not take audio") {
		t.Errorf("audio to vision: %v, want FailedPrecondition (UNSUPPORTED_OPERATION) saying it does not take audio", err)
	}
}
