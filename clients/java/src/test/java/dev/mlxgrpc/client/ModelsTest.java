package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.RetryInfo;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ListModelsRequest;
import dev.mlxgrpc.v1.ListModelsResponse;
import dev.mlxgrpc.v1.LoadModelRequest;
import dev.mlxgrpc.v1.LoadModelResponse;
import dev.mlxgrpc.v1.LoadStage;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.ModelOptions;
import dev.mlxgrpc.v1.ModelState;
import dev.mlxgrpc.v1.ModelStatus;
import dev.mlxgrpc.v1.UnloadModelRequest;
import dev.mlxgrpc.v1.UnloadModelResponse;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Models at run time: what loadModel, unloadModel and modelStatuses send and return against a
 * local server (no mlx-grpc server needed: the progress reported, a refusal before the first
 * message retried, one after it not, a stream without SERVING an error); against the live server
 * (CI's fixture server, started with {@code --model-root} over the fixture's models), the fixture's
 * "llama" loaded again as "java-llama", used, listed READY, unloaded and then NOT_FOUND, and a
 * source leading out of the root refused. The live test needs the admin role ($MLXGRPC_TOKEN an
 * admin's token on a server with a tokens file) and skips, even under MLXGRPC_REQUIRE_LIVE=1, on
 * a server without a model named "llama" (the default server never has one). Its own class: no
 * other test sees the model come and go.
 */
class ModelsTest {
  static final ModelInfo SMALL = ModelInfo.newBuilder().setName("small").setKind(ModelKind.MODEL_KIND_GENERATION).build();

  static LoadModelResponse progress(LoadStage stage) {
    return LoadModelResponse.newBuilder().setStage(stage).build();
  }

  static StatusRuntimeException refusal() {
    com.google.rpc.Status status = com.google.rpc.Status.newBuilder()
        .setCode(Code.RESOURCE_EXHAUSTED.getNumber()).setMessage("no room for now")
        .addDetails(Any.pack(RetryInfo.newBuilder()
            .setRetryDelay(com.google.protobuf.Duration.newBuilder().setNanos(50_000_000)).build()))
        .build();
    return StatusProto.toStatusRuntimeException(status);
  }

  /**
   * Records the requests. LoadModel of "small" is refused the first time with RetryInfo, then reports
   * every stage; of "late" it is refused (with RetryInfo) after its first message; of "broken"
   * the stream ends at WARMING.
   */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<LoadModelRequest> loads = Collections.synchronizedList(new ArrayList<>());
    final List<UnloadModelRequest> unloads = Collections.synchronizedList(new ArrayList<>());
    private boolean refused;

    @Override
    public void loadModel(LoadModelRequest request, StreamObserver<LoadModelResponse> out) {
      loads.add(request);
      switch (request.getName()) {
        case "small" -> {
          if (!refused) {
            refused = true;
            out.onError(refusal());
            return;
          }
          out.onNext(progress(LoadStage.LOAD_STAGE_RESOLVING));
          out.onNext(progress(LoadStage.LOAD_STAGE_PLANNING).toBuilder().addEvicted("old").build());
          out.onNext(progress(LoadStage.LOAD_STAGE_READING).toBuilder().setDone(10).setTotal(20).build());
          out.onNext(progress(LoadStage.LOAD_STAGE_READING).toBuilder().setDone(20).setTotal(20).build());
          out.onNext(progress(LoadStage.LOAD_STAGE_WARMING));
          out.onNext(progress(LoadStage.LOAD_STAGE_SERVING).toBuilder().setModel(SMALL).setElapsedSeconds(0.5).build());
          out.onCompleted();
        }
        case "late" -> {
          out.onNext(progress(LoadStage.LOAD_STAGE_RESOLVING));
          out.onError(refusal());
        }
        default -> {
          out.onNext(progress(LoadStage.LOAD_STAGE_RESOLVING));
          out.onNext(progress(LoadStage.LOAD_STAGE_WARMING));
          out.onCompleted();
        }
      }
    }

    @Override
    public void unloadModel(UnloadModelRequest request, StreamObserver<UnloadModelResponse> out) {
      unloads.add(request);
      out.onNext(UnloadModelResponse.newBuilder().setName(request.getName()).setFreedBytes(1234)
          .setState(ModelState.MODEL_STATE_UNLOADED).build());
      out.onCompleted();
    }

    @Override
    public void listModels(ListModelsRequest request, StreamObserver<ListModelsResponse> out) {
      out.onNext(ListModelsResponse.newBuilder().addModels(SMALL)
          .addStatuses(ModelStatus.newBuilder().setName("small").setState(ModelState.MODEL_STATE_READY))
          .addStatuses(ModelStatus.newBuilder().setName("later").setState(ModelState.MODEL_STATE_UNLOADED)
              .setOnDemand(true).setKeepAliveSeconds(60))
          .build());
      out.onCompleted();
    }
  }

  @Test
  void loadModelReportsEveryStageAndIsRetriedOnlyBeforeTheFirst() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    List<Duration> retries = Collections.synchronizedList(new ArrayList<>());
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort())
        .onRetry((details, delay) -> retries.add(delay)).build()) {
      LoadModelRequest request = LoadModelRequest.newBuilder().setName("small").setSource("models/small")
          .setKind(ModelKind.MODEL_KIND_GENERATION).setOptions(ModelOptions.newBuilder().setKvBits(8))
          .setKeepAliveSeconds(300).build();
      List<LoadModelResponse> seen = new ArrayList<>();
      ModelInfo model = client.loadModel(request, seen::add);
      assertEquals(SMALL, model);
      assertEquals(List.of(LoadStage.LOAD_STAGE_RESOLVING, LoadStage.LOAD_STAGE_PLANNING, LoadStage.LOAD_STAGE_READING,
              LoadStage.LOAD_STAGE_READING, LoadStage.LOAD_STAGE_WARMING, LoadStage.LOAD_STAGE_SERVING),
          seen.stream().map(LoadModelResponse::getStage).collect(Collectors.toList()));
      assertEquals(List.of("old"), seen.get(1).getEvictedList());
      assertEquals(List.of(10L, 20L), List.of(seen.get(2).getDone(), seen.get(2).getTotal()));
      assertEquals(List.of(Duration.ofMillis(50)), retries, "refused once with RetryInfo: retried");
      assertEquals(List.of(request, request), service.loads, "the same request for every attempt");

      StatusRuntimeException late = assertThrows(StatusRuntimeException.class,
          () -> client.loadModel(LoadModelRequest.newBuilder().setName("late").setSource("x").build(), null));
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, late.getStatus().getCode());
      assertEquals(3, service.loads.size(), "a refusal after the first message is not retried");

      List<LoadStage> broken = new ArrayList<>();
      StatusRuntimeException unserved = assertThrows(StatusRuntimeException.class,
          () -> client.loadModel(LoadModelRequest.newBuilder().setName("broken").setSource("x").build(),
              p -> broken.add(p.getStage())));
      assertEquals(Status.Code.INTERNAL, unserved.getStatus().getCode());
      assertTrue(unserved.getStatus().getDescription().contains("LOAD_STAGE_WARMING"), unserved.getMessage());
      assertEquals(List.of(LoadStage.LOAD_STAGE_RESOLVING, LoadStage.LOAD_STAGE_WARMING), broken);

      service.loads.clear();
      retries.clear();
      assertEquals(SMALL, client.loadModel("small", "models/small"));
      assertEquals(List.of(LoadModelRequest.newBuilder().setName("small").setSource("models/small").build()),
          service.loads, "the server's settings: kind, options and keep-alive unset");
      assertFalse(service.loads.get(0).hasKeepAliveSeconds());
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void unloadModelAndModelStatusesSendTheirRequests() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.connect("localhost:" + server.getPort())) {
      UnloadModelResponse unloaded = client.unloadModel("small", true);
      assertEquals(List.of("small", 1234L, ModelState.MODEL_STATE_UNLOADED),
          List.of(unloaded.getName(), unloaded.getFreedBytes(), unloaded.getState()));
      client.unloadModel("other", false);
      assertEquals(List.of(
              UnloadModelRequest.newBuilder().setName("small").setCancelRequests(true).build(),
              UnloadModelRequest.newBuilder().setName("other").build()),
          service.unloads);
      List<ModelStatus> statuses = client.modelStatuses();
      assertEquals(List.of("small", "later"), statuses.stream().map(ModelStatus::getName).collect(Collectors.toList()));
      assertEquals(ModelState.MODEL_STATE_READY, statuses.get(0).getState());
      assertFalse(statuses.get(0).hasKeepAliveSeconds());
      assertEquals(60.0, statuses.get(1).getKeepAliveSeconds());
      assertEquals(List.of(SMALL), client.listModels(), "the ready models");
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void keepAliveIsAnOptionalFieldOfGenerateAndEmbed() {
    GenerateRequest plain = LiveServer.exact("hi", 1);
    assertFalse(plain.hasKeepAliveSeconds(), "unset: the catalog's keep-alive");
    GenerateRequest kept = plain.toBuilder().setKeepAliveSeconds(0).build();
    assertTrue(kept.hasKeepAliveSeconds(), "0 is sent: unloaded once idle");
    assertEquals(0.0, kept.getKeepAliveSeconds());
    assertTrue(dev.mlxgrpc.v1.EmbedRequest.newBuilder().setKeepAliveSeconds(-1).build().hasKeepAliveSeconds());
  }

  // Live: the fixture server's "llama" directory under its --model-root, loaded again.

  static final String NAME = "java-llama";

  static Optional<ModelStatus> statusOf(LiveServer live, String name) {
    return live.client.modelStatuses().stream().filter(s -> s.getName().equals(name)).findFirst();
  }

  static GenerateRequest fourTokensOf(String model) {
    return LiveServer.exact("The quick brown fox", 4).toBuilder().setModel(model).build();
  }

  @Test
  void loadUseAndUnloadAModel() {
    try (LiveServer live = LiveServer.connect()) {
      Assumptions.assumeTrue(live.models.stream().anyMatch(m -> m.getName().equals("llama")),
          live.address + " serves no model named \"llama\" (the test fixture server, started with --model-root over"
              + " the fixture's models, does; the default server never has one)");
      MlxGrpcClient client = live.client;
      if (statusOf(live, NAME).isPresent()) { // left loaded by an earlier run that failed half-way
        try {
          client.unloadModel(NAME, true);
        } catch (StatusRuntimeException ignored) {
          // gone meanwhile
        }
      }

      List<LoadStage> stages = new ArrayList<>();
      ModelInfo info = client.loadModel(LoadModelRequest.newBuilder().setName(NAME).setSource("llama").build(),
          p -> stages.add(p.getStage()));
      assertEquals(NAME, info.getName());
      assertEquals(ModelKind.MODEL_KIND_GENERATION, info.getKind());
      assertEquals(LoadStage.LOAD_STAGE_SERVING, stages.get(stages.size() - 1), stages.toString());
      for (int i = 0; i < stages.size(); i++) {
        assertNotEquals(LoadStage.LOAD_STAGE_UNSPECIFIED, stages.get(i), stages.toString());
        assertTrue(i == 0 || stages.get(i - 1).getNumber() <= stages.get(i).getNumber(), "in order: " + stages);
      }

      GenerationResult generated = client.generateText(fourTokensOf(NAME));
      assertEquals(4, generated.tokenIds().size(), generated.text());

      ModelStatus status = statusOf(live, NAME).orElseThrow(() -> new AssertionError(NAME + " not in the statuses"));
      assertEquals(ModelState.MODEL_STATE_READY, status.getState(), status.toString());
      assertEquals(ModelKind.MODEL_KIND_GENERATION, status.getKind());
      assertTrue(client.listModels().stream().anyMatch(m -> m.getName().equals(NAME)), "a ready model is listed");

      UnloadModelResponse unloaded = client.unloadModel(NAME, false);
      assertEquals(NAME, unloaded.getName());
      assertTrue(unloaded.getFreedBytes() > 0, unloaded.toString());
      statusOf(live, NAME).ifPresent(s -> assertNotEquals(ModelState.MODEL_STATE_READY, s.getState(), s.toString()));
      StatusRuntimeException gone =
          assertThrows(StatusRuntimeException.class, () -> client.generateText(fourTokensOf(NAME)));
      assertEquals(Status.Code.NOT_FOUND, gone.getStatus().getCode(), gone.getMessage());

      StatusRuntimeException escape = assertThrows(StatusRuntimeException.class,
          () -> client.loadModel(LoadModelRequest.newBuilder().setName("java-escape").setSource("../escape").build(), null));
      assertEquals(Status.Code.INVALID_ARGUMENT, escape.getStatus().getCode(), escape.getMessage());
      assertTrue(statusOf(live, "java-escape").isEmpty());
    }
  }
}
