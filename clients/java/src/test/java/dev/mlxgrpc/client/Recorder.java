package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.GenerateResponse;
import io.grpc.stub.StreamObserver;
import java.util.List;

/** Records the events an asynchronous Generate delivers (on gRPC's threads). */
final class Recorder implements StreamObserver<GenerateResponse> {
  private final List<GenerateResponse> events;

  Recorder(List<GenerateResponse> events) {
    this.events = events;
  }

  @Override
  public void onNext(GenerateResponse event) {
    synchronized (events) {
      events.add(event);
    }
  }

  @Override
  public void onError(Throwable t) {}

  @Override
  public void onCompleted() {}
}
