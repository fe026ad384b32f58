package dev.mlxgrpc.client;

import static dev.mlxgrpc.client.ImagesTest.ascii;
import static dev.mlxgrpc.client.ImagesTest.bytes;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.ModelInfo;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import dev.mlxgrpc.v1.Video;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Videos: signature detection and the video part (no server needed); against a live server with a
 * model named "video" (the test fixture's tiny Qwen2.5-VL model), its capabilities, streamed tokens
 * for a clip whose frames add to the prompt, a clip declared with a media type that does not match
 * its bytes, and a clip refused by the image-only "vision". A server without a model named "video"
 * (the default one never has it) skips the live ones, even under MLXGRPC_REQUIRE_LIVE=1.
 */
class VideosTest {
  /** clients/testdata/clip.mp4, a 3-second MPEG-4 clip. */
  static final Path CLIP = Path.of(System.getProperty("basedir", "."), "..", "testdata", "clip.mp4");

  /** {@code head}, then zeros up to {@code length} bytes. */
  static byte[] padded(byte[] head, int length) {
    return Arrays.copyOf(head, Math.max(head.length, length));
  }

  /** The EBML header of a file whose DocType is {@code docType}. */
  static byte[] ebml(String docType) {
    byte[] head = bytes(0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81, 0x01, 0x42, 0xF7, 0x81, 0x01,
        0x42, 0x82, 0x80 | docType.length());
    byte[] type = ascii(docType);
    byte[] out = Arrays.copyOf(head, head.length + type.length);
    System.arraycopy(type, 0, out, head.length, type.length);
    return out;
  }

  static final Map<String, byte[]> SIGNATURES = Map.of(
      Videos.MP4, ascii("\0\0\0\u001cftypisom\0\0\u0002\0isomiso2mp41"),
      Videos.QUICKTIME, ascii("\0\0\0\u0014ftypqt  \0\0\u0002\0qt  "),
      Videos.WEBM, ebml("webm"),
      Videos.MATROSKA, ebml("matroska"),
      Videos.AVI, ascii("RIFF\u0024\0\0\0AVI LIST"));

  @Test
  void mediaTypeDetectsEachSignatureAndRefusesOthers() throws IOException {
    SIGNATURES.forEach((type, data) -> assertEquals(type, Videos.mediaType(data), type));
    // An MP4 may start with any of these boxes; "qt  " is QuickTime only as an ftyp brand.
    for (String box : List.of("moov", "mdat", "wide", "free")) {
      assertEquals(Videos.MP4, Videos.mediaType(ascii("\0\0\0\u0008" + box + "qt  ")), box);
    }
    assertEquals(Videos.MP4, Videos.mediaType(ascii("\0\0\0\u0014ftypM4V \0\0\0\0")));
    // "webm" counts in the first 64 bytes only.
    byte[] late = padded(bytes(0x1A, 0x45, 0xDF, 0xA3), 68);
    System.arraycopy(ascii("webm"), 0, late, 64, 4);
    assertEquals(Videos.MATROSKA, Videos.mediaType(late));
    System.arraycopy(ascii("webm"), 0, late, 60, 4);
    assertEquals(Videos.WEBM, Videos.mediaType(late));
    assertEquals(Videos.MP4, Videos.mediaType(Files.readAllBytes(CLIP)));
    for (byte[] other : List.of(new byte[0], ascii("hello, world"), ascii("ftypisom"),
        ascii("\0\0\0\u0008fty"), ascii("RIFF\u0024\0\0\0WAVEfmt "), ascii("RIFF\u0024\0\0\0WEBPVP8 "),
        ImagesTest.SIGNATURES.get(Images.PNG), bytes(0x1A, 0x45, 0xDF), ascii("RIFF"))) {
      assertThrows(Videos.UnknownVideoTypeException.class, () -> Videos.mediaType(other));
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Videos.mediaType(ascii("hello")));
    assertEquals("video: not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes 68 65 6c 6c 6f)",
        e.getMessage());
  }

  @Test
  void videoFromAFileDetectsItsMediaType(@TempDir Path dir) throws IOException {
    for (Map.Entry<String, byte[]> e : SIGNATURES.entrySet()) {
      Path path = Files.write(dir.resolve("video"), e.getValue());
      ContentPart part = Videos.video(path);
      assertEquals(ContentPart.PartCase.VIDEO, part.getPartCase());
      assertEquals(e.getKey(), part.getVideo().getMediaType());
      assertArrayEquals(e.getValue(), part.getVideo().getData().toByteArray());
    }
    Path notes = Files.writeString(dir.resolve("notes.txt"), "not a video");
    Videos.UnknownVideoTypeException e = assertThrows(Videos.UnknownVideoTypeException.class, () -> Videos.video(notes));
    assertTrue(e.getMessage().startsWith(notes + ": not an MP4"), e.getMessage());
    assertThrows(NoSuchFileException.class, () -> Videos.video(dir.resolve("missing.mp4")));
    ContentPart clip = Videos.video(CLIP);
    assertEquals(Videos.MP4, clip.getVideo().getMediaType());
    assertArrayEquals(Files.readAllBytes(CLIP), clip.getVideo().getData().toByteArray());
  }

  @Test
  void userKeepsAVideoInOrderBesideTextAndImages() {
    byte[] webm = SIGNATURES.get(Videos.WEBM);
    byte[] png = ImagesTest.SIGNATURES.get(Images.PNG);
    ChatMessage message = Images.user(Videos.video(webm, Videos.WEBM), Images.text("then"),
        Images.image(png, Images.PNG), Videos.video(ByteString.copyFromUtf8("x"), "video/x-msvideo"));
    ChatMessage want = ChatMessage.newBuilder()
        .setRole("user")
        .addParts(ContentPart.newBuilder().setVideo(
            Video.newBuilder().setData(ByteString.copyFrom(webm)).setMediaType("video/webm")))
        .addParts(ContentPart.newBuilder().setText("then"))
        .addParts(Images.image(png, "image/png"))
        .addParts(ContentPart.newBuilder().setVideo(
            Video.newBuilder().setData(ByteString.copyFromUtf8("x")).setMediaType("video/x-msvideo")))
        .build();
    assertEquals(want, message);
    assertEquals("", message.getContent());
    assertEquals(List.of(ContentPart.PartCase.VIDEO, ContentPart.PartCase.TEXT, ContentPart.PartCase.IMAGE,
        ContentPart.PartCase.VIDEO), message.getPartsList().stream().map(ContentPart::getPartCase).toList());
  }

  // Live: the fixture's "video" (Qwen2.5-VL) and image-only "vision" models.

  /** Skips the test (even under MLXGRPC_REQUIRE_LIVE=1) unless the server has a model named "video". */
  static void requireVideo(LiveServer live) {
    Assumptions.assumeTrue(live.models.stream().anyMatch(m -> m.getName().equals("video")),
        "the server has no model named \"video\" (the fixture server's video-taking model; the default server never has one)");
  }

  /** Greedy, exactly 4 tokens: {@code parts} then "What happens in the video?" to {@code model}. */
  static GenerateRequest ask(String model, ContentPart... parts) {
    List<ContentPart> all = new ArrayList<>(Arrays.asList(parts));
    all.add(Images.text("What happens in the video?"));
    return GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(ChatMessages.newBuilder().addMessages(Images.user(all)))
        .setSampling(SamplingParams.newBuilder().setTemperature(0))
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(4).setIgnoreEos(true))
        .build();
  }

  @Test
  void onlyTheVideoModelTakesVideos() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVideo(live);
      ModelInfo video = live.client.modelInfo("video");
      assertTrue(video.getCapabilities().hasMedia(), video.toString());
      assertTrue(video.getCapabilities().getMedia().getVideo(), video.toString());
      ImagesTest.requireVision(live);
      ModelInfo vision = live.client.modelInfo("vision");
      assertTrue(vision.getCapabilities().hasMedia(), vision.toString());
      assertFalse(vision.getCapabilities().getMedia().getVideo(), vision.toString());
    }
  }

  @Test
  void videoToTheVideoModelStreamsTokensAndAddsToThePrompt() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVideo(live);
      int tokens = 0;
      int promptTokens = 0;
      FinishReason reason = FinishReason.FINISH_REASON_UNSPECIFIED;
      try (GenerateStream stream = live.client.generate(ask("video", Videos.video(CLIP)))) {
        for (GenerateResponse event : stream) {
          tokens += event.getDelta().getTokenIdsCount();
          if (event.hasFinished()) {
            reason = event.getFinished().getReason();
            promptTokens = event.getFinished().getUsage().getPromptTokens();
          }
        }
      }
      assertEquals(4, tokens);
      assertEquals(FinishReason.FINISH_REASON_LENGTH, reason);
      int withoutVideo = live.client.generateText(ask("video")).finished().orElseThrow().getUsage().getPromptTokens();
      // The frames' run of positions is part of the prompt: <|vision_start|>, a token or more per pair of the 6
      // frames sampled (3 seconds at 2 per second), <|vision_end|> (the fixture's tiny processor: 1 a pair).
      assertTrue(promptTokens >= withoutVideo + 5,
          "prompt tokens with the video " + promptTokens + ", without " + withoutVideo);
    }
  }

  @Test
  void mp4DeclaredAsWebmIsAnInvalidArgument() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVideo(live);
      GenerateRequest request = ask("video", Videos.video(Files.readAllBytes(CLIP), Videos.WEBM));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.generateText(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.INVALID_ARGUMENT, d.code(), d.toString());
      assertTrue(d.violationFields().stream().anyMatch(f -> f.endsWith(".video.media_type")),
          "a field violation of the video's media_type: " + d);
    }
  }

  @Test
  void videoToAnImageOnlyModelIsAFailedPrecondition() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVideo(live);
      ImagesTest.requireVision(live);
      GenerateRequest request = ask("vision", Videos.video(CLIP));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.generateText(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.FAILED_PRECONDITION, d.code(), d.toString());
      assertEquals("UNSUPPORTED_OPERATION", d.errorInfo().orElseThrow().getReason(), d.toString());
    }
  }
}
