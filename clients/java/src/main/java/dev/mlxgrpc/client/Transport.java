package dev.mlxgrpc.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
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
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;

/** How {@link MlxGrpcClient} connects: credentials, the bearer token, the retry timer. */
final class Transport {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private Transport() {}

  /** A channel to {@code address}: plaintext, TLS with the system roots, or TLS with a CA file. */
  static ManagedChannel channel(String address, boolean tls, Path caFile) {
    ChannelCredentials creds;
    if (caFile != null) {
      try {
        creds = TlsChannelCredentials.newBuilder().trustManager(caFile.toFile()).build();
      } catch (IOException e) {
        throw new UncheckedIOException("reading CA file " + caFile, e);
      }
    } else if (tls) {
      creds = TlsChannelCredentials.create();
    } else {
      creds = InsecureChannelCredentials.create();
    }
    return Grpc.newChannelBuilder(address, creds).build();
  }

  /** {@code channel} sending {@code authorization: Bearer <token>} on every call (as is when null). */
  static Channel withToken(Channel channel, String token) {
    return token == null ? channel : ClientInterceptors.intercept(channel, new BearerToken(token));
  }

  /** One daemon thread that starts asynchronous retries after their delay. */
  static ScheduledExecutorService retryScheduler() {
    return Executors.newSingleThreadScheduledExecutor(
        r -> {
          Thread t = new Thread(r, "mlx-grpc-client-retry");
          t.setDaemon(true);
          return t;
        });
  }

  private static final class BearerToken implements ClientInterceptor {
    private final String value;

    BearerToken(String token) {
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
