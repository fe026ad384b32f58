package mlxgrpc

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Videos: a chat message's parts can hold videos as they hold images. Build one with
// UserMessage(video, TextPart(text)), the video from VideoFile(path) or
// VideoPart(data, mediaType), and send it to a model that takes videos (ModelInfo's
// Capabilities.Media.Video is true); any other model refuses a video with
// FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION). The server checks each
// video's container header, then samples its frames (by default 2 a second, at most
// 32): a media type that does not match the bytes, a truncated file, one too large, a
// duration, frame rate or frame size over the limits, or more than 4 videos is
// INVALID_ARGUMENT with a BadRequest field violation.

// The media types of the videos the server takes.
const (
	MediaTypeMP4       = "video/mp4"
	MediaTypeQuickTime = "video/quicktime"
	MediaTypeWebM      = "video/webm"
	MediaTypeMatroska  = "video/x-matroska"
	MediaTypeAVI       = "video/x-msvideo"
)

// ErrUnknownVideoType is what VideoMediaTypeOf and VideoFile return (wrapped) for bytes
// that do not start like an MP4, QuickTime, WebM, Matroska or AVI file.
var ErrUnknownVideoType = errors.New("not an MP4, QuickTime, WebM, Matroska or AVI video")

// VideoMediaTypeOf is the media type of an encoded video, from its first bytes (its
// signature): an ISO base media box ("ftyp", "moov", "mdat", "wide" or "free" at offset
// 4) is MP4, or QuickTime when it is "ftyp" with the brand "qt  "; EBML 1A 45 DF A3 is
// WebM when "webm" occurs in the first 64 bytes, else Matroska; "RIFF" then "AVI " at
// offset 8 is AVI. Anything else is ErrUnknownVideoType.
func VideoMediaTypeOf(data []byte) (string, error) {
	if len(data) >= 8 {
		switch string(data[4:8]) {
		case "ftyp", "moov", "mdat", "wide", "free":
			if len(data) >= 12 && string(data[4:8]) == "ftyp" && string(data[8:12]) == "qt  " {
				return MediaTypeQuickTime, nil
			}
			return MediaTypeMP4, nil
		}
	}
	switch {
	case bytes.HasPrefix(data, []byte{0x1A, 0x45, 0xDF, 0xA3}):
		if bytes.Contains(data[:min(len(data), 64)], []byte("webm")) {
			return MediaTypeWebM, nil
		}
		return MediaTypeMatroska, nil
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "AVI ":
		return MediaTypeAVI, nil
	}
	n := min(len(data), 12)
	return "", fmt.Errorf("mlxgrpc: %w (first bytes % x)", ErrUnknownVideoType, data[:n])
}

// VideoPart is a message part of an encoded video file's bytes, with its media type
// (MediaTypeMP4, ...), sent as given: the server checks it against the bytes.
func VideoPart(data []byte, mediaType string) *pb.ContentPart {
	return &pb.ContentPart{Part: &pb.ContentPart_Video{Video: &pb.Video{Data: data, MediaType: mediaType}}}
}

// VideoFile is a message part of the video file at path, its media type detected
// from its signature (VideoMediaTypeOf): an error when it cannot be read or is not an
// MP4, QuickTime, WebM, Matroska or AVI file (errors.Is(err, ErrUnknownVideoType)).
//
//	video, err := mlxgrpc.VideoFile("clip.mp4")
//	msg := mlxgrpc.UserMessage(video, mlxgrpc.TextPart("What happens in the video?"))
func VideoFile(path string) (*pb.ContentPart, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mlxgrpc: reading video: %w", err)
	}
	mediaType, err := VideoMediaTypeOf(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return VideoPart(data, mediaType), nil
}
