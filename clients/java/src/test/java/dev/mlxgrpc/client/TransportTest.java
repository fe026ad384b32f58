package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ListModelsRequest;
import dev.mlxgrpc.v1.ListModelsResponse;
import dev.mlxgrpc.v1.ModelInfo;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerCredentials;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsServerCredentials;
import io.grpc.stub.StreamObserver;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.time.Duration;
import java.util.Base64;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import javax.net.ssl.KeyManagerFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Checks the client's TLS (CA file), bearer token and deadline options against a local fake
 * InferenceService. Needs no mlx-grpc server, so it always runs.
 */
class TransportTest {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  /** Answers ListModels with one model and remembers the authorization header it saw. */
  private static Server start(ServerCredentials creds, AtomicReference<String> seenAuth)
      throws Exception {
    InferenceServiceGrpc.InferenceServiceImplBase impl =
        new InferenceServiceGrpc.InferenceServiceImplBase() {
          @Override
          public void listModels(
              ListModelsRequest request, StreamObserver<ListModelsResponse> out) {
            out.onNext(
                ListModelsResponse.newBuilder()
                    .addModels(ModelInfo.newBuilder().setName("fake"))
                    .build());
            out.onCompleted();
          }
        };
    ServerInterceptor capture =
        new ServerInterceptor() {
          @Override
          public <Q, R> ServerCall.Listener<Q> interceptCall(
              ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
            seenAuth.set(headers.get(AUTHORIZATION));
            return next.startCall(call, headers);
          }
        };
    return Grpc.newServerBuilderForPort(0, creds)
        .addService(ServerInterceptors.intercept(impl, capture))
        .build()
        .start();
  }

  @Test
  void plaintextWithoutTokenSendsNoAuthorization() throws Exception {
    AtomicReference<String> auth = new AtomicReference<>("unset");
    Server server = start(InsecureServerCredentials.create(), auth);
    try (MlxGrpcClient client = MlxGrpcClient.connect("localhost:" + server.getPort())) {
      ListModelsResponse resp = client.stub().listModels(ListModelsRequest.getDefaultInstance());
      assertEquals("fake", resp.getModels(0).getName());
      assertEquals(null, auth.get());
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void tlsWithCaFileAndBearerToken(@TempDir Path dir) throws Exception {
    // A self-signed certificate for localhost, made with the JDK's keytool.
    Path keystore = dir.resolve("server.p12");
    char[] password = "changeit".toCharArray();
    Process keytool =
        new ProcessBuilder(
                Paths.get(System.getProperty("java.home"), "bin", "keytool").toString(),
                "-genkeypair", "-alias", "server", "-keyalg", "EC", "-groupname", "secp256r1",
                "-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1",
                "-validity", "2", "-storetype", "PKCS12", "-keystore", keystore.toString(),
                "-storepass", new String(password), "-keypass", new String(password))
            .redirectErrorStream(true)
            .start();
    String keytoolOut = new String(keytool.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, keytool.waitFor(), keytoolOut);

    KeyStore ks = KeyStore.getInstance("PKCS12");
    try (InputStream in = Files.newInputStream(keystore)) {
      ks.load(in, password);
    }
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(ks, password);
    Certificate cert = ks.getCertificate("server");
    Path caFile = dir.resolve("ca.pem");
    Files.writeString(
        caFile,
        "-----BEGIN CERTIFICATE-----\n"
            + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
                .encodeToString(cert.getEncoded())
            + "\n-----END CERTIFICATE-----\n");

    AtomicReference<String> auth = new AtomicReference<>();
    Server server =
        start(TlsServerCredentials.newBuilder().keyManager(kmf.getKeyManagers()).build(), auth);
    String address = "localhost:" + server.getPort();
    try {
      try (MlxGrpcClient client =
          MlxGrpcClient.builder(address)
              .tlsCaFile(caFile)
              .bearerToken("s3cret")
              .defaultDeadline(Duration.ofSeconds(10))
              .build()) {
        ListModelsResponse resp = client.stub().listModels(ListModelsRequest.getDefaultInstance());
        assertEquals("fake", resp.getModels(0).getName());
        assertEquals("Bearer s3cret", auth.get());
        // A stub of one's own on channel() carries the token too.
        auth.set(null);
        InferenceServiceGrpc.newBlockingStub(client.channel()).listModels(ListModelsRequest.getDefaultInstance());
        assertEquals("Bearer s3cret", auth.get());
      }
      // Without the CA the handshake fails: the system roots do not trust the certificate.
      try (MlxGrpcClient untrusted = MlxGrpcClient.builder(address).tls().build()) {
        StatusRuntimeException e =
            assertThrows(
                StatusRuntimeException.class,
                () -> untrusted.stub().listModels(ListModelsRequest.getDefaultInstance()));
        assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode());
      }
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void defaultDeadlineApplies() throws Exception {
    // A server that never answers: the default deadline must end the call.
    Server server =
        Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
            .addService(
                new InferenceServiceGrpc.InferenceServiceImplBase() {
                  @Override
                  public void listModels(
                      ListModelsRequest request, StreamObserver<ListModelsResponse> out) {
                    // never responds
                  }
                })
            .build()
            .start();
    try (MlxGrpcClient client =
        MlxGrpcClient.builder("localhost:" + server.getPort())
            .defaultDeadline(Duration.ofMillis(300))
            .build()) {
      long t0 = System.nanoTime();
      StatusRuntimeException e =
          assertThrows(
              StatusRuntimeException.class,
              () -> client.stub().listModels(ListModelsRequest.getDefaultInstance()));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
      assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }
}
