package dev.mlxgrpc.client;

import dev.mlxgrpc.v1.TranscribeResponse;
import dev.mlxgrpc.v1.TranscriptSegment;
import dev.mlxgrpc.v1.TranscriptionFinished;
import dev.mlxgrpc.v1.TranscriptionStarted;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;

/**
 * Transcribe's answer ({@link MlxGrpcClient#transcribe}): the request's id, the model that
 * transcribed, the audio's duration, the {@link Segment}s in time order, and the whole {@code text},
 * the spoken {@code language} (ISO 639-1: the request's, or the one the model detected), the number
 * of segments the server sent ({@code segmentCount}, {@code segments().size()}) and the {@code
 * seconds} from admission to the transcript.
 */
public record Transcript(
    String requestId,
    String model,
    double audioSeconds,
    List<Transcript.Segment> segments,
    String text,
    String language,
    int segmentCount,
    double seconds) {
  /**
   * A piece of the transcript, as the model timed it: its {@code index} among the segments (from
   * 0), where it starts and ends in the audio (seconds), its text, the tokens the model wrote for it
   * (text and timestamp tokens), the mean log probability of its tokens, the model's probability
   * that its window holds no speech and its text's gzip compression ratio (high: repetitive).
   */
  public record Segment(
      int index,
      double startSeconds,
      double endSeconds,
      String text,
      List<Integer> tokenIds,
      double avgLogprob,
      double noSpeechProb,
      double compressionRatio) {
    /** The segment of a {@code segment} event. */
    static Segment of(TranscriptSegment s) {
      return new Segment(s.getIndex(), s.getStartSeconds(), s.getEndSeconds(), s.getText(),
          List.copyOf(s.getTokenIdsList()), s.getAvgLogprob(), s.getNoSpeechProb(), s.getCompressionRatio());
    }
  }

  /**
   * The transcript of a Transcribe stream's events ({@link TranscribeStream}'s, or ones you read
   * from {@link MlxGrpcClient#stub()}): {@code started}, the {@code segment}s in the order they
   * came, {@code finished}.
   *
   * @throws io.grpc.StatusRuntimeException INTERNAL when the events lack {@code started} or {@code
   *     finished}
   */
  public static Transcript of(Iterable<TranscribeResponse> events) {
    TranscriptionStarted started = null;
    TranscriptionFinished finished = null;
    List<Segment> segments = new ArrayList<>();
    for (TranscribeResponse event : events) {
      switch (event.getEventCase()) {
        case STARTED -> started = event.getStarted();
        case SEGMENT -> segments.add(Segment.of(event.getSegment()));
        case FINISHED -> finished = event.getFinished();
        default -> { } // an event this client does not know: skipped
      }
    }
    if (started == null || finished == null) {
      throw Status.INTERNAL
          .withDescription("Transcribe ended without its " + (started == null ? "started" : "finished") + " event")
          .asRuntimeException();
    }
    return new Transcript(started.getRequestId(), started.getModel(), started.getAudioSeconds(),
        List.copyOf(segments), finished.getText(), finished.getLanguage(), finished.getSegments(),
        finished.getSeconds());
  }
}
