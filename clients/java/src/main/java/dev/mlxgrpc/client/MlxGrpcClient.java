package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.AdapterInfo;
import dev.mlxgrpc.v1.Audio;
import dev.mlxgrpc.v1.CancelRequest;
import dev.mlxgrpc.v1.ClassifyRequest;
import dev.mlxgrpc.v1.ClassifyResponse;
import dev.mlxgrpc.v1.CloseSessionRequest;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedSparseRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.EmbeddingType;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.GetLoadRequest;
import dev.mlxgrpc.v1.GetModelInfoRequest;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.InferenceServiceGrpc.InferenceServiceBlockingStub;
import dev.mlxgrpc.v1.InferenceServiceGrpc.InferenceServiceStub;
import dev.mlxgrpc.v1.ListAdaptersRequest;
import dev.mlxgrpc.v1.ListAdaptersResponse;
import dev.mlxgrpc.v1.ListModelsRequest;
import dev.mlxgrpc.v1.LoadAdapterRequest;
import dev.mlxgrpc.v1.LoadAdapterResponse;
import dev.mlxgrpc.v1.LoadModelRequest;
import dev.mlxgrpc.v1.LoadModelResponse;
import dev.mlxgrpc.v1.LoadStage;
import dev.mlxgrpc.v1.MemoryPlan;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelLoad;
import dev.mlxgrpc.v1.ModelStatus;
import dev.mlxgrpc.v1.PlanMemoryRequest;
import dev.mlxgrpc.v1.PrefetchRequest;
import dev.mlxgrpc.v1.PrefetchResponse;
import dev.mlxgrpc.v1.RerankRequest;
import dev.mlxgrpc.v1.RerankResponse;
import dev.mlxgrpc.v1.TranscribeRequest;
import dev.mlxgrpc.v1.UnloadAdapterRequest;
import dev.mlxgrpc.v1.UnloadModelRequest;
import dev.mlxgrpc.v1.UnloadModelResponse;
import io.grpc.Channel;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * A small wrapper around the generated {@code InferenceServiceGrpc} stubs: one channel with
 * optional TLS, a bearer token on every call, a default deadline, and retries of calls the server
 * refused for now (RESOURCE_EXHAUSTED or UNAVAILABLE with a RetryInfo: after the server's delay,
 * before the first response, within the deadline).
 *
 * <pre>{@code
 * try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:50051").build()) {
 *   try (GenerateStream stream = client.generate(GenerateRequest.newBuilder().setText("Hi").build())) {
 *     for (GenerateResponse event : stream) { ... }
 *   }
 * }
 * }</pre>
 *
 * <p>Generate comes blocking ({@link #generate}, {@link #generateText}) and asynchronous
 * ({@link #generateAsync}, {@link #generateTextAsync}); Transcribe as a stream of events ({@link
 * #transcribeStream}) or a whole {@link Transcript} ({@link #transcribe}). RPCs without a helper (Tokenize,
 * Detokenize) are reached through {@link #stub()} and {@link #asyncStub()}.
 */
public final class MlxGrpcClient implements AutoCloseable {
  private final ManagedChannel channel;
  private final Channel intercepted;
  private final Duration defaultDeadline;
  private final RetryPolicy retry;
  private final int priority;
  private final ScheduledExecutorService scheduler;

  private MlxGrpcClient(Builder b) {
    this.priority = Priority.checkDefault(b.priority); // before the channel: nothing to close
    this.channel = Transport.channel(b.address, b.tls, b.caFile);
    this.intercepted = Transport.withToken(channel, b.bearerToken);
    this.defaultDeadline = b.defaultDeadline;
    this.retry = new RetryPolicy(b.maxAttempts, b.onRetry);
    this.scheduler = Transport.retryScheduler();
  }

  /** A builder for a client of the server at {@code address} ("host:port" or a gRPC target). */
  public static Builder builder(String address) {
    return new Builder(address);
  }

  /** A plaintext client with no token and no default deadline. */
  public static MlxGrpcClient connect(String address) {
    return builder(address).build();
  }

  /** The blocking stub, with the token and (when set) the default deadline from now. */
  public InferenceServiceBlockingStub stub() {
    return blockingStub(deadline());
  }

  /** The asynchronous stub, with the token and (when set) the default deadline from now. */
  public InferenceServiceStub asyncStub() {
    return asyncStub(deadline());
  }

  /**
   * The channel with the bearer token on every call, for other services on the same server
   * (health, reflection) or stubs of your own. The client owns it: {@link #close()} shuts it down.
   */
  public Channel channel() {
    return intercepted;
  }

  private Deadline deadline() {
    return defaultDeadline == null ? null : Deadline.after(defaultDeadline.toNanos(), TimeUnit.NANOSECONDS);
  }

  private InferenceServiceBlockingStub blockingStub(Deadline deadline) {
    InferenceServiceBlockingStub stub = InferenceServiceGrpc.newBlockingStub(intercepted);
    return deadline == null ? stub : stub.withDeadline(deadline);
  }

  private InferenceServiceStub asyncStub(Deadline deadline) {
    InferenceServiceStub stub = InferenceServiceGrpc.newStub(intercepted);
    return deadline == null ? stub : stub.withDeadline(deadline);
  }

  /** A unary call through the blocking stub, retried; one deadline covers every attempt. */
  private <T> T unary(Function<InferenceServiceBlockingStub, T> call) {
    Deadline deadline = deadline();
    return retry.call(() -> call.apply(blockingStub(deadline)), deadline);
  }

  /** The request with a client-side request id and the client's priority when it has none. */
  private GenerateRequest withRequestId(GenerateRequest request) {
    GenerateRequest req = Priority.orDefault(request, priority);
    return req.getRequestId().isEmpty()
        ? req.toBuilder().setRequestId(UUID.randomUUID().toString()).build()
        : req;
  }

  /**
   * Starts a Generate. Iterate the returned stream for its events ({@code started}, then {@code
   * delta}s, then {@code finished}), or {@link GenerateStream#collect()} them; call {@link
   * GenerateStream#cancel()} (or close it) to cancel the call client-side. An empty request id is
   * filled in client-side, so {@link GenerateStream#requestId()} works with {@link #cancel} from
   * any thread at once. Errors surface as {@link io.grpc.StatusRuntimeException} from the
   * iterator.
   */
  public GenerateStream generate(GenerateRequest request) {
    GenerateRequest req = withRequestId(request);
    Deadline deadline = deadline();
    return new GenerateStream(() -> blockingStub(deadline).generate(req), retry, deadline, req.getRequestId());
  }

  /** Runs a Generate to its end: the unary form, blocking. */
  public GenerationResult generateText(GenerateRequest request) {
    try (GenerateStream stream = generate(request)) {
      return stream.collect();
    }
  }

  /**
   * Starts a Generate without blocking: {@code observer} (may be null) gets each event on gRPC's
   * threads, then {@code onCompleted} or {@code onError}; {@link GenerateCall#result()}
   * completes with the whole generation.
   */
  public GenerateCall generateAsync(GenerateRequest request, StreamObserver<GenerateResponse> observer) {
    GenerateRequest req = withRequestId(request);
    Deadline deadline = deadline();
    return new GenerateCall(
        req.getRequestId(), observer, o -> asyncStub(deadline).generate(req, o), retry, deadline, scheduler);
  }

  /** Runs a Generate to its end without blocking: the unary form, asynchronous. */
  public CompletableFuture<GenerationResult> generateTextAsync(GenerateRequest request) {
    return generateAsync(request, null).result();
  }

  /**
   * Cancels a running or queued Generate, Embed, Rerank, Classify, EmbedSparse or Transcribe by its request id (the
   * Cancel RPC). Returns whether the server found and cancelled it; a cancelled Generate stream then ends
   * with a {@code finished} event whose reason is {@code FINISH_REASON_CANCELLED}, the others with
   * CANCELLED.
   */
  public boolean cancel(String requestId) {
    CancelRequest request = CancelRequest.newBuilder().setRequestId(requestId).build();
    return unary(stub -> stub.cancel(request)).getCancelled();
  }

  /**
   * Embeds the request's inputs; one response per input, sorted by {@code index}. A request with
   * priority 0 gets the client's default. An input longer than the model's limit is cut ({@code
   * setTruncate(Truncation.TRUNCATION_END)}, the default; {@code getTokens()} says how many were
   * used) or, with {@code Truncation.TRUNCATION_NONE}, refused: INVALID_ARGUMENT naming the input
   * ({@code inputs[i]}). With {@code packed} the responses are the server's packed messages as
   * they came: {@link #embedPacked(EmbedRequest)} decodes them.
   */
  public List<EmbedResponse> embed(EmbedRequest given) {
    EmbedRequest request = Priority.orDefault(given, priority);
    List<EmbedResponse> out =
        unary(
            stub -> {
              List<EmbedResponse> responses = new ArrayList<>(request.getInputsCount());
              stub.embed(request).forEachRemaining(responses::add);
              return responses;
            });
    out.sort(Comparator.comparingInt(EmbedResponse::getIndex));
    return out;
  }

  /** Embeds {@code inputs} with the default embedding model, sorted by input order. */
  public List<EmbedResponse> embed(String... inputs) {
    return embed(EmbedRequest.newBuilder().addAllInputs(List.of(inputs)).build());
  }

  /**
   * Embeds the request's inputs packed ({@code packed} is set for you): the server sends up to 64
   * inputs' vectors a message as bytes of the request's {@code embeddingType} (FLOAT32, the
   * default, FLOAT16, INT8 with a scale per vector, or UBINARY, a bit per value), decoded into
   * {@link Embeddings} in input order. The rest as for {@link #embed(EmbedRequest)}; a type other
   * than float32 without {@code packed} (through {@code embed}) is INVALID_ARGUMENT naming {@code
   * embedding_type}. A response that does not decode is an IllegalArgumentException.
   */
  public Embeddings embedPacked(EmbedRequest request) {
    EmbedRequest packed = request.getPacked() ? request : request.toBuilder().setPacked(true).build();
    return Embeddings.decode(embed(packed), packed.getInputsCount());
  }

  /** Embeds {@code inputs} packed as {@code type} with the default embedding model. */
  public Embeddings embedPacked(EmbeddingType type, String... inputs) {
    return embedPacked(EmbedRequest.newBuilder().addAllInputs(List.of(inputs)).setEmbeddingType(type).build());
  }

  /**
   * Scores the request's documents against its query with a reranking model (a cross-encoder;
   * an empty model selects the server's first one; a model that reranks has {@code
   * getCapabilities().getRerank()}). The response's {@code getResultsList()} is most relevant
   * first: each result's {@code getIndex()} in the documents, {@code getScore()} (a relevance
   * logit: higher is more relevant) and {@code getTokens()} (of the query and document
   * together); {@code getModel()} names the model. {@code setTopN(n)} keeps the {@code n}
   * highest scored (0: all); {@code setTruncate} as for {@link #embed(EmbedRequest)} ({@code
   * Truncation.TRUNCATION_NONE} refuses a pair over the model's limit with INVALID_ARGUMENT
   * naming the document). A request with priority 0 gets the client's default.
   */
  public RerankResponse rerank(RerankRequest given) {
    RerankRequest request = Priority.orDefault(given, priority);
    return unary(stub -> stub.rerank(request));
  }

  /** Scores {@code documents} against {@code query} with the server's first reranking model. */
  public RerankResponse rerank(String query, List<String> documents) {
    return rerank(RerankRequest.newBuilder().setQuery(query).addAllDocuments(documents).build());
  }

  /**
   * Scores the labels of each of the request's inputs with a sequence classifier (a model with
   * {@code getCapabilities().getClassify()}; an empty model selects the server's first classifier,
   * else its first reranker). The response's {@code getResultsList()} has one result per input, in
   * input order: {@code getIndex()}, {@code getTokens()} and {@code getLabelsList()} ({@code
   * getLabel()}, {@code getScore()}), highest first. Scores are softmax probabilities for a
   * single-label classifier (an input's sum to 1) and each label's sigmoid for a multi-label one
   * or a reranker. {@code setTopK(k)} keeps each input's {@code k} highest (0: all); {@code
   * setTruncate} as for {@link #embed(EmbedRequest)}. A request with priority 0 gets the client's
   * default.
   */
  public ClassifyResponse classify(ClassifyRequest given) {
    ClassifyRequest request = Priority.orDefault(given, priority);
    return unary(stub -> stub.classify(request));
  }

  /** Classifies {@code inputs} with the server's first classifying model. */
  public ClassifyResponse classify(List<String> inputs) {
    return classify(ClassifyRequest.newBuilder().addAllInputs(inputs).build());
  }

  /**
   * Embeds each of the request's inputs as a sparse vector over the vocabulary of a SPLADE model (a
   * model with {@code getCapabilities().getSparseEmbeddings()}: a BERT {@code *ForMaskedLM}
   * checkpoint; an empty model selects the server's first). The answer has the model and one {@link
   * SparseEmbeddings.Vector} per input, in input order: its index, tokens, {@code tokenIds}
   * (vocabulary ids, ascending) and their {@code weights}. {@code setTopK(k)} keeps each input's
   * {@code k} heaviest (0: every nonzero one); {@code setTruncate} as for {@link
   * #embed(EmbedRequest)}. A request with priority 0 gets the client's default.
   */
  public SparseEmbeddings embedSparse(EmbedSparseRequest given) {
    EmbedSparseRequest request = Priority.orDefault(given, priority);
    return SparseEmbeddings.of(unary(stub -> stub.embedSparse(request)));
  }

  /** Embeds {@code inputs} as sparse vectors with the server's first SPLADE model. */
  public SparseEmbeddings embedSparse(List<String> inputs) {
    return embedSparse(EmbedSparseRequest.newBuilder().addAllInputs(inputs).build());
  }

  /**
   * Starts a Transcribe: speech to text with a speech model (a model with {@code
   * getCapabilities().getTranscription()}, kind {@code MODEL_KIND_SPEECH}: a Whisper-class model;
   * an empty model selects the server's first one). The request's {@code audio} ({@link Audios});
   * optional {@code language} (ISO 639-1; empty: detected by a multilingual model, English for an
   * English-only one), {@code task} ({@code TRANSCRIPTION_TASK_TRANSCRIBE}, the default, or {@code
   * TRANSCRIPTION_TASK_TRANSLATE} into English), {@code prompt} (text the model reads first:
   * names, vocabulary, spelling), {@code requestId} and {@code priority} (0 gets the client's
   * default). Iterate the returned stream for its events ({@code started}, then a {@code segment}
   * per piece of the transcript in time order, then {@code finished}), or {@link
   * TranscribeStream#collect()} them; an empty request id is filled in client-side, so {@link
   * TranscribeStream#requestId()} works with {@link #cancel} at once. Errors surface as {@link
   * io.grpc.StatusRuntimeException} from the iterator: audio that does not match its media type,
   * too long, cut short or empty is INVALID_ARGUMENT naming {@code audio.media_type} or {@code
   * audio.data}, a language the model does not know INVALID_ARGUMENT naming {@code language}, a
   * model that is not a speech model FAILED_PRECONDITION (ErrorInfo reason {@code
   * UNSUPPORTED_OPERATION}), an unknown one NOT_FOUND.
   */
  public TranscribeStream transcribeStream(TranscribeRequest given) {
    TranscribeRequest request = Priority.orDefault(given, priority);
    TranscribeRequest req = request.getRequestId().isEmpty()
        ? request.toBuilder().setRequestId(UUID.randomUUID().toString()).build()
        : request;
    Deadline deadline = deadline();
    return new TranscribeStream(() -> blockingStub(deadline).transcribe(req), retry, deadline, req.getRequestId());
  }

  /**
   * Transcribes the request's audio to its end ({@link #transcribeStream}, collected): the {@link
   * Transcript} has the request id, the model, the audio's duration, the segments (index, start and
   * end seconds, text, token ids, average log probability, no-speech probability, compression
   * ratio), the whole text, the language, the segment count and the seconds it took.
   */
  public Transcript transcribe(TranscribeRequest request) {
    try (TranscribeStream stream = transcribeStream(request)) {
      return stream.collect();
    }
  }

  /** Transcribes {@code audio} with the server's first speech model ({@link Audios#audio(Path)}). */
  public Transcript transcribe(Audio audio) {
    return transcribe(TranscribeRequest.newBuilder().setAudio(audio).build());
  }

  /** Describes {@code model}; an empty name selects the default generation model. */
  public ModelInfo modelInfo(String model) {
    GetModelInfoRequest request =
        GetModelInfoRequest.newBuilder().setModel(model == null ? "" : model).build();
    return unary(stub -> stub.getModelInfo(request)).getInfo();
  }

  /**
   * How busy each generation model is ({@code model} empty: every one): running and waiting
   * requests, KV-cache bytes against the memory budget, the prefix cache, recent tokens per
   * second and {@code getTenantsList()} (a {@code TenantLoad} per tenant with requests; a caller
   * without the admin role sees only its own). The raw GetLoad RPC (with the server's uptime) is on {@link #stub()}.
   */
  public List<ModelLoad> modelLoads(String model) {
    GetLoadRequest request = GetLoadRequest.newBuilder().setModel(model == null ? "" : model).build();
    return unary(stub -> stub.getLoad(request)).getModelsList();
  }

  /**
   * Every ready model, the default generation model first ({@link #modelStatuses()} also lists
   * those loading, unloading or unloaded).
   */
  public List<ModelInfo> listModels() {
    return unary(stub -> stub.listModels(ListModelsRequest.getDefaultInstance())).getModelsList();
  }

  /** The memory plan of {@code model} for {@code contextTokens} (0: the model's context). */
  public MemoryPlan planMemory(String model, long contextTokens) {
    PlanMemoryRequest request =
        PlanMemoryRequest.newBuilder().setModel(model).setContextTokens(contextTokens).build();
    return unary(stub -> stub.planMemory(request)).getPlan();
  }

  /**
   * Brings the longest stored prefix of the request's prompt into the prefix cache's memory tier
   * (from the disk tier if need be) ahead of a Generate; nothing is generated. The prompt is set
   * as on a Generate request ({@code setText}, {@code setTokens}, {@code setChat}: templated as
   * Generate would), with the {@code model}, {@code sessionId} (the entry takes the session's
   * affinity) and {@code adapter} the Generate will name. The response has {@code
   * getPromptTokens()}, {@code getCachedTokens()} (at most promptTokens - 1) and {@code getTier()}:
   * {@code CACHE_TIER_MEMORY}, {@code CACHE_TIER_DISK}, or {@code CACHE_TIER_UNSPECIFIED} when
   * nothing of the prompt is stored. No prompt is INVALID_ARGUMENT; the prefix cache switched off
   * is FAILED_PRECONDITION.
   */
  public PrefetchResponse prefetch(PrefetchRequest request) {
    return unary(stub -> stub.prefetch(request));
  }

  /** Prefetches the prompt, model, session id and adapter that {@code generate} would send. */
  public PrefetchResponse prefetch(GenerateRequest generate) {
    return prefetch(prefetchRequest(generate));
  }

  /** The PrefetchRequest of a Generate request's prompt, model, session id and adapter. */
  static PrefetchRequest prefetchRequest(GenerateRequest generate) {
    PrefetchRequest.Builder request = PrefetchRequest.newBuilder()
        .setModel(generate.getModel())
        .setSessionId(generate.getSessionId())
        .setAdapter(generate.getAdapter());
    switch (generate.getPromptCase()) {
      case TEXT -> request.setText(generate.getText());
      case TOKENS -> request.setTokens(generate.getTokens());
      case CHAT -> request.setChat(generate.getChat());
      default -> { } // no prompt: the server refuses it (INVALID_ARGUMENT)
    }
    return request.build();
  }

  /**
   * Ends session {@code sessionId} (the {@code sessionId} its Generate requests named) on {@code
   * model} (empty: the default generation model): the prefix-cache entries its requests stored
   * lose their eviction affinity; nothing is deleted. Returns how many entries did (0: no such
   * open session).
   */
  public int closeSession(String model, String sessionId) {
    CloseSessionRequest request = CloseSessionRequest.newBuilder()
        .setModel(model == null ? "" : model)
        .setSessionId(sessionId)
        .build();
    return unary(stub -> stub.closeSession(request)).getEntries();
  }

  /** Ends session {@code sessionId} on the default generation model; see {@link #closeSession(String, String)}. */
  public int closeSession(String sessionId) {
    return closeSession("", sessionId);
  }

  /**
   * Loads the adapter directory {@code path} (on the server, as mlx_lm.lora writes it) as {@code
   * name} for {@code model} (empty: the default generation model); a Generate request then picks
   * it with {@code setAdapter(name)}. The response carries the adapters evicted to make room.
   */
  public LoadAdapterResponse loadAdapter(String model, String name, String path) {
    LoadAdapterRequest request =
        LoadAdapterRequest.newBuilder()
            .setModel(model == null ? "" : model)
            .setName(name)
            .setPath(path)
            .build();
    return unary(stub -> stub.loadAdapter(request));
  }

  /** Unloads an adapter; returns once the requests already using it have finished. */
  public AdapterInfo unloadAdapter(String model, String name) {
    UnloadAdapterRequest request =
        UnloadAdapterRequest.newBuilder().setModel(model == null ? "" : model).setName(name).build();
    return unary(stub -> stub.unloadAdapter(request)).getAdapter();
  }

  /** The adapters loaded on {@code model}; an empty name selects the default generation model. */
  public ListAdaptersResponse listAdapters(String model) {
    ListAdaptersRequest request =
        ListAdaptersRequest.newBuilder().setModel(model == null ? "" : model).build();
    return unary(stub -> stub.listAdapters(request));
  }

  /**
   * Loads a model at run time (admin role) and returns it once it serves. Each progress message
   * goes to {@code onProgress} (may be null) as it arrives: {@code LOAD_STAGE_RESOLVING}, {@code
   * PLANNING} ({@code getEvictedList()}: the models unloaded to make room), {@code READING} and
   * {@code CONVERTING} ({@code getDone()} of {@code getTotal()}), {@code WARMING}, and last {@code
   * SERVING} with the model. The source is relative to the server's {@code --model-root} (a
   * source outside it is INVALID_ARGUMENT); {@code setKind}, {@code setOptions} (dtype, KV-cache
   * bits, draft model, context length) and {@code setKeepAliveSeconds} (0: unloaded once idle,
   * negative: kept until {@link #unloadModel}) are optional. A refusal with RetryInfo before the
   * first message (no room while every resident model is in use: RESOURCE_EXHAUSTED) is retried;
   * a name in use is ALREADY_EXISTS, a model that can never fit OUT_OF_RANGE. A stream that ends
   * without SERVING is INTERNAL. An exception from {@code onProgress} cancels the call, which
   * abandons the load, and is thrown.
   */
  public ModelInfo loadModel(LoadModelRequest request, Consumer<LoadModelResponse> onProgress) {
    Deadline deadline = deadline();
    Context.CancellableContext context = Context.current().withCancellation();
    Context previous = context.attach();
    try {
      Iterator<LoadModelResponse> progress =
          retry.call(
              () -> {
                Iterator<LoadModelResponse> messages = blockingStub(deadline).loadModel(request);
                messages.hasNext(); // the first message, or the refusal: only that is retried
                return messages;
              },
              deadline);
      LoadModelResponse last = null;
      while (progress.hasNext()) {
        last = progress.next();
        if (onProgress != null) {
          onProgress.accept(last);
        }
      }
      return served(last);
    } finally {
      context.detach(previous);
      context.cancel(null);
    }
  }

  /**
   * Loads {@code source} (relative to the server's {@code --model-root}) as the generation model
   * {@code name} with the server's settings; see {@link #loadModel(LoadModelRequest, Consumer)}.
   */
  public ModelInfo loadModel(String name, String source) {
    return loadModel(LoadModelRequest.newBuilder().setName(name).setSource(source).build(), null);
  }

  /** The model of a LoadModel stream's last message, which must be SERVING with it. */
  static ModelInfo served(LoadModelResponse last) {
    if (last == null) {
      throw Status.INTERNAL.withDescription("LoadModel ended without a progress message").asRuntimeException();
    }
    if (last.getStage() != LoadStage.LOAD_STAGE_SERVING || !last.hasModel()) {
      throw Status.INTERNAL
          .withDescription("LoadModel ended at stage " + last.getStage() + " without serving the model")
          .asRuntimeException();
    }
    return last.getModel();
  }

  /**
   * Unloads model {@code name} (admin role): new requests for it are UNAVAILABLE, its requests
   * finish (or, with {@code cancelRequests}, end CANCELLED), then its memory is freed. The
   * response has {@code getFreedBytes()} and the model's {@code getState()} after ({@code
   * MODEL_STATE_UNLOADED} for a catalog model, which its next request loads again).
   */
  public UnloadModelResponse unloadModel(String name, boolean cancelRequests) {
    UnloadModelRequest request =
        UnloadModelRequest.newBuilder().setName(name).setCancelRequests(cancelRequests).build();
    return unary(stub -> stub.unloadModel(request));
  }

  /**
   * Every model the caller may use with its {@code getState()} ({@code MODEL_STATE_LOADING},
   * {@code READY}, {@code UNLOADING}, or {@code UNLOADED} until its first request), the ready ones
   * first in {@link #listModels()}' order: ListModels' statuses. The figures on memory and use
   * ({@code getResidentBytes()}, {@code getIdleSeconds()}, {@code getRequests()}, {@code
   * getLoadSeconds()}) are 0 without the admin role.
   */
  public List<ModelStatus> modelStatuses() {
    return unary(stub -> stub.listModels(ListModelsRequest.getDefaultInstance())).getStatusesList();
  }

  @Override
  public void close() {
    scheduler.shutdownNow();
    channel.shutdownNow();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Options for {@link MlxGrpcClient}. */
  public static final class Builder {
    private final String address;
    private boolean tls;
    private Path caFile;
    private String bearerToken;
    private Duration defaultDeadline;
    private int maxAttempts = 3;
    private BiConsumer<ErrorDetails, Duration> onRetry;
    private int priority;

    private Builder(String address) {
      this.address = Objects.requireNonNull(address, "address");
    }

    /** Use TLS, trusting the system's root certificates. */
    public Builder tls() {
      this.tls = true;
      return this;
    }

    /** Use TLS, trusting the PEM certificate(s) in {@code caFile}. */
    public Builder tlsCaFile(Path caFile) {
      this.tls = true;
      this.caFile = caFile;
      return this;
    }

    /** Send {@code authorization: Bearer <token>} on every call. */
    public Builder bearerToken(String token) {
      this.bearerToken = token;
      return this;
    }

    /** Deadline applied to every call made through the client, from the call's start; it
     * covers retries. */
    public Builder defaultDeadline(Duration deadline) {
      this.defaultDeadline = deadline;
      return this;
    }

    /**
     * Attempts in all for a call the server refuses with RESOURCE_EXHAUSTED or UNAVAILABLE and a
     * RetryInfo (default 3; 1 turns retrying off).
     */
    public Builder maxAttempts(int attempts) {
      this.maxAttempts = attempts;
      return this;
    }

    /** Called before each retry with the refusal and the delay. */
    public Builder onRetry(BiConsumer<ErrorDetails, Duration> observer) {
      this.onRetry = observer;
      return this;
    }

    /**
     * The priority (-100 to 100) of every Generate, Embed, Rerank, Classify, EmbedSparse and Transcribe request
     * that leaves its own at 0, e.g. a batch job's low one; see {@link Priority}.
     */
    public Builder priority(int priority) {
      this.priority = priority;
      return this;
    }

    public MlxGrpcClient build() {
      return new MlxGrpcClient(this);
    }
  }
}
