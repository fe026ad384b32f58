package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.fail;

import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.StoppingCriteria;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Assumptions;

/**
 * The live server at $MLXGRPC_ADDRESS and the models it serves, discovered with ListModels, so
 * the tests run against any server (the default one or the test fixture). Without the address
 * the live tests are skipped; under MLXGRPC_REQUIRE_LIVE=1 (CI) they fail instead. Every live
 * client sends $MLXGRPC_TOKEN when it is set (a server with a tokens file; the adapter tests need
 * the admin role); $MLXGRPC_TENANT names that token's tenant.
 */
final class LiveServer implements AutoCloseable {
  final String address;
  final MlxGrpcClient client;
  final List<ModelInfo> models;
  /** The default generation model (listed first). */
  final ModelInfo generator;
  /**
   * The first embedding model that embeds (a reranker, a classifier or a SPLADE model is an embedding-kind model
   * that does not).
   */
  final Optional<ModelInfo> embedder;
  /** The model named "reranker" when it reranks (the fixture server's cross-encoder). */
  final Optional<ModelInfo> reranker;
  /** The model named "classifier" when it classifies (the fixture server's three-label classifier). */
  final Optional<ModelInfo> classifier;
  /** The model named "splade" when it gives sparse embeddings (the fixture server's SPLADE model). */
  final Optional<ModelInfo> splade;

  private LiveServer(String address) {
    this.address = address;
    this.client = builder().defaultDeadline(Duration.ofSeconds(120)).build();
    this.models = client.listModels();
    this.generator = ofKind(ModelKind.MODEL_KIND_GENERATION)
        .orElseThrow(() -> new AssertionError("the server serves no generation model"));
    this.embedder = models.stream()
        .filter(m -> m.getKind() == ModelKind.MODEL_KIND_EMBEDDING && m.getCapabilities().getEmbeddings())
        .findFirst();
    this.reranker = models.stream()
        .filter(m -> m.getName().equals("reranker") && m.getCapabilities().getRerank()).findFirst();
    this.classifier = models.stream()
        .filter(m -> m.getName().equals("classifier") && m.getCapabilities().getClassify()).findFirst();
    this.splade = models.stream()
        .filter(m -> m.getName().equals("splade") && m.getCapabilities().getSparseEmbeddings()).findFirst();
  }

  /** The live server's bearer token, $MLXGRPC_TOKEN (null: unset or empty, a server without tokens). */
  static String token() {
    String token = System.getenv("MLXGRPC_TOKEN");
    return token == null || token.isEmpty() ? null : token;
  }

  /** The tenant this caller's requests count under: its token's (without tokens: the empty name). */
  static String tenant() {
    return System.getenv().getOrDefault("MLXGRPC_TENANT", "");
  }

  /** A builder of another client of this server, carrying its token. */
  MlxGrpcClient.Builder builder() {
    return MlxGrpcClient.builder(address).bearerToken(token());
  }

  private Optional<ModelInfo> ofKind(ModelKind kind) {
    return models.stream().filter(m -> m.getKind() == kind).findFirst();
  }

  /** Connects, or skips (fails under MLXGRPC_REQUIRE_LIVE=1) without MLXGRPC_ADDRESS. */
  static LiveServer connect() {
    String address = System.getenv("MLXGRPC_ADDRESS");
    if (address == null || address.isEmpty()) {
      unavailable("MLXGRPC_ADDRESS is not set: no live server to test against");
    }
    return new LiveServer(address);
  }

  static void unavailable(String reason) {
    if ("1".equals(System.getenv("MLXGRPC_REQUIRE_LIVE"))) {
      fail(reason + " (MLXGRPC_REQUIRE_LIVE=1)");
    }
    Assumptions.abort(reason);
  }

  /** A text prompt generating exactly {@code maxTokens} tokens on any model. */
  static GenerateRequest exact(String text, int maxTokens) {
    StoppingCriteria stopping = StoppingCriteria.newBuilder().setMaxTokens(maxTokens).setIgnoreEos(true).build();
    return GenerateRequest.newBuilder().setText(text).setStopping(stopping).build();
  }

  @Override
  public void close() {
    client.close();
  }
}
