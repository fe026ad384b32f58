package dev.mlxgrpc.client;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.ChatMessage;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.Image;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * Images in chat messages: a {@link ChatMessage}'s content can be parts (text, images, videos,
 * {@link Videos}, and audio, {@link Audios#part}, in order) instead of {@code content} (not both). A model that takes images (its
 * {@code capabilities.media} is set) reads them; any other refuses an image with
 * FAILED_PRECONDITION (ErrorInfo reason {@code UNSUPPORTED_OPERATION}). An image whose media type
 * does not match its bytes, a truncated one or one too large is INVALID_ARGUMENT with a BadRequest
 * field violation ({@link ErrorDetails#violationFields()}).
 *
 * <pre>{@code
 * ChatMessage message = Images.user(
 *     Images.image(Path.of("photo.png")),          // or Images.image(bytes, Images.JPEG)
 *     Images.text("Describe the image."));
 * GenerateRequest request = GenerateRequest.newBuilder()
 *     .setModel("vision")
 *     .setChat(ChatMessages.newBuilder().addMessages(message))
 *     .build();
 * }</pre>
 */
public final class Images {
  /** The media types of the images the server takes. */
  public static final String PNG = "image/png";
  /** JPEG. */
  public static final String JPEG = "image/jpeg";
  /** WebP. */
  public static final String WEBP = "image/webp";
  /** GIF (the server reads its first frame). */
  public static final String GIF = "image/gif";

  private Images() {}

  /** Bytes that do not start like a PNG, JPEG, WebP or GIF file. */
  public static final class UnknownImageTypeException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    UnknownImageTypeException(String what, byte[] data) {
      super(what + ": not a PNG, JPEG, WebP or GIF image (first bytes "
          + (data.length == 0 ? "none" : HexFormat.ofDelimiter(" ").formatHex(data, 0, Math.min(data.length, 12)))
          + ")");
    }
  }

  /**
   * The media type of an encoded image from its signature: PNG {@code 89 50 4E 47}, JPEG {@code
   * FF D8 FF}, GIF {@code "GIF8"}, WebP {@code "RIFF"} then {@code "WEBP"} at offset 8.
   *
   * @throws UnknownImageTypeException for anything else
   */
  public static String mediaType(byte[] data) {
    return mediaType(data, "image");
  }

  private static String mediaType(byte[] data, String what) {
    if (startsWith(data, 0, 0x89, 'P', 'N', 'G')) {
      return PNG;
    } else if (startsWith(data, 0, 0xFF, 0xD8, 0xFF)) {
      return JPEG;
    } else if (startsWith(data, 0, 'G', 'I', 'F', '8')) {
      return GIF;
    } else if (startsWith(data, 0, 'R', 'I', 'F', 'F') && startsWith(data, 8, 'W', 'E', 'B', 'P')) {
      return WEBP;
    }
    throw new UnknownImageTypeException(what, data);
  }

  /** Whether {@code data} holds {@code signature} (byte values) at offset {@code at}. */
  static boolean startsWith(byte[] data, int at, int... signature) {
    if (data.length < at + signature.length) {
      return false;
    }
    for (int i = 0; i < signature.length; i++) {
      if ((data[at + i] & 0xFF) != signature[i]) {
        return false;
      }
    }
    return true;
  }

  /** A part of text. */
  public static ContentPart text(String text) {
    return ContentPart.newBuilder().setText(text).build();
  }

  /** A part of an encoded image's bytes with its media type ({@link #PNG}, ...), sent as given. */
  public static ContentPart image(ByteString data, String mediaType) {
    return ContentPart.newBuilder()
        .setImage(Image.newBuilder().setData(data).setMediaType(mediaType))
        .build();
  }

  /** A part of an encoded image's bytes with its media type ({@link #PNG}, ...), sent as given. */
  public static ContentPart image(byte[] data, String mediaType) {
    return image(ByteString.copyFrom(data), mediaType);
  }

  /**
   * A part of the image file at {@code path}, its media type detected from its signature
   * ({@link #mediaType(byte[])}).
   *
   * @throws IOException when it cannot be read
   * @throws UnknownImageTypeException when it is not a PNG, JPEG, WebP or GIF file
   */
  public static ContentPart image(Path path) throws IOException {
    byte[] data = Files.readAllBytes(path);
    return image(data, mediaType(data, path.toString()));
  }

  /**
   * A "user" message of {@code parts} in order ({@link #text}, {@link #image}, {@link Videos#video},
   * {@link Audios#part}).
   */
  public static ChatMessage user(ContentPart... parts) {
    return user(Arrays.asList(parts));
  }

  /** A "user" message of {@code parts} in order. */
  public static ChatMessage user(List<ContentPart> parts) {
    return ChatMessage.newBuilder().setRole("user").addAllParts(parts).build();
  }
}
