package mlxgrpc_test

// Packed Embed: PackedEmbeddings messages built by hand with known bytes for each
// element type decode into input order (offline), EmbedPacked sets Packed on a copy
// and gathers an in-process server's messages (offline), and against a live server
// the packed vectors are the per-input ones, int8 close to them, ubinary their signs,
// and a smaller type without Packed is INVALID_ARGUMENT naming embedding_type.

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"mlxgrpc.dev/go/mlxgrpc"
	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

func packedResponse(p *pb.PackedEmbeddings) *pb.EmbedResponse { return &pb.EmbedResponse{Packed: p} }

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFloat32(t *testing.T) {
	// 1.0, -2.5 | 0.5, 0.0, little-endian IEEE single; the vectors of inputs 1 and 0
	data := hexBytes(t, "0000803f"+"000020c0"+"0000003f"+"00000000")
	for _, typ := range []pb.EmbeddingType{mlxgrpc.EmbeddingFloat32, pb.EmbeddingType_EMBEDDING_TYPE_UNSPECIFIED} {
		e, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(&pb.PackedEmbeddings{
			Indices: []int32{1, 0}, Tokens: []int32{4, 5}, Dimensions: 2, Type: typ, Data: data})}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if e.Type != mlxgrpc.EmbeddingFloat32 || e.Dimensions != 2 || e.Len() != 2 || e.Messages != 1 ||
			!slices.Equal(e.Float32[0], []float32{0.5, 0}) || !slices.Equal(e.Float32[1], []float32{1, -2.5}) ||
			!slices.Equal(e.Tokens, []int32{5, 4}) {
			t.Errorf("decoded %+v", e)
		}
	}
}

func TestDecodeFloat16ExactHalves(t *testing.T) {
	// 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800 | 65504 = 0x7bff (largest), 2^-24 = 0x0001
	// (smallest subnormal), 0.333251953125 = 0x3555
	data := hexBytes(t, "003c"+"00c0"+"0038"+"ff7b"+"0100"+"5535")
	e, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(&pb.PackedEmbeddings{
		Indices: []int32{0, 1}, Tokens: []int32{2, 2}, Dimensions: 3, Type: mlxgrpc.EmbeddingFloat16, Data: data})}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Float32[0], []float32{1, -2, 0.5}) || !slices.Equal(e.Float32[1], []float32{65504, 0x1p-24, 0.333251953125}) {
		t.Errorf("float16 decoded to %v", e.Float32)
	}
	for h, want := range map[uint16]float32{0x0000: 0, 0x03ff: 0x3ffp-24, 0x0400: 0x1p-14, 0xfbff: -65504} {
		if got := mlxgrpc.HalfToFloat32(h); got != want {
			t.Errorf("HalfToFloat32(%#04x) = %v, want %v", h, got, want)
		}
	}
	if got := mlxgrpc.HalfToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("HalfToFloat32(0x8000) = %v, want -0", got)
	}
	if !math.IsInf(float64(mlxgrpc.HalfToFloat32(0xfc00)), -1) || !math.IsNaN(float64(mlxgrpc.HalfToFloat32(0x7e00))) {
		t.Error("float16 infinity or NaN")
	}
}

func TestDecodeInt8WithScales(t *testing.T) {
	data := []byte{0x7f, 0x81, 0x00, 0x40, 0x01, 0xff, 0x80, 0x00} // 127 -127 0 64 | 1 -1 -128 0
	p := &pb.PackedEmbeddings{Indices: []int32{0, 1}, Tokens: []int32{1, 1}, Dimensions: 4,
		Type: mlxgrpc.EmbeddingInt8, Data: data, Scales: []float32{0.5, 0.25}}
	e, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(p)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Int8[0], []int8{127, -127, 0, 64}) || !slices.Equal(e.Int8[1], []int8{1, -1, -128, 0}) ||
		!slices.Equal(e.Scales, []float32{0.5, 0.25}) {
		t.Errorf("int8 decoded to %v × %v", e.Int8, e.Scales)
	}
	floats := e.Floats()
	if !slices.Equal(floats[0], []float32{63.5, -63.5, 0, 32}) || !slices.Equal(floats[1], []float32{0.25, -0.25, -32, 0}) {
		t.Errorf("dequantized to %v", floats)
	}
	p.Scales = p.Scales[:1]
	if _, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(p)}, 2); err == nil || !strings.Contains(err.Error(), "scales") {
		t.Errorf("one scale for two vectors: %v", err)
	}
}

func TestDecodeUbinaryNotAMultipleOfEight(t *testing.T) {
	// 10 bits a vector in 2 bytes, the first value in the most significant bit, unused low bits zero
	data := []byte{0b10110000, 0b01000000, 0b01111111, 0b11000000}
	p := &pb.PackedEmbeddings{Indices: []int32{0, 1}, Tokens: []int32{3, 3}, Dimensions: 10, Type: mlxgrpc.EmbeddingUbinary, Data: data}
	e, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(p)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if e.Dimensions != 10 || !slices.Equal(e.Binary[0], data[:2]) || !slices.Equal(e.Binary[1], data[2:]) {
		t.Errorf("ubinary decoded to %v (%d dimensions)", e.Binary, e.Dimensions)
	}
	if got := mlxgrpc.UnpackBits(e.Binary[0], 10); !slices.Equal(got, []uint8{1, 0, 1, 1, 0, 0, 0, 0, 0, 1}) {
		t.Errorf("UnpackBits = %v", got)
	}
	if got := e.Floats()[1]; !slices.Equal(got, []float32{0, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
		t.Errorf("Floats = %v", got)
	}
	if d := mlxgrpc.Hamming(e.Binary[0], e.Binary[1]); d != 7 || mlxgrpc.Hamming(e.Binary[0], e.Binary[0]) != 0 {
		t.Errorf("Hamming = %d, want 7", d)
	}
	p.Data = data[:3]
	if _, err := mlxgrpc.DecodeEmbeddings([]*pb.EmbedResponse{packedResponse(p)}, 2); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("3 bytes for two 10-bit vectors: %v", err)
	}
}

func f32le(values ...float32) []byte {
	out := make([]byte, 0, 4*len(values))
	for _, v := range values {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

func TestDecodeGathersMessagesInInputOrder(t *testing.T) {
	responses := []*pb.EmbedResponse{
		packedResponse(&pb.PackedEmbeddings{Indices: []int32{2, 0}, Tokens: []int32{7, 5}, Dimensions: 1, Type: mlxgrpc.EmbeddingFloat32, Data: f32le(3, 1)}),
		packedResponse(&pb.PackedEmbeddings{Indices: []int32{1}, Tokens: []int32{6}, Dimensions: 1, Type: mlxgrpc.EmbeddingFloat32, Data: f32le(2)}),
	}
	e, err := mlxgrpc.DecodeEmbeddings(responses, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(e.Float32, [][]float32{{1}, {2}, {3}}, slices.Equal) || !slices.Equal(e.Tokens, []int32{5, 6, 7}) || e.Messages != 2 {
		t.Errorf("gathered %+v", e)
	}
	if again, err := mlxgrpc.DecodeEmbeddings(responses, -1); err != nil || again.Len() != 3 {
		t.Errorf("inputs -1: %v, %v", again, err)
	}
	mixed := packedResponse(&pb.PackedEmbeddings{Indices: []int32{1}, Dimensions: 1, Type: mlxgrpc.EmbeddingInt8, Data: []byte{1}, Scales: []float32{1}})
	for name, bad := range map[string][]*pb.EmbedResponse{
		"missing":    responses[:1],
		"repeated":   {responses[0], responses[0]},
		"not packed": {{Index: 0, Embedding: []float32{1}}},
		"mixed":      {responses[0], mixed},
	} {
		if _, err := mlxgrpc.DecodeEmbeddings(bad, 3); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// packing is an in-process InferenceService whose Embed sends packed requests'
// vectors (each its index as a float32) in two messages, the later inputs first.
type packing struct {
	refusing
	mu   sync.Mutex
	seen []*pb.EmbedRequest
}

func (p *packing) Embed(req *pb.EmbedRequest, stream grpc.ServerStreamingServer[pb.EmbedResponse]) error {
	p.mu.Lock()
	p.seen = append(p.seen, req)
	p.mu.Unlock()
	n := int32(len(req.GetInputs()))
	if !req.GetPacked() {
		for i := range n {
			if err := stream.Send(&pb.EmbedResponse{Index: i, Embedding: []float32{float32(i)}}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, span := range [][2]int32{{n / 2, n}, {0, n / 2}} {
		var indices, tokens []int32
		var values []float32
		for i := span[0]; i < span[1]; i++ {
			indices, tokens, values = append(indices, i), append(tokens, i+1), append(values, float32(i))
		}
		if len(indices) > 0 {
			msg := &pb.PackedEmbeddings{Indices: indices, Tokens: tokens, Dimensions: 1, Type: mlxgrpc.EmbeddingFloat32, Data: f32le(values...)}
			if err := stream.Send(packedResponse(msg)); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestEmbedPackedOverTheWire(t *testing.T) {
	fake := &packing{}
	c, err := mlxgrpc.Connect(serveRefusing(t, fake))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &pb.EmbedRequest{Inputs: []string{"a", "b", "c", "d", "e"}, Truncate: mlxgrpc.TruncationNone}
	e, err := c.EmbedPacked(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(e.Float32, [][]float32{{0}, {1}, {2}, {3}, {4}}, slices.Equal) || e.Messages != 2 || !slices.Equal(e.Tokens, []int32{1, 2, 3, 4, 5}) {
		t.Errorf("EmbedPacked = %+v", e)
	}
	if req.GetPacked() {
		t.Error("the caller's request was modified")
	}
	plain, err := c.Embed(t.Context(), &pb.EmbedRequest{Inputs: []string{"a", "b"}})
	if err != nil || len(plain) != 2 || plain[1].GetIndex() != 1 {
		t.Errorf("Embed without Packed: %v, %v", plain, err)
	}
	if len(fake.seen) != 2 || !fake.seen[0].GetPacked() || fake.seen[0].GetTruncate() != mlxgrpc.TruncationNone || fake.seen[1].GetPacked() {
		t.Errorf("the server saw %v", fake.seen)
	}
}

// seventy short texts: a packed Embed of them is at most ceil(70/64) = 2 messages.
func seventy() []string {
	topics := []string{"rivers", "bread", "the stock market", "mountains", "music", "a cat", "rain", "trains", "chess", "the sea"}
	out := make([]string, 70)
	for i := range out {
		out[i] = fmt.Sprintf("Note %d: a short sentence about %s.", i, topics[i%len(topics)])
	}
	return out
}

func cosine(a, b []float32) float64 {
	return dot(a, b) / math.Sqrt(dot(a, a)*dot(b, b))
}

func TestEmbedPackedLive(t *testing.T) {
	s := live(t)
	if s.embedder == nil {
		unavailable(t, "the server has no embedding model")
	}
	texts := seventy()
	plain, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: texts})
	if err != nil {
		t.Fatal(err)
	}
	packed, err := s.c.EmbedPacked(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: texts})
	if err != nil {
		t.Fatal(err)
	}
	if packed.Len() != 70 || packed.Messages < 1 || packed.Messages > 2 || packed.Type != mlxgrpc.EmbeddingFloat32 ||
		packed.Dimensions != int(s.embedder.GetEmbeddingDimensions()) {
		t.Fatalf("float32: %d vectors of %d in %d messages, type %v", packed.Len(), packed.Dimensions, packed.Messages, packed.Type)
	}
	for i, r := range plain {
		if !slices.Equal(packed.Float32[i], r.GetEmbedding()) || packed.Tokens[i] != r.GetTokens() {
			t.Fatalf("input %d: the packed float32 vector differs from the per-input one", i)
		}
	}

	int8s, err := s.c.EmbedPacked(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: texts, EmbeddingType: mlxgrpc.EmbeddingInt8})
	if err != nil {
		t.Fatal(err)
	}
	if int8s.Type != mlxgrpc.EmbeddingInt8 || len(int8s.Int8) != 70 || len(int8s.Scales) != 70 || int8s.Messages > 2 {
		t.Fatalf("int8: %d vectors, %d scales, %d messages", len(int8s.Int8), len(int8s.Scales), int8s.Messages)
	}
	for i, v := range int8s.Floats() {
		if c := cosine(v, plain[i].GetEmbedding()); c < 0.999 {
			t.Errorf("input %d: int8 dequantized has cosine %f with float32", i, c)
		}
	}

	half, err := s.c.EmbedPacked(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: texts, EmbeddingType: mlxgrpc.EmbeddingFloat16})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range half.Float32 {
		for j, x := range v {
			if math.Abs(float64(x-plain[i].GetEmbedding()[j])) > 1e-3 {
				t.Fatalf("input %d value %d: float16 %f, float32 %f", i, j, x, plain[i].GetEmbedding()[j])
			}
		}
	}

	_, err = s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: texts[:2], EmbeddingType: mlxgrpc.EmbeddingInt8})
	if d := mlxgrpc.Details(err); d == nil || d.Code != codes.InvalidArgument || !slices.Equal(d.Fields(), []string{"embedding_type"}) {
		t.Errorf("int8 without Packed: %v, want InvalidArgument naming embedding_type", err)
	}
}

func TestEmbedPackedUbinaryLive(t *testing.T) {
	s := live(t)
	if s.embedder == nil {
		unavailable(t, "the server has no embedding model")
	}
	// 100 dimensions: 13 bytes a vector, the last one's four low bits unused
	inputs := []string{"A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."}
	plain, err := s.c.Embed(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs, Dimensions: 100})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.c.EmbedPacked(s.ctx, &pb.EmbedRequest{Model: s.embedder.GetName(), Inputs: inputs, Dimensions: 100,
		EmbeddingType: mlxgrpc.EmbeddingUbinary})
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != mlxgrpc.EmbeddingUbinary || e.Dimensions != 100 || e.Messages != 1 {
		t.Fatalf("ubinary: type %v, %d dimensions, %d messages", e.Type, e.Dimensions, e.Messages)
	}
	for i, v := range e.Binary {
		if len(v) != 13 || v[12]&0x0f != 0 {
			t.Errorf("input %d: %d bytes, last %08b", i, len(v), v[12])
		}
		for j, bit := range mlxgrpc.UnpackBits(v, 100) {
			if want := plain[i].GetEmbedding()[j] > 0; (bit == 1) != want {
				t.Fatalf("input %d bit %d = %d, value %f", i, j, bit, plain[i].GetEmbedding()[j])
			}
		}
	}
	if food, bread, stocks := e.Binary[0], e.Binary[1], e.Binary[2]; mlxgrpc.Hamming(food, bread) >= mlxgrpc.Hamming(food, stocks) {
		t.Errorf("Hamming: similar %d, unrelated %d", mlxgrpc.Hamming(food, bread), mlxgrpc.Hamming(food, stocks))
	}
}
