package mlxgrpc

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Images: a chat message's content can be parts, text and images in order, instead
// of Content (not both). Build one with UserMessage(image, TextPart(text)), the image
// from ImageFile(path) or ImagePart(data, mediaType), and send it to a model that
// takes images (ModelInfo's Capabilities.Media is set); any other model refuses an
// image with FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION). The server checks each image before decoding it: a media
// type that does not match the bytes, a truncated file, or one too large is
// INVALID_ARGUMENT with a BadRequest field violation.

// The media types of the images the server takes.
const (
	MediaTypePNG  = "image/png"
	MediaTypeJPEG = "image/jpeg"
	MediaTypeWebP = "image/webp"
	MediaTypeGIF  = "image/gif"
)

// ErrUnknownImageType is what MediaTypeOf and ImageFile return (wrapped) for bytes that
// do not start like a PNG, JPEG, WebP or GIF file.
var ErrUnknownImageType = errors.New("not a PNG, JPEG, WebP or GIF image")

// MediaTypeOf is the media type of an encoded image, from its first bytes (its
// signature): PNG 89 50 4E 47, JPEG FF D8 FF, GIF "GIF8", WebP "RIFF" then "WEBP" at
// offset 8. Anything else is ErrUnknownImageType.
func MediaTypeOf(data []byte) (string, error) {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG")):
		return MediaTypePNG, nil
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return MediaTypeJPEG, nil
	case bytes.HasPrefix(data, []byte("GIF8")):
		return MediaTypeGIF, nil
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WEBP":
		return MediaTypeWebP, nil
	}
	n := min(len(data), 12)
	return "", fmt.Errorf("mlxgrpc: %w (first bytes % x)", ErrUnknownImageType, data[:n])
}

// TextPart is a message part of text.
func TextPart(text string) *pb.ContentPart {
	return &pb.ContentPart{Part: &pb.ContentPart_Text{Text: text}}
}

// ImagePart is a message part of an encoded image file's bytes, with its media type
// (MediaTypePNG, ...), sent as given: the server checks it against the bytes.
func ImagePart(data []byte, mediaType string) *pb.ContentPart {
	return &pb.ContentPart{Part: &pb.ContentPart_Image{Image: &pb.Image{Data: data, MediaType: mediaType}}}
}

// ImageFile is a message part of the image file at path, its media type detected
// from its signature (MediaTypeOf): an error when it cannot be read or is not a PNG,
// JPEG, WebP or GIF file (errors.Is(err, ErrUnknownImageType)).
func ImageFile(path string) (*pb.ContentPart, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mlxgrpc: reading image: %w", err)
	}
	mediaType, err := MediaTypeOf(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ImagePart(data, mediaType), nil
}

// UserMessage is a "user" message of parts, in order (TextPart, ImagePart, ImageFile,
// VideoPart, VideoFile, AudioPart, AudioFilePart):
//
//	image, err := mlxgrpc.ImageFile("photo.png")
//	msg := mlxgrpc.UserMessage(image, mlxgrpc.TextPart("Describe the image."))
func UserMessage(parts ...*pb.ContentPart) *pb.ChatMessage {
	return &pb.ChatMessage{Role: "user", Parts: parts}
}
