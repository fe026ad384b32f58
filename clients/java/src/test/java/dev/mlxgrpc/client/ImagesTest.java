package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ChatMessages;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.FinishReason;
import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.GenerateResponse;
import dev.mlxgrpc.v1.Image;
import dev.mlxgrpc.v1.SamplingParams;
import dev.mlxgrpc.v1.StoppingCriteria;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Images: signature detection and the parts a user message is built of (no server needed); against
 * a live server with a model named "vision" (the test fixture's tiny vision-language model), an
 * image refused by the text-only "llama" and by a media type that does not match its bytes, and
 * streamed tokens for one on "vision". A server without a model named "vision" (the default one
 * never has it) skips the live ones, even under MLXGRPC_REQUIRE_LIVE=1.
 */
class ImagesTest {
  /** clients/testdata/gradient.png, a 64x64 RGB PNG. */
  static final Path GRADIENT = Path.of(System.getProperty("basedir", "."), "..", "testdata", "gradient.png");

  static byte[] bytes(int... b) {
    byte[] out = new byte[b.length];
    for (int i = 0; i < b.length; i++) {
      out[i] = (byte) b[i];
    }
    return out;
  }

  static byte[] ascii(String s) {
    return s.getBytes(StandardCharsets.ISO_8859_1);
  }

  static final Map<String, byte[]> SIGNATURES = Map.of(
      Images.PNG, ascii("\u0089PNG\r\n\u001a\n\0\0\0\rIHDR"),
      Images.JPEG, bytes(0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0),
      Images.GIF, ascii("GIF89a\u0001\0\u0001\0"),
      Images.WEBP, ascii("RIFF\u0024\0\0\0WEBPVP8 "));

  @Test
  void mediaTypeDetectsEachSignatureAndRefusesOthers() {
    SIGNATURES.forEach((type, data) -> assertEquals(type, Images.mediaType(data)));
    for (byte[] other : List.of(new byte[0], ascii("hello, world"), ascii("RIFF\u0024\0\0\0WAVEfmt "),
        ascii("RIFF"), bytes(0xFF, 0xD8))) {
      assertThrows(Images.UnknownImageTypeException.class, () -> Images.mediaType(other));
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Images.mediaType(ascii("hello")));
    assertEquals("image: not a PNG, JPEG, WebP or GIF image (first bytes 68 65 6c 6c 6f)", e.getMessage());
  }

  @Test
  void imageFromAFileDetectsItsMediaType(@TempDir Path dir) throws IOException {
    for (Map.Entry<String, byte[]> e : SIGNATURES.entrySet()) {
      Path path = Files.write(dir.resolve("image"), e.getValue());
      ContentPart part = Images.image(path);
      assertEquals(ContentPart.PartCase.IMAGE, part.getPartCase());
      assertEquals(e.getKey(), part.getImage().getMediaType());
      assertArrayEquals(e.getValue(), part.getImage().getData().toByteArray());
    }
    Path notes = Files.writeString(dir.resolve("notes.txt"), "not an image");
    Images.UnknownImageTypeException e = assertThrows(Images.UnknownImageTypeException.class, () -> Images.image(notes));
    assertTrue(e.getMessage().startsWith(notes + ": not a PNG"), e.getMessage());
    assertThrows(NoSuchFileException.class, () -> Images.image(dir.resolve("missing.png")));
    assertEquals(Images.PNG, Images.image(GRADIENT).getImage().getMediaType());
  }

  @Test
  void userKeepsThePartsInOrderEachWithItsCase() {
    byte[] jpeg = SIGNATURES.get(Images.JPEG);
    ChatMessage message = Images.user(Images.text("Compare"), Images.image(jpeg, Images.JPEG),
        Images.text("with"), Images.image(ByteString.copyFromUtf8("x"), "image/webp"));
    ChatMessage want = ChatMessage.newBuilder()
        .setRole("user")
        .addParts(ContentPart.newBuilder().setText("Compare"))
        .addParts(ContentPart.newBuilder().setImage(
            Image.newBuilder().setData(ByteString.copyFrom(jpeg)).setMediaType("image/jpeg")))
        .addParts(ContentPart.newBuilder().setText("with"))
        .addParts(ContentPart.newBuilder().setImage(
            Image.newBuilder().setData(ByteString.copyFromUtf8("x")).setMediaType("image/webp")))
        .build();
    assertEquals(want, message);
    assertEquals("", message.getContent());
    assertEquals(List.of(ContentPart.PartCase.TEXT, ContentPart.PartCase.IMAGE, ContentPart.PartCase.TEXT,
        ContentPart.PartCase.IMAGE), message.getPartsList().stream().map(ContentPart::getPartCase).toList());
  }

  // Live: the fixture's "vision" and text-only "llama" models.

  /** Skips the test (even under MLXGRPC_REQUIRE_LIVE=1) unless the server has a model named "vision". */
  static void requireVision(LiveServer live) {
    Assumptions.assumeTrue(live.models.stream().anyMatch(m -> m.getName().equals("vision")),
        "the server has no model named \"vision\" (the fixture server's vision-language model; the default server never has one)");
  }

  /** Greedy, at most 4 tokens: {@code image} and "Describe the image." to {@code model}. */
  static GenerateRequest describe(String model, ContentPart image) {
    return GenerateRequest.newBuilder()
        .setModel(model)
        .setChat(ChatMessages.newBuilder().addMessages(Images.user(image, Images.text("Describe the image."))))
        .setSampling(SamplingParams.newBuilder().setTemperature(0))
        .setStopping(StoppingCriteria.newBuilder().setMaxTokens(4))
        .build();
  }

  @Test
  void imageToATextOnlyModelIsAFailedPrecondition() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVision(live);
      GenerateRequest request = describe("llama", Images.image(GRADIENT));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.generateText(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.FAILED_PRECONDITION, d.code(), d.toString());
      assertEquals("UNSUPPORTED_OPERATION", d.errorInfo().orElseThrow().getReason(), d.toString());
    }
  }

  @Test
  void imageToTheVisionModelStreamsTokens() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVision(live);
      int tokens = 0;
      FinishReason reason = FinishReason.FINISH_REASON_UNSPECIFIED;
      try (GenerateStream stream = live.client.generate(describe("vision", Images.image(GRADIENT)))) {
        for (GenerateResponse event : stream) {
          tokens += event.getDelta().getTokenIdsCount();
          if (event.hasFinished()) {
            reason = event.getFinished().getReason();
          }
        }
      }
      assertTrue(tokens >= 1, tokens + " tokens");
      assertNotEquals(FinishReason.FINISH_REASON_UNSPECIFIED, reason);
    }
  }

  @Test
  void pngDeclaredAsJpegIsAnInvalidArgument() throws IOException {
    try (LiveServer live = LiveServer.connect()) {
      requireVision(live);
      GenerateRequest request = describe("vision", Images.image(Files.readAllBytes(GRADIENT), Images.JPEG));
      StatusRuntimeException error = assertThrows(StatusRuntimeException.class, () -> live.client.generateText(request));
      ErrorDetails d = ErrorDetails.from(error);
      assertEquals(Status.Code.INVALID_ARGUMENT, d.code(), d.toString());
      assertFalse(d.fieldViolations().isEmpty(), "a field violation: " + d);
    }
  }
}
