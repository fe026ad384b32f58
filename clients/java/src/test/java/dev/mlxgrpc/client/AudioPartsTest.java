package dev.mlxgrpc.client;

import static dev.mlxgrpc.client.SpeechTest.SIGNATURES;
import static dev.mlxgrpc.client.SpeechTest.SPEECH;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.Audio;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audio in chat messages: the audio part from bytes and from a file, its media type detected, and
 * its place in a message (no server needed); against a live server with a model named "omni" (the
 * test fixture's tiny Qwen3-Omni, which takes audio and images), its capabilities, streamed tokens
 * for clients/testdata/speech.wav whose audio adds to the prompt, the WAV declared as MP3, five
 * audio files in one request, and the WAV refused by the image-only "vision". A server without a
 * model named "omni" (the default one never has it) skips the live ones, even under
 * MLXGRPC_REQUIRE_LIVE=1.
 */
class AudioPartsTest {
  @Test
  void partFromBytesIsSentAsGiven() {
    byte[] wav = SIGNATURES.get(Audios.WAV);
    ContentPart want = ContentPart.newBuilder()
        .setAudio(Audio.newBuilder().setData(ByteString.copyFrom(wav)).setMediaType("audio/mpeg"))
        .build();
    assertEquals(want, Audios.part(wav, Audios.MPEG), "the media type as given, not detected");
    assertEquals(want, Audios.part(ByteString.copyFrom(wav), "audio/mpeg"));
    assertEquals(want, Audios.part(Audios.audio(wav, Audios.MPEG)));
    Audio flac = Audios.audio(SIGNATURES.get(Audios.FLAC), Audios.FLAC);
    assertSame(flac, Audios.part(flac).getAudio(), "the Transcribe audio message itself");
    assertEquals(ContentPart.PartCase.AUDIO, Audios.part(flac).getPartCase());
  }

  @Test
  void partFromAFileDetectsItsMediaType(@TempDir Path dir) throws IOException {
    for (Map.Entry<String, byte[]> e : SIGNATURES.entrySet()) {
      Path path = Files.write(dir.resolve("audio"), e.getValue());
      ContentPart part = Audios.part(path);
      assertEquals(ContentPart.PartCase.AUDIO, part.getPartCase());
      assertEquals(e.getKey(), part.getAudio().getMediaType());
      assertArrayEquals(e.getValue(), part.getAudio().getData().toByteArray());
    }
    Path notes = Files.writeString(dir.resolve("notes.txt"), "not audio");
    Audios.UnknownAudioTypeException e = assertThrows(Audios.UnknownAudioTypeException.class, () -> Audios.part(notes));
    assertTrue(e.getMessage().startsWith(notes + ": not a WAV"), e.getMessage());
    assertThrows(NoSuchFileException.class, () -> Audios.part(dir.resolve("missing.wav")));
    ContentPart speech = Audios.part(SPEECH);
    assertEquals(Audios.WAV, speech.getAudio().getMediaType());
    assertArrayEquals(Files.readAllBytes(SPEECH), speech.getAudio().getData().toByteArray());
  }

  @Test
  void userKeepsAudioThenImageThenTextInOrder() {
    byte[] ogg = SIGNATURES.get(Audios.OGG);
    byte[] png = ImagesTest.SIGNATURES.get(Images.PNG);
    ChatMessage message = Images.user(Audios.part(ogg, Audios.OGG), Images.image(png, Images.PNG),
        Images.text("What is said about the picture?"));
    ChatMessage want = ChatMessage.newBuilder()
        .setRole("user")
        .addParts(ContentPart.newBuilder().setAudio(
            Audio.newBuilder().setData(ByteString.copyFrom(ogg)).setMediaType("audio/ogg")))
        .addParts(Images.image(png, "image/png"))
        .addParts(ContentPart.newBuilder().setText("What is said about the picture?"))
        .build();
    assertEquals(want, message);
    assertEquals("", message.getContent());
    assertEquals(List.of(ContentPart.PartCase.AUDIO, ContentPart.PartCase.IMAGE, ContentPart.PartCase.TEXT),
        message.getPartsList().stream().map(ContentPart::getPartCase).toList());
  }

  // Live: the fixture's "omni" (Qwen3-Omni: audio and images) and image-only "vision" models.

  /** Skips the test (even under MLXGRPC_REQUIRE_LIVE=1) unless the server has a model named "omni". */
  static void requireOmni(LiveServer live) {
    Assumptions.assumeTrue(live.models.stream().anyMatch(m -> m.getName().equals("omni")),
        "the server has no model named \"omni\" (the fixture server's audio-taking model; the default server never has one)");
  }

  /** Greedy, exactly 4 tokens: {@code parts} then "What is said?" to {@code model}. */
  static GenerateRequest ask(String model, ContentPart... parts) {
    List<ContentPart> all = new ArrayList<>(Arrays.asList(parts));
    all.add(Images.text("What is said?"));
    return GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(ChatMessages.newBuilder().addMessages(Images.user(all)))
        .setSampling(SamplingParams.newBuilder().setTemperature(0))
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(4).setIgnoreEos(true))
        .build();
  }

  /** The error {@code request} fails with. */
  static ErrorDetails refusal(LiveServer live, GenerateRequest request) {
    return ErrorDetails.from(assertThrows(StatusRuntimeException.class, () -> live.client.generateText(request)));
  }

  @Test
  void onlyTheOmniModelTakesAudio() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireOmni(live);
      ModelInfo omni = live.client.modelInfo("omni");
      assertTrue(omni.getCapabilities().getMedia().getAudio(), omni.toString());
      ImagesTest.requireVision(live);
      ModelInfo vision = live.client.modelInfo("vision");
      assertTrue(vision.getCapabilities().hasMedia(), vision.toString());
      assertFalse(vision.getCapabilities().getMedia().getAudio(), vision.toString());
    }
  }

  @Test
  void audioToTheOmniModelStreamsTokensAndAddsToThePrompt() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireOmni(live);
      int tokens = 0;
      int promptTokens = 0;
      FinishReason reason = FinishReason.FINISH_REASON_UNSPECIFIED;
      try (GenerateStream stream = live.client.generate(ask("omni", Audios.part(SPEECH)))) {
        for (GenerateResponse event : stream) {
          tokens += event.getDelta().getTokenIdsCount();
          if (event.hasStarted()) {
            promptTokens = event.getStarted().getPromptTokens();
          } else if (event.hasFinished()) {
            reason = event.getFinished().getReason();
          }
        }
      }
      assertEquals(4, tokens);
      assertEquals(FinishReason.FINISH_REASON_LENGTH, reason);
      int withoutAudio = live.client.generateText(ask("omni")).started().orElseThrow().getPromptTokens();
      // The 2 seconds of speech are 13 tokens a second between the audio's 2 marker tokens.
      assertTrue(promptTokens >= withoutAudio + 2 * 13 + 2,
          "prompt tokens with the audio " + promptTokens + ", without " + withoutAudio);
    }
  }

  @Test
  void wavDeclaredAsMpegIsAnInvalidArgument() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireOmni(live);
      ErrorDetails d = refusal(live, ask("omni", Audios.part(Files.readAllBytes(SPEECH), Audios.MPEG)));
      assertEquals(Status.Code.INVALID_ARGUMENT, d.code(), d.toString());
      assertTrue(d.violationFields().contains("chat.messages[0].parts[0].audio.media_type"),
          "a field violation of the audio's media_type: " + d);
    }
  }

  @Test
  void fiveAudioFilesAreAnInvalidArgument() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireOmni(live);
      ErrorDetails d = refusal(live, ask("omni", Collections.nCopies(5, Audios.part(SPEECH)).toArray(ContentPart[]::new)));
      assertEquals(Status.Code.INVALID_ARGUMENT, d.code(), d.toString());
      assertTrue(d.message().contains("at most 4 audio files"), d.toString());
    }
  }

  @Test
  void audioToAnImageOnlyModelIsAFailedPrecondition() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireOmni(live);
      ImagesTest.requireVision(live);
      ErrorDetails d = refusal(live, ask("vision", Audios.part(SPEECH)));
      assertEquals(Status.Code.FAILED_PRECONDITION, d.code(), d.toString());
      assertEquals("UNSUPPORTED_OPERATION", d.errorInfo().orElseThrow().getReason(), d.toString());
      assertTrue(d.message().contains("does not take audio"), d.toString());
    }
  }
}
