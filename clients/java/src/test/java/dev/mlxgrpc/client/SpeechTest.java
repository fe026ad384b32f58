package dev.mlxgrpc.client;

import static dev.mlxgrpc.client.ImagesTest.ascii;
import static dev.mlxgrpc.client.ImagesTest.bytes;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.rpc.Code;
import com.google.rpc.RetryInfo;
import dev.mlxgrpc.v1.Audio;
import dev.mlxgrpc.v1.InferenceServiceGrpc;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.ModelKind;
import dev.mlxgrpc.v1.TranscribeRequest;
import dev.mlxgrpc.v1.TranscribeResponse;
import dev.mlxgrpc.v1.TranscriptSegment;
import dev.mlxgrpc.v1.TranscriptionFinished;
import dev.mlxgrpc.v1.TranscriptionStarted;
import dev.mlxgrpc.v1.TranscriptionTask;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Speech to text: audio signature detection and the {@link Audio} helper, the requests transcribe
 * sends and the transcript it assembles, against a local server (no mlx-grpc server needed); against
 * a live server with a model named "whisper" (the test fixture's tiny Whisper, random weights), the
 * model's kind and capabilities, clients/testdata/speech.wav transcribed, the WAV declared as MP3 and
 * a Transcribe on the text model "llama". A server without a model named "whisper" (the default one
 * never has it) skips the live ones, even under MLXGRPC_REQUIRE_LIVE=1.
 */
class SpeechTest {
  /** clients/testdata/speech.wav, 2 seconds of 16 kHz mono 16-bit PCM. */
  static final Path SPEECH = Path.of(System.getProperty("basedir", "."), "..", "testdata", "speech.wav");

  static final Map<String, byte[]> SIGNATURES = Map.of(
      Audios.WAV, ascii("RIFF\u0024\0\0\0WAVEfmt "),
      Audios.FLAC, ascii("fLaC\0\0\0\u0010"),
      Audios.OGG, ascii("OggS\0\u0002\0\0"),
      Audios.MPEG, ascii("ID3\u0004\0\0\0\0\0\0"));

  @Test
  void mediaTypeDetectsEachSignatureAndRefusesOthers() {
    SIGNATURES.forEach((type, data) -> assertEquals(type, Audios.mediaType(data)));
    // An MPEG frame without an ID3 tag: FF then a byte whose top 3 bits are set (FB: MPEG-1 layer III).
    for (byte[] frame : List.of(bytes(0xFF, 0xFB, 0x90, 0x64), bytes(0xFF, 0xF3), bytes(0xFF, 0xE0))) {
      assertEquals(Audios.MPEG, Audios.mediaType(frame));
    }
    for (byte[] other : List.of(new byte[0], ascii("hello, world"), ascii("RIFF\u0024\0\0\0WEBPVP8 "),
        ascii("RIFF\u0024\0\0\0AVI "), ascii("RIFF"), ascii("fLa"), ascii("Ogg"), ascii("ID"),
        bytes(0xFF), bytes(0xFF, 0xD8, 0xFF), bytes(0xFF, 0xC0), bytes(0xFE, 0xFB))) {
      assertThrows(Audios.UnknownAudioTypeException.class, () -> Audios.mediaType(other));
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Audios.mediaType(ascii("hello")));
    assertEquals("audio: not a WAV, MP3, FLAC or Ogg audio file (first bytes 68 65 6c 6c 6f)", e.getMessage());
    assertEquals("audio: not a WAV, MP3, FLAC or Ogg audio file (first bytes none)",
        assertThrows(IllegalArgumentException.class, () -> Audios.mediaType(new byte[0])).getMessage());
  }

  @Test
  void audioFromAFileDetectsItsMediaType(@TempDir Path dir) throws IOException {
    for (Map.Entry<String, byte[]> e : SIGNATURES.entrySet()) {
      Path path = Files.write(dir.resolve("audio"), e.getValue());
      Audio audio = Audios.audio(path);
      assertEquals(e.getKey(), audio.getMediaType());
      assertArrayEquals(e.getValue(), audio.getData().toByteArray());
    }
    Path notes = Files.writeString(dir.resolve("notes.txt"), "not audio");
    Audios.UnknownAudioTypeException e = assertThrows(Audios.UnknownAudioTypeException.class, () -> Audios.audio(notes));
    assertTrue(e.getMessage().startsWith(notes + ": not a WAV"), e.getMessage());
    assertThrows(NoSuchFileException.class, () -> Audios.audio(dir.resolve("missing.wav")));
    Audio speech = Audios.audio(SPEECH);
    assertEquals(Audios.WAV, speech.getMediaType());
    assertArrayEquals(Files.readAllBytes(SPEECH), speech.getData().toByteArray());
  }

  @Test
  void audioFromBytesIsSentAsGiven() {
    byte[] wav = SIGNATURES.get(Audios.WAV);
    Audio want = Audio.newBuilder().setData(ByteString.copyFrom(wav)).setMediaType("audio/mpeg").build();
    assertEquals(want, Audios.audio(wav, Audios.MPEG), "the media type as given, not detected");
    assertEquals(want, Audios.audio(ByteString.copyFrom(wav), "audio/mpeg"));
  }

  // The requests transcribe sends, against a local server.

  /**
   * Records the requests; refuses the next {@code refusals} with RESOURCE_EXHAUSTED and a RetryInfo,
   * else answers started (the request's id and model, "whisper" for none; a second of audio per
   * 32000 bytes), a segment per word of its prompt (or one, "hello"), then finished.
   */
  static final class Recording extends InferenceServiceGrpc.InferenceServiceImplBase {
    final List<TranscribeRequest> requests = Collections.synchronizedList(new ArrayList<>());
    volatile int refusals;

    @Override
    public void transcribe(TranscribeRequest request, StreamObserver<TranscribeResponse> out) {
      requests.add(request);
      if (refusals > 0) {
        refusals--;
        out.onError(StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
            .setCode(Code.RESOURCE_EXHAUSTED.getNumber()).setMessage("refused for now")
            .addDetails(Any.pack(RetryInfo.newBuilder()
                .setRetryDelay(com.google.protobuf.Duration.newBuilder().setNanos(50_000_000)).build()))
            .build()));
        return;
      }
      String model = request.getModel().isEmpty() ? "whisper" : request.getModel();
      out.onNext(TranscribeResponse.newBuilder().setStarted(TranscriptionStarted.newBuilder()
          .setRequestId(request.getRequestId()).setModel(model)
          .setAudioSeconds(request.getAudio().getData().size() / 32000.0)).build());
      String[] words = request.getPrompt().isEmpty() ? new String[] {"hello"} : request.getPrompt().split(" ");
      for (int i = 0; i < words.length; i++) {
        out.onNext(TranscribeResponse.newBuilder().setSegment(TranscriptSegment.newBuilder()
            .setIndex(i).setStartSeconds(i).setEndSeconds(i + 0.5).setText(" " + words[i])
            .addTokenIds(50364 + i).addTokenIds(100 + i).setAvgLogprob(-0.25 * (i + 1)).setNoSpeechProb(0.125)
            .setCompressionRatio(1.5)).build());
      }
      out.onNext(TranscribeResponse.newBuilder().setFinished(TranscriptionFinished.newBuilder()
          .setText(" " + String.join(" ", words))
          .setLanguage(request.getLanguage().isEmpty() ? "en" : request.getLanguage())
          .setSegments(words.length).setSeconds(0.75)).build());
      out.onCompleted();
    }
  }

  @Test
  void transcribeSendsTheRequestAndAssemblesTheTranscript() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort()).priority(-20).build()) {
      Audio audio = Audios.audio(new byte[64000], Audios.WAV);
      Transcript plain = client.transcribe(audio);
      TranscribeRequest sent = service.requests.get(0);
      assertEquals(List.of("", audio, "", TranscriptionTask.TRANSCRIPTION_TASK_UNSPECIFIED, "", -20),
          List.of(sent.getModel(), sent.getAudio(), sent.getLanguage(), sent.getTask(), sent.getPrompt(),
              sent.getPriority()),
          "unset: the server's defaults, the client's priority");
      assertFalse(sent.getRequestId().isEmpty(), "a request id assigned client-side");
      assertEquals(new Transcript(sent.getRequestId(), "whisper", 2.0,
          List.of(new Transcript.Segment(0, 0, 0.5, " hello", List.of(50364, 100), -0.25, 0.125, 1.5)),
          " hello", "en", 1, 0.75), plain);

      TranscribeRequest full = TranscribeRequest.newBuilder()
          .setModel("my-whisper")
          .setAudio(audio)
          .setLanguage("de")
          .setTask(TranscriptionTask.TRANSCRIPTION_TASK_TRANSLATE)
          .setPrompt("Grüß Gott")
          .setRequestId("t-1")
          .setPriority(30)
          .build();
      Transcript translated = client.transcribe(full);
      assertEquals(full, service.requests.get(1), "every field as given");
      assertEquals(List.of("t-1", "my-whisper", 2.0, " Grüß Gott", "de", 2, 0.75),
          List.of(translated.requestId(), translated.model(), translated.audioSeconds(), translated.text(),
              translated.language(), translated.segmentCount(), translated.seconds()));
      assertEquals(List.of(0, 1), translated.segments().stream().map(Transcript.Segment::index).toList());
      Transcript.Segment second = translated.segments().get(1);
      assertEquals(List.of(1.0, 1.5, " Gott", List.of(50365, 101), -0.5),
          List.of(second.startSeconds(), second.endSeconds(), second.text(), second.tokenIds(), second.avgLogprob()));
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void transcribeStreamGivesTheEventsInOrderAndIsRetriedBeforeTheFirst() throws Exception {
    Recording service = new Recording();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service).build().start();
    List<Duration> retries = Collections.synchronizedList(new ArrayList<>());
    try (MlxGrpcClient client = MlxGrpcClient.builder("localhost:" + server.getPort())
        .defaultDeadline(Duration.ofSeconds(30)).onRetry((details, delay) -> retries.add(delay)).build()) {
      service.refusals = 1;
      TranscribeRequest request = TranscribeRequest.newBuilder()
          .setAudio(Audios.audio(new byte[16000], Audios.WAV)).setPrompt("one two three").build();
      List<TranscribeResponse.EventCase> kinds = new ArrayList<>();
      String id;
      try (TranscribeStream stream = client.transcribeStream(request)) {
        id = stream.requestId();
        assertFalse(id.isEmpty(), "known before anything arrives");
        for (TranscribeResponse event : stream) {
          kinds.add(event.getEventCase());
          if (event.hasStarted()) {
            assertEquals(id, event.getStarted().getRequestId());
          }
        }
      }
      assertEquals(List.of(TranscribeResponse.EventCase.STARTED, TranscribeResponse.EventCase.SEGMENT,
          TranscribeResponse.EventCase.SEGMENT, TranscribeResponse.EventCase.SEGMENT,
          TranscribeResponse.EventCase.FINISHED), kinds);
      assertEquals(List.of(Duration.ofMillis(50)), retries, "the refusal retried after the server's delay");
      assertEquals(List.of(id, id), service.requests.stream().map(TranscribeRequest::getRequestId).toList(),
          "the same request id on each attempt");

      try (TranscribeStream stream = client.transcribeStream(request.toBuilder().setRequestId("mine").build())) {
        assertEquals("mine", stream.requestId());
        Transcript transcript = stream.collect();
        assertEquals("mine", transcript.requestId());
        assertEquals(3, transcript.segments().size());
      }
    } finally {
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  static TranscribeResponse started(String id) {
    return TranscribeResponse.newBuilder().setStarted(
        TranscriptionStarted.newBuilder().setRequestId(id).setModel("whisper").setAudioSeconds(2.5)).build();
  }

  static TranscribeResponse segment(int index, String text) {
    return TranscribeResponse.newBuilder().setSegment(TranscriptSegment.newBuilder().setIndex(index)
        .setStartSeconds(index * 1.25).setEndSeconds(index * 1.25 + 1).setText(text).addAllTokenIds(List.of(7, 8, 9))
        .setAvgLogprob(-0.5).setNoSpeechProb(0.25).setCompressionRatio(2)).build();
  }

  static TranscribeResponse finished(String text, int segments) {
    return TranscribeResponse.newBuilder().setFinished(TranscriptionFinished.newBuilder()
        .setText(text).setLanguage("en").setSegments(segments).setSeconds(0.5)).build();
  }

  @Test
  void transcriptOfEventsKeepsTheSegmentsInOrderAndNeedsStartedAndFinished() {
    Transcript t = Transcript.of(List.of(started("r-1"), segment(0, " Hello"), segment(1, " world."),
        TranscribeResponse.getDefaultInstance(), finished(" Hello world.", 2)));
    assertEquals(List.of("r-1", "whisper", 2.5, " Hello world.", "en", 2, 0.5),
        List.of(t.requestId(), t.model(), t.audioSeconds(), t.text(), t.language(), t.segmentCount(), t.seconds()));
    assertEquals(List.of(
        new Transcript.Segment(0, 0, 1, " Hello", List.of(7, 8, 9), -0.5, 0.25, 2),
        new Transcript.Segment(1, 1.25, 2.25, " world.", List.of(7, 8, 9), -0.5, 0.25, 2)), t.segments());
    assertThrows(UnsupportedOperationException.class, () -> t.segments().add(t.segments().get(0)));

    Transcript silent = Transcript.of(List.of(started("r-2"), finished("", 0)));
    assertEquals(List.of(), silent.segments());
    assertEquals(0, silent.segmentCount());

    Map.of(List.of(started("r-3"), segment(0, " cut")), "finished",
        List.of(segment(0, " no start"), finished(" no start", 1)), "started",
        List.<TranscribeResponse>of(), "started").forEach((events, missing) -> {
          StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> Transcript.of(events));
          assertEquals(Status.Code.INTERNAL, e.getStatus().getCode());
          assertEquals("Transcribe ended without its " + missing + " event", e.getStatus().getDescription());
        });
  }

  // Live: the fixture's "whisper" (random weights: its text means nothing, its form does) and text-only "llama".

  /** Skips the test (even under MLXGRPC_REQUIRE_LIVE=1) unless the server has a model named "whisper". */
  static void requireWhisper(LiveServer live) {
    Assumptions.assumeTrue(live.models.stream().anyMatch(m -> m.getName().equals("whisper")),
        "the server has no model named \"whisper\" (the fixture server's speech model; the default server never has one)");
  }

  static TranscribeRequest speech(String model, Audio audio) {
    return TranscribeRequest.newBuilder().setModel(model).setAudio(audio).build();
  }

  @Test
  void whisperIsASpeechModel() {
    try (LiveServer live = LiveServer.connect()) {
      requireWhisper(live);
      ModelInfo whisper = live.client.modelInfo("whisper");
      assertEquals(ModelKind.MODEL_KIND_SPEECH, whisper.getKind(), whisper.toString());
      assertTrue(whisper.getCapabilities().getTranscription(), whisper.toString());
      assertFalse(whisper.getCapabilities().getGeneration(), whisper.toString());
    }
  }

  @Test
  void theWavIsTranscribedIntoIndexedSegments() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireWhisper(live);
      Transcript t = live.client.transcribe(
          speech("whisper", Audios.audio(SPEECH)).toBuilder().setRequestId("java-speech").build());
      assertEquals("java-speech", t.requestId());
      assertEquals("whisper", t.model());
      assertEquals(2.0, t.audioSeconds(), 0.05);
      assertFalse(t.segments().isEmpty(), "at least one segment");
      // Random weights: the segments' text and times mean nothing (start <= end is not guaranteed), their order does.
      assertEquals(IntStream.range(0, t.segments().size()).boxed().collect(Collectors.toList()),
          t.segments().stream().map(Transcript.Segment::index).collect(Collectors.toList()));
      assertEquals(t.segments().size(), t.segmentCount());
      assertEquals("en", t.language());
      assertTrue(t.segments().stream().allMatch(s -> !s.tokenIds().isEmpty()), "each segment's tokens");
      assertTrue(t.seconds() >= 0, "seconds " + t.seconds());
    }
  }

  @Test
  void aWavDeclaredAsMpegIsAnInvalidArgument() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireWhisper(live);
      TranscribeRequest request = speech("whisper", Audios.audio(Files.readAllBytes(SPEECH), Audios.MPEG));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.transcribe(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.INVALID_ARGUMENT, d.code(), d.toString());
      assertEquals(List.of("audio.media_type"), d.violationFields(), d.toString());
    }
  }

  @Test
  void transcribeOnATextModelIsAFailedPrecondition() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireWhisper(live);
      TranscribeRequest request = speech("llama", Audios.audio(SPEECH));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.transcribe(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.FAILED_PRECONDITION, d.code(), d.toString());
      assertEquals("UNSUPPORTED_OPERATION", d.errorInfo().orElseThrow().getReason(), d.toString());
    }
  }
}
