package mlxgrpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "mlxgrpc.dev/go/mlxgrpc/v1"
)

// The element types of packed Embed vectors (EmbedRequest.EmbeddingType, with
// EmbedRequest.Packed). Types other than float32 need Packed: without it the call
// fails with INVALID_ARGUMENT naming embedding_type.
const (
	// EmbeddingFloat32 is IEEE single precision, 4 bytes a value (the default).
	EmbeddingFloat32 = pb.EmbeddingType_EMBEDDING_TYPE_FLOAT32
	// EmbeddingFloat16 is IEEE half precision, 2 bytes a value.
	EmbeddingFloat16 = pb.EmbeddingType_EMBEDDING_TYPE_FLOAT16
	// EmbeddingInt8 is one signed byte a value with a scale per vector
	// (value ≈ int8 × scale).
	EmbeddingInt8 = pb.EmbeddingType_EMBEDDING_TYPE_INT8
	// EmbeddingUbinary is one bit a value, 1 where the value is above 0, the first
	// value in the most significant bit: compare with Hamming.
	EmbeddingUbinary = pb.EmbeddingType_EMBEDDING_TYPE_UBINARY
)

// Embeddings are the vectors of a packed Embed call, in the order of the
// request's inputs. Type says which of Float32, Int8 and Binary holds them.
type Embeddings struct {
	// Type of the vectors as the server sent them (never UNSPECIFIED: float32 is EmbeddingFloat32).
	Type pb.EmbeddingType
	// Dimensions is the number of values per vector (ubinary: bits).
	Dimensions int
	// Float32 holds the vectors of EmbeddingFloat32 and EmbeddingFloat16.
	Float32 [][]float32
	// Int8 holds the vectors of EmbeddingInt8, Scales their scales (value ≈ int8 × scale).
	Int8   [][]int8
	Scales []float32
	// Binary holds the vectors of EmbeddingUbinary: ceil(Dimensions/8) bytes each,
	// the first value in the most significant bit of the first byte.
	Binary [][]byte
	// Tokens each input used (after truncation to the model's limit).
	Tokens []int32
	// Messages is the number of response messages the server sent (up to 64 vectors each).
	Messages int
}

// Len is the number of vectors.
func (e *Embeddings) Len() int { return len(e.Tokens) }

// Floats returns every vector as float32 values: float32 and float16 as they are,
// int8 dequantized (int8 × scale), ubinary as its 0 and 1 bits.
func (e *Embeddings) Floats() [][]float32 {
	switch e.Type {
	case EmbeddingInt8:
		out := make([][]float32, len(e.Int8))
		for i, v := range e.Int8 {
			out[i] = Dequantize(v, e.Scales[i])
		}
		return out
	case EmbeddingUbinary:
		out := make([][]float32, len(e.Binary))
		for i, v := range e.Binary {
			out[i] = make([]float32, e.Dimensions)
			for j, b := range UnpackBits(v, e.Dimensions) {
				out[i][j] = float32(b)
			}
		}
		return out
	}
	return e.Float32
}

// EmbedPacked embeds req.Inputs with req.Packed set (on a copy: req is not
// modified) and decodes the vectors, sent up to 64 a message, into input order.
// req.EmbeddingType chooses their type: EmbeddingFloat32 (the default),
// EmbeddingFloat16, EmbeddingInt8 or EmbeddingUbinary. Everything else is as in
// Embed: truncation, priority, retries.
//
//	e, err := client.EmbedPacked(ctx, &pb.EmbedRequest{Inputs: texts, EmbeddingType: mlxgrpc.EmbeddingInt8})
//	vectors := e.Floats() // e.Int8[i] × e.Scales[i]
func (c *Client) EmbedPacked(ctx context.Context, req *pb.EmbedRequest, opts ...grpc.CallOption) (*Embeddings, error) {
	if !req.GetPacked() {
		req = proto.Clone(req).(*pb.EmbedRequest)
		req.Packed = true
	}
	responses, err := c.Embed(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	return DecodeEmbeddings(responses, len(req.GetInputs()))
}

// vectorBytes is the size of one vector of dimensions values in PackedEmbeddings.Data.
func vectorBytes(t pb.EmbeddingType, dimensions int) (int, error) {
	switch t {
	case EmbeddingFloat32:
		return 4 * dimensions, nil
	case EmbeddingFloat16:
		return 2 * dimensions, nil
	case EmbeddingInt8:
		return dimensions, nil
	case EmbeddingUbinary:
		return (dimensions + 7) / 8, nil
	}
	return 0, fmt.Errorf("mlxgrpc: unknown embedding type %v", t)
}

// DecodeEmbeddings gathers the packed responses of an Embed call of inputs inputs
// (Embed's result with EmbedRequest.Packed) into input order. inputs < 0 takes as
// many as the responses hold. It fails on a response that is not packed, data of
// the wrong size, mixed types or dimensions, or an index out of range, repeated or
// missing.
func DecodeEmbeddings(responses []*pb.EmbedResponse, inputs int) (*Embeddings, error) {
	e := &Embeddings{Type: EmbeddingFloat32, Messages: len(responses)}
	type vector struct {
		at     int // message, position in it
		tokens int32
	}
	count := 0
	for i, r := range responses {
		p := r.GetPacked()
		if p == nil {
			return nil, fmt.Errorf("mlxgrpc: embed response %d (input %d) is not packed", i, r.GetIndex())
		}
		t := p.GetType()
		if t == pb.EmbeddingType_EMBEDDING_TYPE_UNSPECIFIED {
			t = EmbeddingFloat32
		}
		if i == 0 {
			e.Type, e.Dimensions = t, int(p.GetDimensions())
		} else if t != e.Type || int(p.GetDimensions()) != e.Dimensions {
			return nil, fmt.Errorf("mlxgrpc: packed embeddings of %v × %d after %v × %d", t, p.GetDimensions(), e.Type, e.Dimensions)
		}
		count += len(p.GetIndices())
	}
	if inputs < 0 {
		inputs = count
	}
	if count != inputs {
		return nil, fmt.Errorf("mlxgrpc: %d packed vectors for %d inputs", count, inputs)
	}
	size, err := vectorBytes(e.Type, e.Dimensions)
	if err != nil {
		return nil, err
	}
	e.Tokens = make([]int32, inputs)
	seen := make([]bool, inputs)
	switch e.Type {
	case EmbeddingFloat32, EmbeddingFloat16:
		e.Float32 = make([][]float32, inputs)
	case EmbeddingInt8:
		e.Int8, e.Scales = make([][]int8, inputs), make([]float32, inputs)
	case EmbeddingUbinary:
		e.Binary = make([][]byte, inputs)
	}
	for _, r := range responses {
		p := r.GetPacked()
		n := len(p.GetIndices())
		if e.Dimensions < 0 || len(p.GetData()) != n*size {
			return nil, fmt.Errorf("mlxgrpc: %d bytes of packed data for %d vectors of %d %v values", len(p.GetData()), n, e.Dimensions, e.Type)
		}
		if len(p.GetTokens()) != 0 && len(p.GetTokens()) != n {
			return nil, fmt.Errorf("mlxgrpc: %d token counts for %d packed vectors", len(p.GetTokens()), n)
		}
		if e.Type == EmbeddingInt8 && len(p.GetScales()) != n {
			return nil, fmt.Errorf("mlxgrpc: %d scales for %d int8 vectors", len(p.GetScales()), n)
		}
		for j, index := range p.GetIndices() {
			if index < 0 || int(index) >= inputs || seen[index] {
				return nil, fmt.Errorf("mlxgrpc: packed embeddings: index %d out of range or repeated", index)
			}
			seen[index] = true
			if len(p.GetTokens()) != 0 {
				e.Tokens[index] = p.GetTokens()[j]
			}
			chunk := p.GetData()[j*size : (j+1)*size]
			switch e.Type {
			case EmbeddingFloat32:
				v := make([]float32, e.Dimensions)
				for k := range v {
					v[k] = math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*k:]))
				}
				e.Float32[index] = v
			case EmbeddingFloat16:
				v := make([]float32, e.Dimensions)
				for k := range v {
					v[k] = HalfToFloat32(binary.LittleEndian.Uint16(chunk[2*k:]))
				}
				e.Float32[index] = v
			case EmbeddingInt8:
				v := make([]int8, e.Dimensions)
				for k, b := range chunk {
					v[k] = int8(b)
				}
				e.Int8[index], e.Scales[index] = v, p.GetScales()[j]
			case EmbeddingUbinary:
				e.Binary[index] = append([]byte(nil), chunk...)
			}
		}
	}
	return e, nil
}

// HalfToFloat32 converts an IEEE 754 half-precision value (its bits) to float32,
// exactly: subnormals, infinities and NaN included.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: frac × 2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(frac)*0x1p-24))
	case 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Dequantize returns an int8 vector's approximate values: v[i] × scale.
func Dequantize(v []int8, scale float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x) * scale
	}
	return out
}

// UnpackBits returns a ubinary vector's first dimensions bits, one 0 or 1 a value
// (1: the value was above 0), the first value first.
func UnpackBits(v []byte, dimensions int) []uint8 {
	out := make([]uint8, dimensions)
	for i := range out {
		out[i] = v[i/8] >> (7 - i%8) & 1
	}
	return out
}

// Hamming is the number of bits in which two ubinary vectors of the same length differ.
func Hamming(a, b []byte) int {
	if len(a) != len(b) {
		panic(fmt.Sprintf("mlxgrpc.Hamming: vectors of %d and %d bytes", len(a), len(b)))
	}
	n := 0
	for i := range a {
		n += bits.OnesCount8(a[i] ^ b[i])
	}
	return n
}
