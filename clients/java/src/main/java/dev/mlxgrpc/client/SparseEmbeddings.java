package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.EmbedSparseResponse;
import dev.mlxgrpc.v1.SparseEmbedding;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * EmbedSparse's answer ({@link MlxGrpcClient#embedSparse}): the model that embedded and one {@link
 * Vector} per input, in input order.
 */
public record SparseEmbeddings(String model, List<SparseEmbeddings.Vector> vectors) {
  /**
   * One input's sparse vector over the model's vocabulary: {@code tokenIds} (vocabulary ids,
   * ascending) and their {@code weights} in the same order, each above 0; every other id weighs 0.
   */
  public record Vector(int index, int tokens, int[] tokenIds, float[] weights) {
    /** The weight of {@code id} (0 when the vector does not list it). */
    public float weight(int id) {
      int i = Arrays.binarySearch(tokenIds, id);
      return i >= 0 ? weights[i] : 0f;
    }

    /** The vector as id to weight, ids ascending. */
    public Map<Integer, Float> toMap() {
      Map<Integer, Float> map = new LinkedHashMap<>();
      for (int i = 0; i < tokenIds.length; i++) {
        map.put(tokenIds[i], weights[i]);
      }
      return map;
    }

    /** The dot product with {@code other} (a query's vector against a document's). */
    public double dot(Vector other) {
      double sum = 0;
      for (int i = 0, j = 0; i < tokenIds.length && j < other.tokenIds.length; ) {
        if (tokenIds[i] < other.tokenIds[j]) {
          i++;
        } else if (tokenIds[i] > other.tokenIds[j]) {
          j++;
        } else {
          sum += (double) weights[i++] * other.weights[j++];
        }
      }
      return sum;
    }
  }

  /** The response's vectors, in input order. */
  static SparseEmbeddings of(EmbedSparseResponse response) {
    List<Vector> vectors = response.getEmbeddingsList().stream()
        .sorted(Comparator.comparingInt(SparseEmbedding::getIndex))
        .map(SparseEmbeddings::vector)
        .collect(Collectors.toList());
    return new SparseEmbeddings(response.getModel(), List.copyOf(vectors));
  }

  private static Vector vector(SparseEmbedding e) {
    float[] weights = new float[e.getWeightsCount()];
    for (int i = 0; i < weights.length; i++) {
      weights[i] = e.getWeights(i);
    }
    return new Vector(e.getIndex(), e.getTokens(), e.getTokenIdsList().stream().mapToInt(Integer::intValue).toArray(),
        weights);
  }
}
