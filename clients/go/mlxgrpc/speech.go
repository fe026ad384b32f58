package mlxgrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Speech to text: Transcribe sends an encoded audio file to a speech model (a
// Whisper-class model: ModelInfo's Kind is MODEL_KIND_SPEECH and
// Capabilities.Transcription is true) and streams its transcript back in timed
// segments. Build the audio with AudioFile(path) or AudioData(data, mediaType). The
// server checks the audio from its header before decoding it: a media type that does
// not match the bytes, an empty, truncated or too large file, or one over the duration
// limit is INVALID_ARGUMENT with a BadRequest field violation ("audio.media_type",
// "audio.data"); a language the model does not know is INVALID_ARGUMENT naming
// "language"; any model that is not a speech model refuses with FAILED_PRECONDITION
// (ErrorInfo reason UNSUPPORTED_OPERATION), an unknown one with NOT_FOUND.

// The media types of the audio files the server takes.
const (
	MediaTypeWAV  = "audio/wav"
	MediaTypeMP3  = "audio/mpeg"
	MediaTypeFLAC = "audio/flac"
	MediaTypeOgg  = "audio/ogg"
)

// What Transcribe writes (TranscribeRequest.Task).
const (
	TaskDefault    = pb.TranscriptionTask_TRANSCRIPTION_TASK_UNSPECIFIED // TaskTranscribe
	TaskTranscribe = pb.TranscriptionTask_TRANSCRIPTION_TASK_TRANSCRIBE  // the speech in its own language
	// TaskTranslate writes the speech in English (multilingual models only).
	TaskTranslate = pb.TranscriptionTask_TRANSCRIPTION_TASK_TRANSLATE
)

// ErrUnknownAudioType is what AudioMediaTypeOf and AudioFile return (wrapped) for bytes
// that do not start like a WAV, MP3, FLAC or Ogg file.
var ErrUnknownAudioType = errors.New("not a WAV, MP3, FLAC or Ogg audio file")

// ErrTranscriptUnfinished is the error of Transcription.Collect when the server's
// stream ended without its finished event.
var ErrTranscriptUnfinished = errors.New("mlxgrpc: Transcribe ended without finished")

// AudioMediaTypeOf is the media type of an encoded audio file, from its first bytes
// (its signature): "RIFF" then "WAVE" at offset 8 is WAV, "fLaC" FLAC, "OggS" Ogg,
// "ID3" (a tag) or an MPEG frame sync (FF then the top 3 bits of the next byte set)
// MP3. Anything else is ErrUnknownAudioType.
func AudioMediaTypeOf(data []byte) (string, error) {
	switch {
	case len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WAVE":
		return MediaTypeWAV, nil
	case bytes.HasPrefix(data, []byte("fLaC")):
		return MediaTypeFLAC, nil
	case bytes.HasPrefix(data, []byte("OggS")):
		return MediaTypeOgg, nil
	case bytes.HasPrefix(data, []byte("ID3")), len(data) >= 2 && data[0] == 0xFF && data[1]&0xE0 == 0xE0:
		return MediaTypeMP3, nil
	}
	n := min(len(data), 12)
	return "", fmt.Errorf("mlxgrpc: %w (first bytes % x)", ErrUnknownAudioType, data[:n])
}

// AudioData is the audio of an encoded audio file's bytes, with its media type
// (MediaTypeWAV, ...), sent as given: the server checks it against the bytes.
func AudioData(data []byte, mediaType string) *pb.Audio {
	return &pb.Audio{Data: data, MediaType: mediaType}
}

// AudioFile is the audio of the file at path, its media type detected from its
// signature (AudioMediaTypeOf): an error when it cannot be read or is not a WAV, MP3,
// FLAC or Ogg file (errors.Is(err, ErrUnknownAudioType)).
//
//	audio, err := mlxgrpc.AudioFile("speech.wav")
//	t, err := client.Transcribe(ctx, &pb.TranscribeRequest{Model: "whisper", Audio: audio}).Collect()
func AudioFile(path string) (*pb.Audio, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mlxgrpc: reading audio: %w", err)
	}
	mediaType, err := AudioMediaTypeOf(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return AudioData(data, mediaType), nil
}

// Audio in the prompt: a chat message's parts can hold audio files as they hold images
// and videos, heard by the model where the part stands. Build one with
// UserMessage(audio, TextPart(text)), the audio from AudioFilePart(path) or
// AudioPart(data, mediaType), and send it to a model that takes audio (ModelInfo's
// Capabilities.Media.Audio is true: Qwen3-Omni); any other model refuses it with
// FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION). It is checked as
// Transcribe's audio is, by default at most 4 in a request: INVALID_ARGUMENT naming
// chat.messages[i].parts[j].audio.media_type or ...audio.data. Its length decides its
// prompt tokens (Qwen3-Omni: about 13 a second, plus 2).

// AudioPart is a message part of an encoded audio file's bytes, with its media type
// (MediaTypeWAV, ...; AudioMediaTypeOf detects it), sent as given: the server checks it
// against the bytes.
func AudioPart(data []byte, mediaType string) *pb.ContentPart {
	return &pb.ContentPart{Part: &pb.ContentPart_Audio{Audio: AudioData(data, mediaType)}}
}

// AudioFilePart is a message part of the audio file at path, read as AudioFile reads it
// (its media type detected from its signature): an error when it cannot be read or is
// not a WAV, MP3, FLAC or Ogg file (errors.Is(err, ErrUnknownAudioType)).
//
//	audio, err := mlxgrpc.AudioFilePart("speech.wav")
//	msg := mlxgrpc.UserMessage(audio, mlxgrpc.TextPart("What is said?"))
func AudioFilePart(path string) (*pb.ContentPart, error) {
	audio, err := AudioFile(path)
	if err != nil {
		return nil, err
	}
	return &pb.ContentPart{Part: &pb.ContentPart_Audio{Audio: audio}}, nil
}

// Transcription is one Transcribe request: range over Events for its stream, or
// Collect it whole. Nothing is sent until one of them is called.
type Transcription struct {
	// RequestID names the request on the server: the request's own, or one assigned
	// here when it had none. Any goroutine or process may pass it to CancelByID at once.
	RequestID string

	client *Client
	ctx    context.Context
	req    *pb.TranscribeRequest
	opts   []grpc.CallOption
}

// Segment is one piece of a transcript, as the model timed it.
type Segment struct {
	Index        int     // its position among the segments, from 0
	StartSeconds float64 // where it starts in the audio
	EndSeconds   float64 // where it ends in the audio
	Text         string
	// TokenIDs are the tokens the model wrote for it, timestamp tokens included.
	TokenIDs []int32
	// AvgLogprob is the mean log probability of its tokens.
	AvgLogprob float64
	// NoSpeechProb is the model's probability that its window holds no speech.
	NoSpeechProb float64
	// CompressionRatio is its text's gzip compression ratio (high: repetitive).
	CompressionRatio float64
}

// Transcript is everything one transcription produced.
type Transcript struct {
	RequestID    string  // the request's id (the started event's)
	Model        string  // the model that transcribed it
	AudioSeconds float64 // the audio's duration
	// Segments are the transcript's pieces in time order.
	Segments []Segment
	// Text is the whole transcript: every segment's text.
	Text string
	// Language is the spoken language (ISO 639-1): the request's, or the one the model
	// detected.
	Language string
	// SegmentCount is the number of segments the server says it sent (len(Segments)
	// once the stream is whole).
	SegmentCount int
	// Seconds is the time from admission to the transcript.
	Seconds float64
}

// Transcribe prepares a transcription of req.Audio with req.Model (empty: the server's
// first speech model), in req.Language (an ISO 639-1 code; empty: detected by a
// multilingual model, English for an English-only one), req.Task (TaskTranscribe, the
// default, or TaskTranslate into English) after req.Prompt (names, spelling, style).
// req is not modified (a copy gets the client-side request id when it has none, and
// the client's WithPriority when its Priority is 0).
//
//	audio, err := mlxgrpc.AudioFile("speech.wav")
//	t, err := client.Transcribe(ctx, &pb.TranscribeRequest{Model: "whisper", Audio: audio, Language: "en"}).Collect()
//	for _, s := range t.Segments {
//		fmt.Printf("[%.2f-%.2f] %s\n", s.StartSeconds, s.EndSeconds, s.Text)
//	}
func (c *Client) Transcribe(ctx context.Context, req *pb.TranscribeRequest, opts ...grpc.CallOption) *Transcription {
	req = c.transcribeRequest(req)
	if req.GetRequestId() == "" {
		req = proto.Clone(req).(*pb.TranscribeRequest)
		req.RequestId = newRequestID()
	}
	return &Transcription{RequestID: req.GetRequestId(), client: c, ctx: ctx, req: req, opts: opts}
}

// Events streams the transcription: started (once the audio is decoded and the
// request admitted), one segment per piece of the transcript in time order, then
// finished. The iterator yields (event, nil) per event and at most one (nil, err) at
// the end if the call fails. A refusal with RetryInfo before the first event is
// retried. Breaking out of the loop, or cancelling ctx, cancels the call.
func (t *Transcription) Events() iter.Seq2[*pb.TranscribeResponse, error] {
	return func(yield func(*pb.TranscribeResponse, error) bool) {
		ctx, cancel := t.client.callContext(t.ctx)
		defer cancel()
		stream, ev, err := openStream(ctx, t.client.retry, func(ctx context.Context) (grpc.ServerStreamingClient[pb.TranscribeResponse], error) {
			return t.client.InferenceServiceClient.Transcribe(ctx, t.req, t.opts...)
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

// Collect runs the transcription to its end and assembles its events into a
// Transcript. On an error it returns what arrived before it with the error;
// a stream that ends without its finished event is ErrTranscriptUnfinished.
func (t *Transcription) Collect() (*Transcript, error) {
	return CollectTranscript(t.RequestID, t.Events())
}

// CollectTranscript assembles a Transcribe stream's events (Transcription.Events, or
// the raw RPC's read into an iterator) into a Transcript; requestID is its RequestID
// until the started event names one.
func CollectTranscript(requestID string, events iter.Seq2[*pb.TranscribeResponse, error]) (*Transcript, error) {
	out := &Transcript{RequestID: requestID}
	finished := false
	for ev, err := range events {
		if err != nil {
			return out, err
		}
		switch e := ev.GetEvent().(type) {
		case *pb.TranscribeResponse_Started:
			if id := e.Started.GetRequestId(); id != "" {
				out.RequestID = id
			}
			out.Model = e.Started.GetModel()
			out.AudioSeconds = e.Started.GetAudioSeconds()
		case *pb.TranscribeResponse_Segment:
			s := e.Segment
			out.Segments = append(out.Segments, Segment{Index: int(s.GetIndex()), StartSeconds: s.GetStartSeconds(),
				EndSeconds: s.GetEndSeconds(), Text: s.GetText(), TokenIDs: s.GetTokenIds(), AvgLogprob: s.GetAvgLogprob(),
				NoSpeechProb: s.GetNoSpeechProb(), CompressionRatio: s.GetCompressionRatio()})
		case *pb.TranscribeResponse_Finished:
			finished = true
			out.Text = e.Finished.GetText()
			out.Language = e.Finished.GetLanguage()
			out.SegmentCount = int(e.Finished.GetSegments())
			out.Seconds = e.Finished.GetSeconds()
		}
	}
	if !finished {
		return out, ErrTranscriptUnfinished
	}
	return out, nil
}
