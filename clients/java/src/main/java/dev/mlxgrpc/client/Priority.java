package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.ClassifyRequest;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedSparseRequest;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.RerankRequest;
import dev.mlxgrpc.v1.TranscribeRequest;

/**
 * Request priority: {@code GenerateRequest.priority}, {@code EmbedRequest.priority}, {@code
 * RerankRequest.priority}, {@code ClassifyRequest.priority}, {@code EmbedSparseRequest.priority} and {@code
 * TranscribeRequest.priority}, from {@code -MAX} to {@code MAX} (default 0). Higher starts first among
 * waiting requests; waiting raises a request's priority, so none starves; the output never
 * changes. A client's default
 * ({@link MlxGrpcClient.Builder#priority(int)}) fills the requests that leave theirs at 0.
 */
public final class Priority {
  /** The highest priority; {@code -MAX} is the lowest. */
  public static final int MAX = 100;

  private Priority() {}

  static int checkDefault(int priority) {
    if (priority < -MAX || priority > MAX) {
      throw new IllegalArgumentException("priority must be between " + -MAX + " and " + MAX + ", not " + priority);
    }
    return priority;
  }

  static GenerateRequest orDefault(GenerateRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }

  static EmbedRequest orDefault(EmbedRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }

  static RerankRequest orDefault(RerankRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }

  static ClassifyRequest orDefault(ClassifyRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }

  static EmbedSparseRequest orDefault(EmbedSparseRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }

  static TranscribeRequest orDefault(TranscribeRequest request, int priority) {
    return request.getPriority() != 0 || priority == 0 ? request : request.toBuilder().setPriority(priority).build();
  }
}
