package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.AdapterInfo;
import dev.mlxgrpc.v1.CancelRequest;
import dev.mlxgrpc.v1.EmbedRequest;
import dev.mlxgrpc.v1.EmbedResponse;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GetModelInfoRequest;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.InferenceServiceGrpc.InferenceServiceBlockingStub;
import dev.mlxgrpc.v1.ListAdaptersRequest;
import dev.mlxgrpc.v1.ListAdaptersResponse;
import dev.mlxgrpc.v1.LoadAdapterRequest;
import dev.mlxgrpc.v1.LoadAdapterResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.UnloadAdapterRequest;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.Context;
import io.grpc.ForwardingClientCall.SimpleForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/**
 * A small wrapper around the generated {@code InferenceServiceGrpc} stubs: one channel with
 * optional TLS, a bearer token on every call and a default deadline.
 *
 * <pre>{@code
 * try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:50051").build()) {
 *   try (GenerateStream stream = client.generate(GenerateRequest.newBuilder().setText("Hi").build())) {
 *     for (GenerateResponse event : stream) { ... }
 *   }
 * }
 * }</pre>
 *
 * <p>RPCs without a helper (Tokenize, Detokenize, PlanMemory, ListModels) are reached through
 * {@link #stub()}.
 */
public final class MlxGrpcClient implements AutoCloseable {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel channel;
  private final Channel intercepted;
  private final Duration defaultDeadline;

  private MlxGrpcClient(Builder b) {
    ChannelCredentials creds;
    if (b.caFile != null) {
      try {
        creds = TlsChannelCredentials.newBuilder().trustManager(b.caFile.toFile()).build();
      } catch (IOException e) {
        throw new UncheckedIOException("reading CA file " + b.caFile, e);
      }
    } else if (b.tls) {
      creds = TlsChannelCredentials.create();
    } else {
      creds = InsecureChannelCredentials.create();
    }
    this.channel = Grpc.newChannelBuilder(b.address, creds).build();
    this.intercepted =
        b.bearerToken == null
            ? channel
            : ClientInterceptors.intercept(channel, new BearerTokenInterceptor(b.bearerToken));
    this.defaultDeadline = b.defaultDeadline;
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
    InferenceServiceBlockingStub stub = InferenceServiceGrpc.newBlockingStub(intercepted);
    if (defaultDeadline != null) {
      stub = stub.withDeadlineAfter(defaultDeadline.toNanos(), TimeUnit.NANOSECONDS);
    }
    return stub;
  }

  /**
   * Starts a Generate. Iterate the returned stream for its events ({@code started}, then {@code
   * delta}s, then {@code finished}); call {@link GenerateStream#cancel()} (or close it) to cancel
   * the call client-side. Errors surface as {@link io.grpc.StatusRuntimeException} from the
   * iterator.
   */
  public GenerateStream generate(GenerateRequest request) {
    Context.CancellableContext context = Context.current().withCancellation();
    Iterator<dev.mlxgrpc.v1.GenerateResponse> events;
    try {
      events = context.call(() -> stub().generate(request));
    } catch (RuntimeException e) {
      context.cancel(e);
      throw e;
    } catch (Exception e) {
      context.cancel(e);
      throw new IllegalStateException(e);
    }
    return new GenerateStream(context, events, request.getRequestId());
  }

  /**
   * Cancels a running or queued Generate or Embed by its request id (the Cancel RPC). Returns
   * whether the server found and cancelled it; a cancelled Generate stream then ends with a
   * {@code finished} event whose reason is {@code FINISH_REASON_CANCELLED}.
   */
  public boolean cancel(String requestId) {
    return stub().cancel(CancelRequest.newBuilder().setRequestId(requestId).build()).getCancelled();
  }

  /** Embeds the request's inputs; one response per input, sorted by {@code index}. */
  public List<EmbedResponse> embed(EmbedRequest request) {
    List<EmbedResponse> out = new ArrayList<>(request.getInputsCount());
    stub().embed(request).forEachRemaining(out::add);
    out.sort(Comparator.comparingInt(EmbedResponse::getIndex));
    return out;
  }

  /** Embeds {@code inputs} with the default embedding model, sorted by input order. */
  public List<EmbedResponse> embed(String... inputs) {
    return embed(EmbedRequest.newBuilder().addAllInputs(List.of(inputs)).build());
  }

  /** Describes {@code model}; an empty name selects the default generation model. */
  public ModelInfo modelInfo(String model) {
    return stub()
        .getModelInfo(GetModelInfoRequest.newBuilder().setModel(model == null ? "" : model).build())
        .getInfo();
  }

  /**
   * Loads the adapter directory {@code path} (on the server, as mlx_lm.lora writes it) as {@code
   * name} for {@code model} (empty: the default generation model); a Generate request then picks
   * it with {@code setAdapter(name)}. The response carries the adapters evicted to make room.
   */
  public LoadAdapterResponse loadAdapter(String model, String name, String path) {
    return stub()
        .loadAdapter(
            LoadAdapterRequest.newBuilder()
                .setModel(model == null ? "" : model)
                .setName(name)
                .setPath(path)
                .build());
  }

  /** Unloads an adapter; returns once the requests already using it have finished. */
  public AdapterInfo unloadAdapter(String model, String name) {
    return stub()
        .unloadAdapter(
            UnloadAdapterRequest.newBuilder().setModel(model == null ? "" : model).setName(name).build())
        .getAdapter();
  }

  /** The adapters loaded on {@code model}; an empty name selects the default generation model. */
  public ListAdaptersResponse listAdapters(String model) {
    return stub()
        .listAdapters(ListAdaptersRequest.newBuilder().setModel(model == null ? "" : model).build());
  }

  /** The underlying channel (without the token interceptor). */
  public ManagedChannel channel() {
    return channel;
  }

  @Override
  public void close() {
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

    /** Deadline applied to every call made through the client, from the call's start. */
    public Builder defaultDeadline(Duration deadline) {
      this.defaultDeadline = deadline;
      return this;
    }

    public MlxGrpcClient build() {
      return new MlxGrpcClient(this);
    }
  }

  private static final class BearerTokenInterceptor implements ClientInterceptor {
    private final String value;

    BearerTokenInterceptor(String token) {
      this.value = "Bearer " + token;
    }

    @Override
    public <ReqT, RespT> ClientCall<ReqT, RespT> interceptCall(
        MethodDescriptor<ReqT, RespT> method, CallOptions callOptions, Channel next) {
      return new SimpleForwardingClientCall<>(next.newCall(method, callOptions)) {
        @Override
        public void start(Listener<RespT> listener, Metadata headers) {
          headers.put(AUTHORIZATION, value);
          super.start(listener, headers);
        }
      };
    }
  }
}
