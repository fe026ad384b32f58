package mlxgrpc_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// refusing is an in-process InferenceService that refuses Generate and
// GetModelInfo `refusals` times the way mlx-grpc does when its queue is full.
type refusing struct {
	pb.UnimplementedInferenceServiceServer
	mu           sync.Mutex
	refusals     int
	code         codes.Code
	delay        time.Duration // 0: no RetryInfo
	afterStarted bool
	reason       string // ErrorInfo.reason; empty: QUEUE_FULL
	ids          []string
}

func (r *refusing) refuse(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	if r.refusals == 0 {
		return nil
	}
	r.refusals--
	reason := r.reason
	if reason == "" {
		reason = "QUEUE_FULL"
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: "mlxgrpc.v1", Reason: reason}}
	if r.delay > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(r.delay)})
	}
	st, err := status.New(r.code, "refused for now").WithDetails(details...)
	if err != nil {
		return err
	}
	return st.Err()
}

func (r *refusing) Generate(req *pb.GenerateRequest, stream grpc.ServerStreamingServer[pb.GenerateResponse]) error {
	if r.afterStarted {
		started := &pb.GenerateResponse_Started{Started: &pb.GenerationStarted{RequestId: req.GetRequestId()}}
		if err := stream.Send(&pb.GenerateResponse{Event: started}); err != nil {
			return err
		}
	}
	if err := r.refuse(req.GetRequestId()); err != nil {
		return err
	}
	finished := &pb.GenerateResponse_Finished{Finished: &pb.GenerationFinished{Reason: pb.FinishReason_FINISH_REASON_LENGTH}}
	return stream.Send(&pb.GenerateResponse{Event: finished})
}

func (r *refusing) GetModelInfo(_ context.Context, req *pb.GetModelInfoRequest) (*pb.GetModelInfoResponse, error) {
	if err := r.refuse("info"); err != nil {
		return nil, err
	}
	return &pb.GetModelInfoResponse{Info: &pb.ModelInfo{Name: req.GetModel()}}, nil
}

func serveRefusing(t *testing.T, r pb.InferenceServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterInferenceServiceServer(srv, r)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestRefusalsAreRetriedAfterTheServersDelay(t *testing.T) {
	r := &refusing{refusals: 2, code: codes.ResourceExhausted, delay: 200 * time.Millisecond}
	var seen []time.Duration
	c, err := mlxgrpc.Connect(serveRefusing(t, r), mlxgrpc.WithRetryObserver(func(d *mlxgrpc.ErrorDetails, delay time.Duration) {
		seen = append(seen, delay)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	res, err := c.Generate(context.Background(), &pb.GenerateRequest{RequestId: "same-id"}).Collect()
	if err != nil || res.Finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("Generate: %v, %v", res, err)
	}
	if !slices.Equal(r.ids, []string{"same-id", "same-id", "same-id"}) || len(seen) != 2 || time.Since(start) < 400*time.Millisecond {
		t.Errorf("attempts %v, retries %v after %s", r.ids, seen, time.Since(start))
	}
	// Unary calls (here through the embedded generated client) retry too.
	r.refusals, r.code, r.ids = 1, codes.Unavailable, nil
	if info, err := c.ModelInfo(context.Background(), "m"); err != nil || info.GetName() != "m" || len(r.ids) != 2 {
		t.Errorf("ModelInfo: %v, %v after %d attempts", info, err, len(r.ids))
	}
}

func TestRefusalsThatAreNotRetried(t *testing.T) {
	cases := []struct {
		name     string
		server   *refusing
		opts     []mlxgrpc.Option
		attempts int
	}{
		{"without RetryInfo", &refusing{code: codes.ResourceExhausted}, nil, 1},
		{"once the attempts are spent", &refusing{code: codes.ResourceExhausted, delay: 100 * time.Millisecond}, nil, 3},
		{"past the deadline", &refusing{code: codes.Unavailable, delay: 5 * time.Second},
			[]mlxgrpc.Option{mlxgrpc.WithDefaultTimeout(time.Second)}, 1},
		{"after the first event", &refusing{code: codes.ResourceExhausted, delay: 100 * time.Millisecond, afterStarted: true}, nil, 1},
		{"with max attempts 1", &refusing{code: codes.ResourceExhausted, delay: 100 * time.Millisecond},
			[]mlxgrpc.Option{mlxgrpc.WithMaxAttempts(1)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.server
			r.refusals = 5
			c, err := mlxgrpc.Connect(serveRefusing(t, r), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, err = c.Generate(context.Background(), &pb.GenerateRequest{}).Collect()
			if code := status.Code(err); code != codes.ResourceExhausted && code != codes.Unavailable {
				t.Errorf("error %v", err)
			}
			if len(r.ids) != tc.attempts || time.Since(start) > time.Duration(tc.attempts)*100*time.Millisecond+time.Second {
				t.Errorf("%d attempts in %s, want %d", len(r.ids), time.Since(start), tc.attempts)
			}
		})
	}
	if _, err := mlxgrpc.Connect("localhost:1", mlxgrpc.WithMaxAttempts(0)); err == nil {
		t.Error("max attempts 0 accepted")
	}
}

// TestQueueFullIsRetried fills the live server's admission queue, then checks
// that a Generate refused with RESOURCE_EXHAUSTED waits the server's delay and
// succeeds once there is room.
func TestQueueFullIsRetried(t *testing.T) {
	s := live(t)
	fillers, refusal := saturate(t, s)
	d := mlxgrpc.Details(refusal)
	delay, ok := d.RetryDelay()
	if d.Code != codes.ResourceExhausted || d.ErrorInfo.GetReason() != "QUEUE_FULL" || !ok || delay <= 0 {
		release(t, s, fillers)
		t.Fatalf("refusal %v", refusal)
	}
	var retries []time.Duration
	retrying, err := mlxgrpc.Connect(s.address, token(), mlxgrpc.WithRetryObserver(func(d *mlxgrpc.ErrorDetails, delay time.Duration) {
		retries = append(retries, delay)
		release(t, s, fillers) // room for the next attempt
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer retrying.Close()
	defer release(t, s, fillers)
	start := time.Now()
	r, err := retrying.Generate(s.ctx, text("Hello", exact(3))).Collect()
	if err != nil || len(r.TokenIDs) != 3 || r.Finished.GetReason() != pb.FinishReason_FINISH_REASON_LENGTH {
		t.Fatalf("after the retry: %v, %v", r, err)
	}
	if !slices.Equal(retries, []time.Duration{delay}) || time.Since(start) < delay {
		t.Errorf("retries %v in %s, want one after %s", retries, time.Since(start), delay)
	}
}

type filler struct {
	cancel  context.CancelFunc
	refusal chan error // receives the call's error when it ends
}

// saturate opens long generations (the generated client: no retries) in
// batches until the server refuses one with RESOURCE_EXHAUSTED.
func saturate(t *testing.T, s *server) ([]filler, error) {
	t.Helper()
	var running []filler
	for len(running) < 256 {
		batch := make([]filler, 8)
		for i := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			batch[i] = filler{cancel: cancel, refusal: make(chan error, 1)}
			req := text("Count:", exact(4000))
			req.Model = s.generator.GetName()
			go func(f filler) {
				stream, err := s.c.InferenceServiceClient.Generate(ctx, req)
				for err == nil {
					_, err = stream.Recv()
				}
				f.refusal <- err
			}(batch[i])
		}
		// A refusal comes back at once: stop waiting then, before fillers end and make room.
		for waited := 0; waited < 1000 && !slices.ContainsFunc(batch, ended); waited += 50 {
			time.Sleep(50 * time.Millisecond)
		}
		var refused error
		for _, f := range batch {
			select {
			case err := <-f.refusal:
				if status.Code(err) == codes.ResourceExhausted {
					refused = err
				}
			default:
				running = append(running, f)
			}
		}
		if refused != nil {
			return running, refused
		}
	}
	release(t, s, running)
	t.Fatal("256 concurrent generations and no RESOURCE_EXHAUSTED")
	return nil, nil
}

func ended(f filler) bool { return len(f.refusal) > 0 }

// release cancels the fillers and waits until the server admits requests again.
func release(t *testing.T, s *server, fillers []filler) {
	for _, f := range fillers {
		f.cancel()
	}
	probe := text("x", &pb.StoppingCriteria{MaxTokens: proto.Int32(1)})
	probe.Model = s.generator.GetName()
	for range 300 {
		stream, err := s.c.InferenceServiceClient.Generate(s.ctx, probe)
		for err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
