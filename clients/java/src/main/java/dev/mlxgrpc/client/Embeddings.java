package dev.mlxgrpc.client;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.EmbeddingType;
import dev.mlxgrpc.v1.PackedEmbeddings;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The vectors of a packed Embed call ({@link MlxGrpcClient#embedPacked}), in the order of the
 * request's inputs. The server sends up to 64 inputs' vectors a message as one little-endian byte
 * string of one element type: {@link #type()} says which accessor holds them: {@link #float32()}
 * for FLOAT32 and FLOAT16, {@link #int8()} with {@link #scales()} for INT8 (value ≈ int8 ×
 * scale), {@link #ubinary()} for UBINARY (a bit per value, 1 where it is above 0, the first value
 * in the most significant bit of the first byte). {@link #floats()} gives every vector as floats.
 * The accessors return this object's own arrays, not copies.
 *
 * <pre>{@code
 * Embeddings e = client.embedPacked(EmbeddingType.EMBEDDING_TYPE_INT8, "first text", "second text");
 * float[][] vectors = e.floats(); // e.int8()[i] × e.scales()[i]
 * }</pre>
 */
public final class Embeddings {
  private final EmbeddingType type;
  private final int dimensions;
  private final float[][] floats;
  private final byte[][] bytes;
  private final float[] scales;
  private final int[] tokens;
  private final int messages;

  private Embeddings(
      EmbeddingType type, int dimensions, float[][] floats, byte[][] bytes, float[] scales, int[] tokens, int messages) {
    this.type = type;
    this.dimensions = dimensions;
    this.floats = floats;
    this.bytes = bytes;
    this.scales = scales;
    this.tokens = tokens;
    this.messages = messages;
  }

  private static EmbeddingType kind(EmbeddingType type) {
    return type == EmbeddingType.EMBEDDING_TYPE_UNSPECIFIED ? EmbeddingType.EMBEDDING_TYPE_FLOAT32 : type;
  }

  /** Bytes one vector of {@code dimensions} values takes in {@code PackedEmbeddings.data}. */
  private static int vectorBytes(EmbeddingType type, int dimensions) {
    switch (type) {
      case EMBEDDING_TYPE_FLOAT32:
        return 4 * dimensions;
      case EMBEDDING_TYPE_FLOAT16:
        return 2 * dimensions;
      case EMBEDDING_TYPE_INT8:
        return dimensions;
      case EMBEDDING_TYPE_UBINARY:
        return (dimensions + 7) / 8;
      default:
        throw new IllegalArgumentException("packed embeddings: unknown embedding type " + type);
    }
  }

  /**
   * Gathers the packed responses of an Embed call ({@link MlxGrpcClient#embed(
   * dev.mlxgrpc.v1.EmbedRequest)} of a request with {@code packed}) into input order; {@code
   * inputs}, the request's number of inputs, must be covered exactly (negative: as many as the
   * responses hold). Throws IllegalArgumentException on a response that is not packed, data of the
   * wrong size, mixed types or dimensions, or an index out of range, repeated or missing.
   */
  public static Embeddings decode(List<EmbedResponse> responses, int inputs) {
    List<PackedEmbeddings> packed = new ArrayList<>(responses.size());
    for (EmbedResponse r : responses) {
      if (!r.hasPacked()) {
        throw new IllegalArgumentException("packed embeddings: the response for input " + r.getIndex() + " is not packed");
      }
      packed.add(r.getPacked());
    }
    EmbeddingType type = packed.isEmpty() ? EmbeddingType.EMBEDDING_TYPE_FLOAT32 : kind(packed.get(0).getType());
    int dimensions = packed.isEmpty() ? 0 : packed.get(0).getDimensions();
    if (dimensions < 0) {
      throw new IllegalArgumentException("packed embeddings: " + dimensions + " dimensions");
    }
    int count = inputs >= 0 ? inputs : packed.stream().mapToInt(PackedEmbeddings::getIndicesCount).sum();
    int size = vectorBytes(type, dimensions);
    boolean floating = type == EmbeddingType.EMBEDDING_TYPE_FLOAT32 || type == EmbeddingType.EMBEDDING_TYPE_FLOAT16;
    float[][] floats = floating ? new float[count][] : null;
    byte[][] bytes = floating ? null : new byte[count][];
    float[] scales = type == EmbeddingType.EMBEDDING_TYPE_INT8 ? new float[count] : new float[0];
    int[] tokens = new int[count];
    boolean[] seen = new boolean[count];
    for (PackedEmbeddings p : packed) {
      if (kind(p.getType()) != type || p.getDimensions() != dimensions) {
        throw new IllegalArgumentException(String.format("packed embeddings: %s x %d after %s x %d",
            kind(p.getType()), p.getDimensions(), type, dimensions));
      }
      int n = p.getIndicesCount();
      ByteString data = p.getData();
      if ((long) n * size != data.size()) {
        throw new IllegalArgumentException(String.format(
            "packed embeddings: %d bytes of data for %d vectors of %d %s values", data.size(), n, dimensions, type));
      }
      if (p.getTokensCount() != 0 && p.getTokensCount() != n) {
        throw new IllegalArgumentException("packed embeddings: " + p.getTokensCount() + " token counts for " + n + " vectors");
      }
      if (type == EmbeddingType.EMBEDDING_TYPE_INT8 && p.getScalesCount() != n) {
        throw new IllegalArgumentException("packed embeddings: " + p.getScalesCount() + " scales for " + n + " int8 vectors");
      }
      ByteBuffer buffer = data.asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
      for (int j = 0; j < n; j++) {
        int index = p.getIndices(j);
        if (index < 0 || index >= count || seen[index]) {
          throw new IllegalArgumentException("packed embeddings: index " + index + " out of range or repeated");
        }
        seen[index] = true;
        tokens[index] = p.getTokensCount() == 0 ? 0 : p.getTokens(j);
        int offset = j * size;
        if (type == EmbeddingType.EMBEDDING_TYPE_FLOAT32) {
          float[] v = new float[dimensions];
          for (int k = 0; k < dimensions; k++) {
            v[k] = buffer.getFloat(offset + 4 * k);
          }
          floats[index] = v;
        } else if (type == EmbeddingType.EMBEDDING_TYPE_FLOAT16) {
          float[] v = new float[dimensions];
          for (int k = 0; k < dimensions; k++) {
            v[k] = halfToFloat(buffer.getShort(offset + 2 * k));
          }
          floats[index] = v;
        } else {
          bytes[index] = data.substring(offset, offset + size).toByteArray();
          if (type == EmbeddingType.EMBEDDING_TYPE_INT8) {
            scales[index] = p.getScales(j);
          }
        }
      }
    }
    for (int i = 0; i < count; i++) {
      if (!seen[i]) {
        throw new IllegalArgumentException("packed embeddings: no vector for input " + i);
      }
    }
    return new Embeddings(type, dimensions, floats, bytes, scales, tokens, responses.size());
  }

  /** The vectors' element type (never UNSPECIFIED: float32 is EMBEDDING_TYPE_FLOAT32). */
  public EmbeddingType type() {
    return type;
  }

  /** Values per vector (ubinary: bits). */
  public int dimensions() {
    return dimensions;
  }

  /** The number of vectors, one per input. */
  public int size() {
    return tokens.length;
  }

  /** Tokens each input used (after truncation to the model's limit). */
  public int[] tokens() {
    return tokens;
  }

  /** Response messages the server sent (up to 64 vectors each). */
  public int messages() {
    return messages;
  }

  private void expect(boolean ok, String what) {
    if (!ok) {
      throw new IllegalStateException("the vectors are " + type + ", not " + what);
    }
  }

  /** FLOAT32 and FLOAT16: the vectors. */
  public float[][] float32() {
    expect(floats != null, "FLOAT32 or FLOAT16");
    return floats;
  }

  /** INT8: the vectors' signed bytes; {@link #scales()} holds their scales. */
  public byte[][] int8() {
    expect(type == EmbeddingType.EMBEDDING_TYPE_INT8, "INT8");
    return bytes;
  }

  /** INT8: each vector's scale (value ≈ int8 × scale); empty for the other types. */
  public float[] scales() {
    return scales;
  }

  /** UBINARY: the vectors' packed bits, ceil(dimensions / 8) bytes each. */
  public byte[][] ubinary() {
    expect(type == EmbeddingType.EMBEDDING_TYPE_UBINARY, "UBINARY");
    return bytes;
  }

  /** Every vector as floats: float32 and float16 as they are, int8 dequantized, ubinary as 0/1 bits. */
  public float[][] floats() {
    if (floats != null) {
      return floats;
    }
    float[][] out = new float[bytes.length][];
    for (int i = 0; i < bytes.length; i++) {
      if (type == EmbeddingType.EMBEDDING_TYPE_INT8) {
        out[i] = dequantize(bytes[i], scales[i]);
      } else {
        byte[] bits = unpackBits(bytes[i], dimensions);
        out[i] = new float[dimensions];
        for (int k = 0; k < dimensions; k++) {
          out[i][k] = bits[k];
        }
      }
    }
    return out;
  }

  /** An IEEE 754 half-precision value (its 16 bits) as a float, exactly. */
  public static float halfToFloat(short half) {
    int h = half & 0xffff;
    int sign = (h & 0x8000) << 16;
    int exponent = (h >>> 10) & 0x1f;
    int fraction = h & 0x3ff;
    if (exponent == 0) { // zero or subnormal: fraction × 2^-24
      return Float.intBitsToFloat(sign | Float.floatToRawIntBits(fraction * 0x1p-24f));
    }
    if (exponent == 0x1f) { // infinity or NaN
      return Float.intBitsToFloat(sign | 0x7f800000 | fraction << 13);
    }
    return Float.intBitsToFloat(sign | (exponent + 127 - 15) << 23 | fraction << 13);
  }

  /** An int8 vector's approximate values: v[i] × scale. */
  public static float[] dequantize(byte[] v, float scale) {
    float[] out = new float[v.length];
    for (int i = 0; i < v.length; i++) {
      out[i] = v[i] * scale;
    }
    return out;
  }

  /** A ubinary vector's first {@code dimensions} bits, one 0 or 1 a value (1: it was above 0), first value first. */
  public static byte[] unpackBits(byte[] v, int dimensions) {
    byte[] out = new byte[dimensions];
    for (int i = 0; i < dimensions; i++) {
      out[i] = (byte) ((v[i >>> 3] >>> (7 - (i & 7))) & 1);
    }
    return out;
  }

  /** The number of bits in which two ubinary vectors of the same length differ. */
  public static int hamming(byte[] a, byte[] b) {
    if (a.length != b.length) {
      throw new IllegalArgumentException("ubinary vectors of " + a.length + " and " + b.length + " bytes");
    }
    int n = 0;
    for (int i = 0; i < a.length; i++) {
      n += Integer.bitCount((a[i] ^ b[i]) & 0xff);
    }
    return n;
  }
}
