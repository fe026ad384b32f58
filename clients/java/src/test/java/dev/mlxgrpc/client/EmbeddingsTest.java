package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.EmbeddingType;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.PackedEmbeddings;
import dev.mlxgrpc.v1.Truncation;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.stub.StreamObserver;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/**
 * Packed Embed without a live server: PackedEmbeddings messages built by hand with known bytes
 * for each element type decode into input order, and embedPacked against a local server sends
 * packed with the type and gathers its messages.
 */
class EmbeddingsTest {
  static EmbedResponse packed(PackedEmbeddings.Builder p) {
    return EmbedResponse.newBuilder().setPacked(p).build();
  }

  static PackedEmbeddings.Builder message(List<Integer> indices, List<Integer> tokens, int dimensions,
      EmbeddingType type, byte[] data) {
    return PackedEmbeddings.newBuilder().addAllIndices(indices).addAllTokens(tokens).setDimensions(dimensions)
        .setType(type).setData(ByteString.copyFrom(data));
  }

  static byte[] hex(String s) {
    return HexFormat.of().parseHex(s);
  }

  static byte[] f32le(float... values) {
    ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float v : values) {
      b.putFloat(v);
    }
    return b.array();
  }

  static byte[] bytes(int... values) {
    byte[] out = new byte[values.length];
    for (int i = 0; i < values.length; i++) {
      out[i] = (byte) values[i];
    }
    return out;
  }

  @Test
  void float32IsLittleEndianAndGatheredByIndex() {
    // 1.0, -2.5 | 0.5, 0.0: the vectors of inputs 1 and 0
    byte[] data = hex("0000803f" + "000020c0" + "0000003f" + "00000000");
    for (EmbeddingType type : new EmbeddingType[] {EmbeddingType.EMBEDDING_TYPE_FLOAT32, EmbeddingType.EMBEDDING_TYPE_UNSPECIFIED}) {
      Embeddings e = Embeddings.decode(List.of(packed(message(List.of(1, 0), List.of(4, 5), 2, type, data))), 2);
      assertEquals(EmbeddingType.EMBEDDING_TYPE_FLOAT32, e.type());
      assertArrayEquals(new float[][] {{0.5f, 0f}, {1f, -2.5f}}, e.float32());
      assertArrayEquals(new int[] {5, 4}, e.tokens());
      assertEquals(List.of(2, 2, 1), List.of(e.dimensions(), e.size(), e.messages()));
    }
  }

  @Test
  void float16ExactHalves() {
    // 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800 | 65504 = 0x7bff (largest), 2^-24 = 0x0001
    // (smallest subnormal), 0.333251953125 = 0x3555
    byte[] data = hex("003c" + "00c0" + "0038" + "ff7b" + "0100" + "5535");
    Embeddings e = Embeddings.decode(
        List.of(packed(message(List.of(0, 1), List.of(2, 2), 3, EmbeddingType.EMBEDDING_TYPE_FLOAT16, data))), -1);
    assertEquals(EmbeddingType.EMBEDDING_TYPE_FLOAT16, e.type());
    assertArrayEquals(new float[][] {{1f, -2f, 0.5f}, {65504f, 0x1p-24f, 0.333251953125f}}, e.float32());
    assertEquals(1023 * 0x1p-24f, Embeddings.halfToFloat((short) 0x03ff));
    assertEquals(0x1p-14f, Embeddings.halfToFloat((short) 0x0400));
    assertEquals(Float.floatToRawIntBits(-0f), Float.floatToRawIntBits(Embeddings.halfToFloat((short) 0x8000)));
    assertEquals(Float.NEGATIVE_INFINITY, Embeddings.halfToFloat((short) 0xfc00));
    assertTrue(Float.isNaN(Embeddings.halfToFloat((short) 0x7e00)));
  }

  @Test
  void int8WithScales() {
    byte[] data = bytes(0x7f, 0x81, 0x00, 0x40, 0x01, 0xff, 0x80, 0x00); // 127 -127 0 64 | 1 -1 -128 0
    PackedEmbeddings.Builder msg = message(List.of(0, 1), List.of(1, 1), 4, EmbeddingType.EMBEDDING_TYPE_INT8, data)
        .addAllScales(List.of(0.5f, 0.25f));
    Embeddings e = Embeddings.decode(List.of(packed(msg)), 2);
    assertArrayEquals(new byte[][] {{127, -127, 0, 64}, {1, -1, -128, 0}}, e.int8());
    assertArrayEquals(new float[] {0.5f, 0.25f}, e.scales());
    assertArrayEquals(new float[] {63.5f, -63.5f, 0f, 32f}, Embeddings.dequantize(e.int8()[0], 0.5f));
    assertArrayEquals(new float[][] {{63.5f, -63.5f, 0f, 32f}, {0.25f, -0.25f, -32f, 0f}}, e.floats());
    assertThrows(IllegalStateException.class, e::float32);
    IllegalArgumentException oneScale = assertThrows(IllegalArgumentException.class,
        () -> Embeddings.decode(List.of(packed(msg.clone().clearScales().addScales(0.5f))), 2));
    assertTrue(oneScale.getMessage().contains("scales"), oneScale.getMessage());
  }

  @Test
  void ubinaryWithDimensionsNotAMultipleOfEight() {
    // 10 bits a vector in 2 bytes, the first value in the most significant bit, unused low bits zero
    byte[] data = bytes(0b10110000, 0b01000000, 0b01111111, 0b11000000);
    PackedEmbeddings.Builder msg = message(List.of(0, 1), List.of(3, 3), 10, EmbeddingType.EMBEDDING_TYPE_UBINARY, data);
    Embeddings e = Embeddings.decode(List.of(packed(msg)), 2);
    assertEquals(10, e.dimensions());
    byte[][] bits = e.ubinary();
    assertArrayEquals(new byte[][] {bytes(0b10110000, 0b01000000), bytes(0b01111111, 0b11000000)}, bits);
    assertArrayEquals(bytes(1, 0, 1, 1, 0, 0, 0, 0, 0, 1), Embeddings.unpackBits(bits[0], 10));
    assertArrayEquals(new float[] {0, 1, 1, 1, 1, 1, 1, 1, 1, 1}, e.floats()[1]);
    assertEquals(7, Embeddings.hamming(bits[0], bits[1]));
    assertEquals(0, Embeddings.hamming(bits[0], bits[0]));
    IllegalArgumentException shortData = assertThrows(IllegalArgumentException.class,
        () -> Embeddings.decode(List.of(packed(msg.clone().setData(ByteString.copyFrom(data, 0, 3)))), 2));
    assertTrue(shortData.getMessage().contains("bytes of data"), shortData.getMessage());
  }

  @Test
  void messagesAreGatheredInInputOrderAndMalformedOnesRefused() {
    List<EmbedResponse> responses = List.of(
        packed(message(List.of(2, 0), List.of(7, 5), 1, EmbeddingType.EMBEDDING_TYPE_FLOAT32, f32le(3f, 1f))),
        packed(message(List.of(1), List.of(6), 1, EmbeddingType.EMBEDDING_TYPE_FLOAT32, f32le(2f))));
    Embeddings e = Embeddings.decode(responses, 3);
    assertArrayEquals(new float[][] {{1f}, {2f}, {3f}}, e.float32());
    assertArrayEquals(new int[] {5, 6, 7}, e.tokens());
    assertEquals(2, e.messages());
    IllegalArgumentException missing = assertThrows(IllegalArgumentException.class, () -> Embeddings.decode(responses, 4));
    assertTrue(missing.getMessage().contains("no vector for input 3"), missing.getMessage());
    assertThrows(IllegalArgumentException.class,
        () -> Embeddings.decode(List.of(responses.get(0), responses.get(1), responses.get(1)), 3));
    assertThrows(IllegalArgumentException.class,
        () -> Embeddings.decode(List.of(EmbedResponse.newBuilder().setIndex(0).addEmbedding(1f).build()), 1));
    EmbedResponse mixed = packed(message(List.of(1), List.of(), 1, EmbeddingType.EMBEDDING_TYPE_INT8, bytes(1)).addScales(1f));
    IllegalArgumentException after = assertThrows(IllegalArgumentException.class,
        () -> Embeddings.decode(List.of(responses.get(0), mixed), 3));
    assertTrue(after.getMessage().contains("after"), after.getMessage());
  }

  /** Sends a packed request's vectors (each its index as a float) in two messages, the later inputs first. */
  static final class Packing extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<EmbedRequest> embeds = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void embed(EmbedRequest request, StreamObserver<EmbedResponse> out) {
      embeds.add(request);
      int n = request.getInputsCount();
      if (!request.getPacked()) {
        for (int i = 0; i < n; i++) {
          out.onNext(EmbedResponse.newBuilder().setIndex(i).addEmbedding(i).setTokens(i + 1).build());
        }
      } else {
        for (int[] span : new int[][] {{n / 2, n}, {0, n / 2}}) {
          List<Integer> indices = IntStream.range(span[0], span[1]).boxed().collect(Collectors.toList());
          if (indices.isEmpty()) {
            continue;
          }
          float[] values = new float[indices.size()];
          for (int i = 0; i < values.length; i++) {
            values[i] = indices.get(i);
          }
          List<Integer> tokens = indices.stream().map(i -> i + 1).collect(Collectors.toList());
          out.onNext(packed(message(indices, tokens, 1, EmbeddingType.EMBEDDING_TYPE_FLOAT32, f32le(values))));
        }
      }
      out.onCompleted();
    }
  }

  @Test
  void embedPackedSendsPackedAndTheTypeAndGathersTheMessages() throws Exception {
    Packing service = new Packing();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.connect("localhost:" + server.getPort())) {
      EmbedRequest request = EmbedRequest.newBuilder().addAllInputs(List.of("a", "b", "c", "d", "e"))
          .setEmbeddingType(EmbeddingType.EMBEDDING_TYPE_FLOAT32).setTruncate(Truncation.TRUNCATION_NONE).build();
      Embeddings e = client.embedPacked(request);
      assertArrayEquals(new float[][] {{0f}, {1f}, {2f}, {3f}, {4f}}, e.float32());
      assertArrayEquals(new int[] {1, 2, 3, 4, 5}, e.tokens());
      assertEquals(2, e.messages());
      assertEquals(3, client.embedPacked(EmbeddingType.EMBEDDING_TYPE_FLOAT32, "x", "y", "z").size());
      assertEquals(List.of(0, 1), client.embed("a", "b").stream().map(EmbedResponse::getIndex).collect(Collectors.toList()),
          "without packed: one response per input, as before");
      assertFalse(request.getPacked(), "the caller's request is left alone");
      EmbedRequest sent = service.embeds.get(0);
      assertEquals(List.of(true, EmbeddingType.EMBEDDING_TYPE_FLOAT32, Truncation.TRUNCATION_NONE),
          List.of(sent.getPacked(), sent.getEmbeddingType(), sent.getTruncate()));
      assertTrue(service.embeds.get(1).getPacked());
      assertFalse(service.embeds.get(2).getPacked());
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }
}
