package mlxgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// Models at run time (admin role): a server started with --model-root loads a
// model from a directory (config.json and safetensors) or a .gguf file under that
// root while it runs, and unloads it again.
//
//	info, err := client.LoadModel(ctx, &pb.LoadModelRequest{Name: "qwen", Source: "qwen2.5-0.5b",
//		KeepAliveSeconds: mlxgrpc.KeepAlive(10 * time.Minute)}, func(step *pb.LoadModelResponse) {
//		fmt.Println(step.GetStage(), step.GetDone(), step.GetTotal())
//	})
//	...
//	gone, err := client.UnloadModel(ctx, "qwen", false)

// ErrLoadUnfinished is the error of LoadModel when the server's stream ended
// without its last step, SERVING with the model.
var ErrLoadUnfinished = errors.New("mlxgrpc: LoadModel ended without SERVING")

// LoadModelProgress streams the steps of loading a model (the LoadModel RPC):
// RESOLVING, PLANNING (with the idle models Evicted to make room), READING and
// CONVERTING (Done of Total), WARMING, and last SERVING with the Model; each
// with ElapsedSeconds. The iterator yields (step, nil) per step and at most one
// (nil, err) at the end if the call fails. A refusal with RetryInfo before the
// first step is retried. Breaking out of the loop, or cancelling ctx, cancels
// the call, which abandons the load.
func (c *Client) LoadModelProgress(ctx context.Context, req *pb.LoadModelRequest, opts ...grpc.CallOption) iter.Seq2[*pb.LoadModelResponse, error] {
	return func(yield func(*pb.LoadModelResponse, error) bool) {
		ctx, cancel := c.callContext(ctx)
		defer cancel()
		stream, step, err := openStream(ctx, c.retry, func(ctx context.Context) (grpc.ServerStreamingClient[pb.LoadModelResponse], error) {
			return c.InferenceServiceClient.LoadModel(ctx, req, opts...)
		})
		for err == nil {
			if !yield(step, nil) {
				return
			}
			step, err = stream.Recv()
		}
		if err != io.EOF {
			yield(nil, err)
		}
	}
}

// LoadModel loads req.Source (relative to the server's --model-root; empty with
// the Name of a catalog model: that entry) as req.Name with req.Kind (unset:
// generation), req.Options and req.KeepAliveSeconds, and returns the model's
// info once it serves. onProgress, when not nil, is called with each step (see
// LoadModelProgress). It needs the admin role (PERMISSION_DENIED,
// ADMIN_ROLE_REQUIRED); a source outside the root is INVALID_ARGUMENT, a name
// in use ALREADY_EXISTS, a model that can never fit OUT_OF_RANGE, no room
// because every resident model is in use RESOURCE_EXHAUSTED with RetryInfo. A
// stream that ends without SERVING is ErrLoadUnfinished. It overrides the
// embedded generated LoadModel (c.InferenceServiceClient.LoadModel is the raw
// stream).
func (c *Client) LoadModel(ctx context.Context, req *pb.LoadModelRequest, onProgress func(*pb.LoadModelResponse), opts ...grpc.CallOption) (*pb.ModelInfo, error) {
	var last *pb.LoadModelResponse
	for step, err := range c.LoadModelProgress(ctx, req, opts...) {
		if err != nil {
			return nil, err
		}
		last = step
		if onProgress != nil {
			onProgress(step)
		}
	}
	if last.GetStage() != pb.LoadStage_LOAD_STAGE_SERVING || last.GetModel() == nil {
		return nil, fmt.Errorf("%w (loading %q; last step %v)", ErrLoadUnfinished, req.GetName(), last.GetStage())
	}
	return last.GetModel(), nil
}

// UnloadModel unloads model name: new requests for it are UNAVAILABLE, the
// running ones finish (with cancelRequests, they are cancelled: their streams end
// with FINISH_REASON_CANCELLED), then its memory is freed. The response has the
// Name, the FreedBytes and its State now (a catalog model stays listed,
// MODEL_STATE_UNLOADED). It needs the admin role, and overrides the embedded
// generated UnloadModel (c.InferenceServiceClient.UnloadModel takes the request
// as it is).
func (c *Client) UnloadModel(ctx context.Context, name string, cancelRequests bool, opts ...grpc.CallOption) (*pb.UnloadModelResponse, error) {
	return c.InferenceServiceClient.UnloadModel(ctx, &pb.UnloadModelRequest{Name: name, CancelRequests: cancelRequests}, opts...)
}

// ModelStatuses lists every model the caller may use with its State (LOADING,
// READY, UNLOADING, or UNLOADED: a catalog model its first request loads),
// OnDemand, Pinned, KeepAliveSeconds and Aliases; for the admin role also
// ResidentBytes, IdleSeconds, Requests and LoadSeconds (ListModels' statuses:
// the ready models first, in the order of its models).
func (c *Client) ModelStatuses(ctx context.Context) ([]*pb.ModelStatus, error) {
	r, err := c.ListModels(ctx, &pb.ListModelsRequest{})
	return r.GetStatuses(), err
}

// KeepAlive is a KeepAliveSeconds (of a LoadModelRequest, a GenerateRequest or an
// EmbedRequest) of d: how long a model stays loaded once idle; 0 unloads it once
// idle, a negative d keeps it until UnloadModel. Unset (nil) keeps the server's
// setting. On Generate and Embed it applies to on-demand (catalog) models only.
func KeepAlive(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}
