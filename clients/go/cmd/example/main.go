// Command example walks through the mlx-grpc API: model info, a streamed
// generation, a generation cancelled mid-way, embeddings, an answer constrained
// by a JSON schema, and an invalid request's error details. The server address
// comes from MLXGRPC_ADDRESS (default localhost:50051); MLXGRPC_TOKEN, when set,
// is sent as the bearer token of every call (a server with a tokens file).
//
// With MLXGRPC_IMAGE set to an image file (PNG, JPEG, WebP or GIF), it runs the
// image step instead: the image and a question go to MLXGRPC_MODEL (default
// "vision", the test fixture's vision-language model) and the streamed answer is
// printed.
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func main() {
	addr := os.Getenv("MLXGRPC_ADDRESS")
	if addr == "" {
		addr = "localhost:50051"
	}
	client, err := mlxgrpc.Connect(addr, mlxgrpc.WithToken(os.Getenv("MLXGRPC_TOKEN")),
		mlxgrpc.WithDefaultTimeout(60*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	if path := os.Getenv("MLXGRPC_IMAGE"); path != "" {
		model := os.Getenv("MLXGRPC_MODEL")
		if model == "" {
			model = "vision"
		}
		describe(ctx, client, model, path)
		return
	}

	// 1. Model info.
	info, err := client.ModelInfo(ctx, "")
	if err != nil {
		log.Fatalf("GetModelInfo: %v", err)
	}
	fmt.Printf("model %q: kind=%s context=%d vocab=%d dtype=%s graph=%s chat_template=%v\n",
		info.GetName(), info.GetKind(), info.GetContextLength(), info.GetVocabSize(),
		info.GetDtype(), info.GetGraph().GetId(), info.GetHasChatTemplate())

	// 2. Stream a generation token by token.
	fmt.Print("generate: ")
	for ev, err := range client.Generate(ctx, &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "Tell me a story."}}}},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(16)},
	}).Events() {
		if err != nil {
			log.Fatalf("\nGenerate: %v", err)
		}
		switch e := ev.Event.(type) {
		case *pb.GenerateResponse_Started:
			fmt.Printf("[started %s, %d prompt tokens] ", e.Started.GetRequestId(), e.Started.GetPromptTokens())
		case *pb.GenerateResponse_Delta:
			fmt.Printf("%q ", e.Delta.GetText())
		case *pb.GenerateResponse_Finished:
			fmt.Printf("\n[finished: %s, %d tokens]\n", e.Finished.GetReason(), e.Finished.GetUsage().GetCompletionTokens())
		}
	}

	// 3. A long generation cancelled with the Cancel RPC after a few deltas. Its
	// request id is assigned client-side, so it is known before the call starts.
	deltas := 0
	gen := client.Generate(ctx, &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "Once upon a time"},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(2000), IgnoreEos: true},
	})
	for ev, err := range gen.Events() {
		if err != nil {
			log.Fatalf("Generate (to cancel): %v", err)
		}
		if ev.GetDelta() != nil {
			if deltas++; deltas == 3 {
				ok, err := client.CancelByID(ctx, gen.RequestID)
				fmt.Printf("cancel %s after %d deltas: cancelled=%v err=%v\n", gen.RequestID, deltas, ok, err)
			}
		}
		if f := ev.GetFinished(); f != nil {
			fmt.Printf("cancelled stream finished: %s after %d tokens\n", f.GetReason(), f.GetUsage().GetCompletionTokens())
		}
	}

	// 4. Embeddings of two inputs and their cosine similarity.
	embs, err := client.Embed(ctx, &pb.EmbedRequest{Inputs: []string{"A man is eating food.", "A man is eating a piece of bread."}})
	if err != nil {
		log.Fatalf("Embed: %v", err)
	}
	a, b := embs[0].GetEmbedding(), embs[1].GetEmbedding()
	fmt.Printf("embed: %d vectors of length %d, cosine similarity %.4f\n", len(embs), len(a), cosine(a, b))

	// 5. Structured output: an answer that validates against a JSON schema.
	format, err := mlxgrpc.JSONSchema(map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"city", "country"},
		"properties": map[string]any{
			"city":    map[string]any{"type": "string", "maxLength": 40},
			"country": map[string]any{"type": "string", "maxLength": 40},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	answer, err := client.Generate(ctx, &pb.GenerateRequest{
		Prompt:         &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{{Role: "user", Content: "Where is the Eiffel Tower?"}}}},
		Stopping:       &pb.StoppingCriteria{MaxTokens: proto.Int32(64)},
		ResponseFormat: format,
	}).Collect()
	if err != nil {
		log.Fatalf("Generate (JSON schema): %v", err)
	}
	fmt.Printf("json schema: %s [%s]\n", answer.Text, answer.Finished.GetReason())

	// 6. An invalid request and its google.rpc details (Collect: the unary form).
	_, err = client.Generate(ctx, &pb.GenerateRequest{
		Prompt:   &pb.GenerateRequest_Text{Text: "hi"},
		Sampling: &pb.SamplingParams{Temperature: proto.Float32(-1)},
	}).Collect()
	d := mlxgrpc.Details(err)
	if d == nil {
		log.Fatalf("invalid request: %v", err)
	}
	fmt.Printf("invalid request: code=%s fields=%v reason=%s\n", d.Code, d.Fields(), d.ErrorInfo.GetReason())
}

// describe is the image step: a user message of the image at path and a question,
// sent to model, its answer printed as it streams.
func describe(ctx context.Context, client *mlxgrpc.Client, model, path string) {
	image, err := mlxgrpc.ImageFile(path) // the media type from the file's signature
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("image %s (%s, %d bytes) to %q: ", path, image.GetImage().GetMediaType(), len(image.GetImage().GetData()), model)
	msg := mlxgrpc.UserMessage(image, mlxgrpc.TextPart("Describe the image."))
	for ev, err := range client.Generate(ctx, &pb.GenerateRequest{
		Model:    model,
		Prompt:   &pb.GenerateRequest_Chat{Chat: &pb.ChatMessages{Messages: []*pb.ChatMessage{msg}}},
		Stopping: &pb.StoppingCriteria{MaxTokens: proto.Int32(32)},
	}).Events() {
		if err != nil {
			d := mlxgrpc.Details(err)
			log.Fatalf("\nGenerate (image): %v (reason %s, fields %v)", err, d.ErrorInfo.GetReason(), d.Fields())
		}
		switch e := ev.Event.(type) {
		case *pb.GenerateResponse_Started:
			fmt.Printf("[%d prompt tokens] ", e.Started.GetPromptTokens())
		case *pb.GenerateResponse_Delta:
			fmt.Print(e.Delta.GetText())
		case *pb.GenerateResponse_Finished:
			fmt.Printf("\n[finished: %s, %d tokens]\n", e.Finished.GetReason(), e.Finished.GetUsage().GetCompletionTokens())
		}
	}
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}
