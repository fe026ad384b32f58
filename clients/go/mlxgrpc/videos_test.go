package mlxgrpc_test

// Videos: signature detection, the video parts a user message is built of, and the
// request reaching a server as built (offline); against a live server with a model
// named "video" (the test fixture's tiny Qwen2.5-VL), its capabilities, streamed text
// for a clip whose frames lengthen the prompt, a media type that does not match the
// bytes, and a video refused by the image-only "vision". A server without a model named
// "video" (the default one never has it) skips the live ones, even under
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

// clipMP4 is clients/testdata/clip.mp4, a 3-second MPEG-4 clip.
const clipMP4 = "../../testdata/clip.mp4"

// videoSignatures are the first bytes of a file of each container, by media type.
var videoSignatures = map[string][][]byte{
	mlxgrpc.MediaTypeMP4: {
		[]byte("\x00\x00\x00\x1cftypisom\x00\x00\x02\x00"),
		[]byte("\x00\x00\x00\x08moov"),
		[]byte("\x00\x00\x10\x1bmdat\x00\x00\x01\xb3"),
		[]byte("\x00\x00\x00\x08wide"),
		[]byte("\x00\x00\x00\x08free"),
		[]byte("\x00\x00\x00\x14ftypqt"), // a brand too short to be "qt  "
	},
	mlxgrpc.MediaTypeQuickTime: {[]byte("\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00")},
	mlxgrpc.MediaTypeWebM:      {[]byte("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84webm")},
	mlxgrpc.MediaTypeMatroska: {
		[]byte("\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x88matroska"),
		[]byte("\x1a\x45\xdf\xa3"),
		// "webm" past the first 64 bytes does not count.
		append(append([]byte("\x1a\x45\xdf\xa3"), make([]byte, 60)...), "webm"...),
	},
	mlxgrpc.MediaTypeAVI: {[]byte("RIFF\x24\x00\x00\x00AVI LIST")},
}

func TestVideoMediaTypeOf(t *testing.T) {
	for want, all := range videoSignatures {
		for _, data := range all {
			if got, err := mlxgrpc.VideoMediaTypeOf(data); err != nil || got != want {
				t.Errorf("VideoMediaTypeOf(% x) = %q, %v; want %q", data, got, err, want)
			}
		}
	}
	unknown := [][]byte{nil, []byte("hello, world"), []byte("ftypisom"), []byte("RIFF\x24\x00\x00\x00WAVEfmt "),
		[]byte("RIFF\x24\x00\x00\x00AVI"), {0x1a, 0x45, 0xdf}}
	for _, images := range signatures { // an image is not a video
		unknown = append(unknown, images)
	}
	for _, data := range unknown {
		if got, err := mlxgrpc.VideoMediaTypeOf(data); !errors.Is(err, mlxgrpc.ErrUnknownVideoType) {
			t.Errorf("VideoMediaTypeOf(%q) = %q, %v; want ErrUnknownVideoType", data, got, err)
		}
	}
	// ... nor a video an image.
	for _, all := range videoSignatures {
		if got, err := mlxgrpc.MediaTypeOf(all[0]); !errors.Is(err, mlxgrpc.ErrUnknownImageType) {
			t.Errorf("MediaTypeOf(% x) = %q, %v; want ErrUnknownImageType", all[0], got, err)
		}
	}
}

func TestVideoFile(t *testing.T) {
	dir := t.TempDir()
	for want, all := range videoSignatures {
		path := filepath.Join(dir, "video")
		if err := os.WriteFile(path, all[0], 0o644); err != nil {
			t.Fatal(err)
		}
		part, err := mlxgrpc.VideoFile(path)
		if err != nil || part.GetVideo().GetMediaType() != want || string(part.GetVideo().GetData()) != string(all[0]) {
			t.Errorf("VideoFile(%s) = %v, %v; want %s", want, part, err, want)
		}
	}
	if part, err := mlxgrpc.VideoFile(gradientPNG); !errors.Is(err, mlxgrpc.ErrUnknownVideoType) || part != nil {
		t.Errorf("VideoFile(gradient.png) = %v, %v; want ErrUnknownVideoType", part, err)
	}
	if _, err := mlxgrpc.VideoFile(filepath.Join(dir, "missing.mp4")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VideoFile(missing) = %v; want os.ErrNotExist", err)
	}
	part, err := mlxgrpc.VideoFile(clipMP4)
	if err != nil || part.GetVideo().GetMediaType() != mlxgrpc.MediaTypeMP4 {
		t.Errorf("VideoFile(clip.mp4) = %v, %v", part.GetVideo().GetMediaType(), err)
	}
}

func TestUserMessageWithAVideo(t *testing.T) {
	mp4 := videoSignatures[mlxgrpc.MediaTypeMP4][0]
	png := signatures[mlxgrpc.MediaTypePNG]
	msg := mlxgrpc.UserMessage(mlxgrpc.VideoPart(mp4, mlxgrpc.MediaTypeMP4), mlxgrpc.TextPart("then"),
		mlxgrpc.ImagePart(png, mlxgrpc.MediaTypePNG), mlxgrpc.VideoPart([]byte("x"), "video/webm"))
	want := &pb.ChatMessage{Role: "user", Parts: []*pb.ContentPart{
		{Part: &pb.ContentPart_Video{Video: &pb.Video{Data: mp4, MediaType: "video/mp4"}}},
		{Part: &pb.ContentPart_Text{Text: "then"}},
		{Part: &pb.ContentPart_Image{Image: &pb.Image{Data: png, MediaType: "image/png"}}},
		{Part: &pb.ContentPart_Video{Video: &pb.Video{Data: []byte("x"), MediaType: "video/webm"}}},
	}}
	if !proto.Equal(msg, want) || msg.GetContent() != "" {
		t.Errorf("UserMessage = %v, want %v", msg, want)
	}
	if _, ok := msg.GetParts()[0].GetPart().(*pb.ContentPart_Video); !ok {
		t.Errorf("part 0 is %T, want a video", msg.GetParts()[0].GetPart())
	}

	// The request reaches the server as built, bytes and all.
	fake := &scripted{events: []*pb.GenerateResponse{
		{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_LENGTH}}}}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Generate(context.Background(), imageRequest("video", msg)).Collect(); err != nil {
		t.Fatal(err)
	}
	if got := fake.seen[0].GetChat().GetMessages()[0]; !proto.Equal(got, want) {
		t.Errorf("the server got %v, want %v", got, want)
	}
}

// Live: the fixture's "video" (Qwen2.5-VL) and image-only "vision" models.

// videoServer is the live server when it serves a model named "video", or skips the
// test: only the test fixture does, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func videoServer(t *testing.T) *server {
	t.Helper()
	s := live(t)
	for _, m := range s.models {
		if m.GetName() == "video" {
			return s
		}
	}
	t.Skipf("%s serves no model named \"video\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

const videoQuestion = "What happens in the video?"

// askAboutTheClip is a user message of clip.mp4 (sent as mediaType, "" for the one
// detected) then the question.
func askAboutTheClip(t *testing.T, mediaType string) *pb.ChatMessage {
	t.Helper()
	video, err := mlxgrpc.VideoFile(clipMP4)
	if err != nil {
		t.Fatal(err)
	}
	if mediaType != "" {
		video.GetVideo().MediaType = mediaType
	}
	return mlxgrpc.UserMessage(video, mlxgrpc.TextPart(videoQuestion))
}

func TestVideoModelInfo(t *testing.T) {
	s := videoServer(t)
	info, err := s.c.ModelInfo(s.ctx, "video")
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetCapabilities().GetMedia().GetVideo() {
		t.Errorf("video's capabilities.media = %v, want video true", info.GetCapabilities().GetMedia())
	}
	info, err = s.c.ModelInfo(s.ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetCapabilities().GetMedia() == nil || info.GetCapabilities().GetMedia().GetVideo() {
		t.Errorf("vision's capabilities.media = %v, want images only (video false)", info.GetCapabilities().GetMedia())
	}
}

func TestVideoOnAVideoModelStreamsText(t *testing.T) {
	s := videoServer(t)
	var tokens int
	var started *pb.GenerationStarted
	var finished *pb.GenerationFinished
	for ev, err := range s.c.Generate(s.ctx, imageRequest("video", askAboutTheClip(t, ""))).Events() {
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
	// The same request without the video: the clip's frames are part of the prompt, 3 s at
	// 2 frames a second in 3 pairs of at least one <|video_pad|> token each, between
	// <|vision_start|> and <|vision_end|> (the fixture's tiny processor makes each pair
	// exactly one: 5 tokens).
	textOnly, err := s.c.Generate(s.ctx, imageRequest("video", mlxgrpc.UserMessage(mlxgrpc.TextPart(videoQuestion)))).Collect()
	if err != nil {
		t.Fatal(err)
	}
	with, without := started.GetPromptTokens(), textOnly.Started.GetPromptTokens()
	if without < 1 || with < without+3+2 {
		t.Errorf("prompt tokens: %d with the video, %d without; want at least 5 more with it", with, without)
	}
}

func TestVideoOfTheWrongMediaType(t *testing.T) {
	s := videoServer(t)
	_, err := s.c.Generate(s.ctx, imageRequest("video", askAboutTheClip(t, mlxgrpc.MediaTypeWebM))).Collect()
	d := mlxgrpc.Details(err)
	named := slices.ContainsFunc(d.Fields(), func(f string) bool { return strings.HasSuffix(f, ".video.media_type") })
	if d == nil || d.Code != codes.InvalidArgument || !named {
		t.Errorf("MP4 bytes as video/webm: %v (fields %v), want InvalidArgument on a .video.media_type field",
			err, d.Fields())
	}
}

func TestVideoOnAnImageOnlyModel(t *testing.T) {
	s := videoServer(t)
	_, err := s.c.Generate(s.ctx, imageRequest("vision", askAboutTheClip(t, ""))).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.FailedPrecondition || d.ErrorInfo.GetReason() != "UNSUPPORTED_OPERATION" {
		t.Errorf("a video to vision: %v, want FailedPrecondition with reason UNSUPPORTED_OPERATION", err)
	}
}
