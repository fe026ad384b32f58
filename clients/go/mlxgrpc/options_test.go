package mlxgrpc_test

// Connection options against an in-process TLS server on loopback: these need
// no live mlx-grpc server and always run.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

type fakeServer struct {
	pb.UnimplementedInferenceServiceServer
}

// GetModelInfo echoes the authorization header as the model name; model
// "slow" sleeps, model "busy" fails with RESOURCE_EXHAUSTED and RetryInfo.
func (fakeServer) GetModelInfo(ctx context.Context, req *pb.GetModelInfoRequest) (*pb.GetModelInfoResponse, error) {
	switch req.GetModel() {
	case "slow":
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	case "busy":
		st, err := status.New(codes.ResourceExhausted, "queue full").WithDetails(
			&errdetails.ErrorInfo{Domain: "mlxgrpc.v1", Reason: "QUEUE_FULL"},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return &pb.GetModelInfoResponse{Info: &pb.ModelInfo{Name: firstOr(md.Get("authorization"), "")}}, nil
}

func firstOr(v []string, def string) string {
	if len(v) == 0 {
		return def
	}
	return v[0]
}

// tlsServer starts the fake server with a self-signed certificate for
// 127.0.0.1 and returns its address and the certificate's PEM file.
func tlsServer(t *testing.T) (addr, caFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mlxgrpc test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	pb.RegisterInferenceServiceServer(srv, fakeServer{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), caFile
}

func TestConnectTLSTokenTimeout(t *testing.T) {
	addr, caFile := tlsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := mlxgrpc.Connect(addr, mlxgrpc.WithTLS(caFile), mlxgrpc.WithToken("s3cret"),
		mlxgrpc.WithDefaultTimeout(300*time.Millisecond), mlxgrpc.WithMaxAttempts(1)) // "busy" is not retried
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	info, err := c.ModelInfo(ctx, "")
	if err != nil {
		t.Fatalf("TLS call with CA file: %v", err)
	}
	if info.GetName() != "Bearer s3cret" {
		t.Errorf("server saw authorization %q, want %q", info.GetName(), "Bearer s3cret")
	}

	// The default timeout applies to calls whose context has no deadline...
	start := time.Now()
	_, err = c.ModelInfo(context.Background(), "slow")
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 3*time.Second {
		t.Errorf("slow call: %v after %s, want DeadlineExceeded after ~300ms", err, time.Since(start))
	}
	// ...but not to calls that set their own.
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	_, err = c.ModelInfo(sctx, "slow")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("slow call with own deadline: %v", err)
	}

	// RetryInfo and ErrorInfo come through Details.
	_, err = c.ModelInfo(ctx, "busy")
	d := mlxgrpc.Details(err)
	if d == nil || d.Code != codes.ResourceExhausted || d.ErrorInfo.GetReason() != "QUEUE_FULL" {
		t.Fatalf("busy: %v", err)
	}
	if delay, ok := d.RetryDelay(); !ok || delay != 1500*time.Millisecond {
		t.Errorf("retry delay %s, %v; want 1.5s", delay, ok)
	}

	// Without the CA (system roots only) the self-signed server is rejected.
	bad, err := mlxgrpc.Connect(addr, mlxgrpc.WithTLS(""))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.ModelInfo(ctx, ""); status.Code(err) != codes.Unavailable {
		t.Errorf("untrusted server: %v, want Unavailable", err)
	}

	if _, err := mlxgrpc.Connect(addr, mlxgrpc.WithTLS(filepath.Join(t.TempDir(), "missing.pem"))); err == nil {
		t.Error("missing CA file: want an error")
	}
}
