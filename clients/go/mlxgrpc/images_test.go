package mlxgrpc_test

// Images: signature detection, the parts a user message is built of, and the request
// reaching a server as built (offline); against a live server with a model named
// "vision" (the test fixture's tiny vision-language model), an image refused by the
// text-only "llama" and by a media type that does not match its bytes, and streamed
// text for one on "vision". A server without a model named "vision" (the default one
// never has it) skips the live ones, even under MLXGRPC_REQUIRE_LIVE=1.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// gradientPNG is clients/testdata/gradient.png, a 64x64 RGB PNG.
const gradientPNG = "../../testdata/gradient.png"

var signatures = map[string][]byte{
	mlxgrpc.MediaTypePNG:  []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
	mlxgrpc.MediaTypeJPEG: {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0},
	mlxgrpc.MediaTypeGIF:  []byte("GIF89a\x01\x00\x01\x00"),
	mlxgrpc.MediaTypeWebP: []byte("RIFF\x24\x00\x00\x00WEBPVP8 "),
}

func TestMediaTypeOf(t *testing.T) {
	for want, data := range signatures {
		if got, err := mlxgrpc.MediaTypeOf(data); err != nil || got != want {
			t.Errorf("MediaTypeOf(% x) = %q, %v; want %q", data, got, err, want)
		}
	}
	for _, data := range [][]byte{nil, []byte("hello, world"), []byte("RIFF\x24\x00\x00\x00WAVEfmt "), []byte("RIFF"), {0xFF, 0xD8}} {
		if got, err := mlxgrpc.MediaTypeOf(data); !errors.Is(err, mlxgrpc.ErrUnknownImageType) {
			t.Errorf("MediaTypeOf(%q) = %q, %v; want ErrUnknownImageType", data, got, err)
		}
	}
}

func TestImageFile(t *testing.T) {
	dir := t.TempDir()
	for want, data := range signatures {
		path := filepath.Join(dir, "image")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		part, err := mlxgrpc.ImageFile(path)
		if err != nil || part.GetImage().GetMediaType() != want || string(part.GetImage().GetData()) != string(data) {
			t.Errorf("ImageFile(%s) = %v, %v; want %s", want, part, err, want)
		}
	}
	unknown := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(unknown, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	if part, err := mlxgrpc.ImageFile(unknown); !errors.Is(err, mlxgrpc.ErrUnknownImageType) || part != nil {
		t.Errorf("ImageFile(text) = %v, %v; want ErrUnknownImageType", part, err)
	}
	if _, err := mlxgrpc.ImageFile(filepath.Join(dir, "missing.png")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ImageFile(missing) = %v; want os.ErrNotExist", err)
	}
	part, err := mlxgrpc.ImageFile(gradientPNG)
	if err != nil || part.GetImage().GetMediaType() != mlxgrpc.MediaTypePNG {
		t.Errorf("ImageFile(gradient.png) = %v, %v", part.GetImage().GetMediaType(), err)
	}
}

func TestUserMessageKeepsThePartsInOrder(t *testing.T) {
	jpeg := signatures[mlxgrpc.MediaTypeJPEG]
	msg := mlxgrpc.UserMessage(mlxgrpc.TextPart("Compare"), mlxgrpc.ImagePart(jpeg, mlxgrpc.MediaTypeJPEG),
		mlxgrpc.TextPart("with"), mlxgrpc.ImagePart([]byte("x"), "image/webp"))
	want := &pb.ChatMessage{Role: "user", Parts: []*pb.ContentPart{
		{Part: &pb.ContentPart_Text{Text: "Compare"}},
		{Part: &pb.ContentPart_Image{Image: &pb.Image{Data: jpeg, MediaType: "image/jpeg"}}},
		{Part: &pb.ContentPart_Text{Text: "with"}},
		{Part: &pb.ContentPart_Image{Image: &pb.Image{Data: []byte("x"), MediaType: "image/webp"}}},
	}}
	if !proto.Equal(msg, want) || msg.GetContent() != "" {
		t.Errorf("UserMessage = %v, want %v", msg, want)
	}
	if _, ok := msg.GetParts()[1].GetPart().(*pb.ContentPart_Image); !ok {
		t.Errorf("part 1 is %T, want an image", msg.GetParts()[1].GetPart())
	}

	// The request reaches the server as built, bytes and all.
	fake := &scripted{events: []*pb.GenerateResponse{
		{Event: &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_LENGTH}}}}}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Generate(context.Background(), imageRequest("vision", msg)).Collect(); err != nil {
		t.Fatal(err)
	}
	if got := fake.seen[0].GetChat().GetMessages()[0]; !proto.Equal(got, want) {
		t.Errorf("the server got %v, want %v", got, want)
	}
}

// Live: the fixture's "vision" and text-only "llama" models.

func imageRequest(model string, msg *pb.ChatMessage) *pb.GenerateRequest {
	return &pb.GenerateRequest{
		Model:    model,
		Prompt:   &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{msg}}},
		Sampling: &pb.SamplingParams{Temperature: proto.Float32(0)},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(4)},
	}
}

// visionServer is the live server when it serves a model named "vision", or skips
// the test: only the test fixture does, so this skips even under MLXGRPC_REQUIRE_LIVE=1.
func visionServer(t *testing.T) *server {
	t.Helper()
	s := live(t)
	for _, m := range s.models {
		if m.GetName() == "vision" {
			return s
		}
	}
	t.Skipf("%s serves no model named \"vision\" (the test fixture does; the default server never has one, "+
		"so this skips even under MLXGRPC_REQUIRE_LIVE=1)", s.address)
	return nil
}

func describeGradient(t *testing.T) *pb.ChatMessage {
	t.Helper()
	image, err := mlxgrpc.ImageFile(gradientPNG)
	if err != nil {
		t.Fatal(err)
	}
	return mlxgrpc.UserMessage(image, mlxgrpc.TextPart("Describe the image."))
}

func TestImageOnATextOnlyModel(t *testing.T) {
	s := visionServer(t)
	_, err := s.c.Generate(s.ctx, imageRequest("llama", describeGradient(t))).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.FailedPrecondition || d.ErrorInfo.GetReason() != "UNSUPPORTED_OPERATION" {
		t.Errorf("an image to llama: %v, want FailedPrecondition with reason UNSUPPORTED_OPERATION", err)
	}
}

func TestImageOnAVisionModelStreamsText(t *testing.T) {
	s := visionServer(t)
	var tokens int
	var finished *pb.GenerationFinished
	for ev, err := range s.c.Generate(s.ctx, imageRequest("vision", describeGradient(t))).Events() {
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		tokens += len(ev.GetDelta().GetTokenIds())
		if f := ev.GetFinished(); f != nil {
			finished = f
		}
	}
	if tokens < 1 || finished == nil || finished.GetReason() == pb.FinishReason_FINISH_REASON_UNSPECIFIED {
		t.Errorf("%d tokens, finished %v; want at least one token and a finish reason", tokens, finished)
	}
}

func TestImageOfTheWrongMediaType(t *testing.T) {
	s := visionServer(t)
	data, err := os.ReadFile(gradientPNG)
	if err != nil {
		t.Fatal(err)
	}
	msg := mlxgrpc.UserMessage(mlxgrpc.ImagePart(data, mlxgrpc.MediaTypeJPEG), mlxgrpc.TextPart("Describe the image."))
	_, err = s.c.Generate(s.ctx, imageRequest("vision", msg)).Collect()
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.InvalidArgument || len(d.FieldViolations) == 0 {
		t.Errorf("PNG bytes as image/jpeg: %v, want InvalidArgument with a field violation", err)
	}
}
