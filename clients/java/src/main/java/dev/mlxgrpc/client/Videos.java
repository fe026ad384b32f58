package dev.mlxgrpc.client;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.ContentPart;
import dev.mlxgrpc.v1.Video;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

/**
 * Videos in chat messages: a part of a {@link dev.mlxgrpc.v1.ChatMessage}'s content, beside text and images
 * ({@link Images#user}, {@link Images#text}). The server checks a video from its container's
 * header and samples its frames (by default 2 per second, at most 32, in pairs). A model that
 * takes videos (its {@code capabilities.media.video} is true: Qwen2.5-VL) reads them; any other
 * refuses a video with FAILED_PRECONDITION (ErrorInfo reason {@code UNSUPPORTED_OPERATION}). A
 * video whose media type does not match its bytes, too many bytes, a duration, frame rate or frame
 * size over the server's limits, more than 4 videos or a truncated file is INVALID_ARGUMENT with a
 * BadRequest field violation naming the part ({@link ErrorDetails#violationFields()}, e.g. {@code
 * chat.messages[0].parts[0].video.media_type}).
 *
 * <pre>{@code
 * ChatMessage message = Images.user(
 *     Videos.video(Path.of("clip.mp4")),           // or Videos.video(bytes, Videos.WEBM)
 *     Images.text("What happens in the video?"));
 * GenerateRequest request = GenerateRequest.newBuilder()
 *     .setModel("video")
 *     .setChat(ChatMessages.newBuilder().addMessages(message))
 *     .build();
 * }</pre>
 */
public final class Videos {
  /** The media types of the videos the server takes: MP4. */
  public static final String MP4 = "video/mp4";
  /** QuickTime (an ISO base media file whose brand is {@code "qt  "}). */
  public static final String QUICKTIME = "video/quicktime";
  /** WebM. */
  public static final String WEBM = "video/webm";
  /** Matroska. */
  public static final String MATROSKA = "video/x-matroska";
  /** AVI. */
  public static final String AVI = "video/x-msvideo";

  /** The box types an MP4 or QuickTime file starts with (at offset 4). */
  private static final int[][] ISO_BOXES = {
    {'f', 't', 'y', 'p'}, {'m', 'o', 'o', 'v'}, {'m', 'd', 'a', 't'}, {'w', 'i', 'd', 'e'}, {'f', 'r', 'e', 'e'},
  };

  private Videos() {}

  /** Bytes that do not start like an MP4, QuickTime, WebM, Matroska or AVI file. */
  public static final class UnknownVideoTypeException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    UnknownVideoTypeException(String what, byte[] data) {
      super(what + ": not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes "
          + (data.length == 0 ? "none" : HexFormat.ofDelimiter(" ").formatHex(data, 0, Math.min(data.length, 12)))
          + ")");
    }
  }

  /**
   * The media type of an encoded video from its signature: MP4 a box {@code "ftyp"}, {@code
   * "moov"}, {@code "mdat"}, {@code "wide"} or {@code "free"} at offset 4 (QuickTime: {@code
   * "ftyp"} then the brand {@code "qt  "} at offset 8), WebM and Matroska EBML {@code 1A 45 DF A3}
   * (WebM: {@code "webm"} in the first 64 bytes), AVI {@code "RIFF"} then {@code "AVI "} at offset 8.
   *
   * @throws UnknownVideoTypeException for anything else
   */
  public static String mediaType(byte[] data) {
    return mediaType(data, "video");
  }

  private static String mediaType(byte[] data, String what) {
    for (int[] box : ISO_BOXES) {
      if (Images.startsWith(data, 4, box)) {
        return Images.startsWith(data, 4, 'f', 't', 'y', 'p') && Images.startsWith(data, 8, 'q', 't', ' ', ' ')
            ? QUICKTIME
            : MP4;
      }
    }
    if (Images.startsWith(data, 0, 0x1A, 0x45, 0xDF, 0xA3)) {
      for (int at = 0; at + 4 <= Math.min(data.length, 64); at++) {
        if (Images.startsWith(data, at, 'w', 'e', 'b', 'm')) {
          return WEBM;
        }
      }
      return MATROSKA;
    } else if (Images.startsWith(data, 0, 'R', 'I', 'F', 'F') && Images.startsWith(data, 8, 'A', 'V', 'I', ' ')) {
      return AVI;
    }
    throw new UnknownVideoTypeException(what, data);
  }

  /** A part of an encoded video's bytes with its media type ({@link #MP4}, ...), sent as given. */
  public static ContentPart video(ByteString data, String mediaType) {
    return ContentPart.newBuilder()
        .setVideo(Video.newBuilder().setData(data).setMediaType(mediaType))
        .build();
  }

  /** A part of an encoded video's bytes with its media type ({@link #MP4}, ...), sent as given. */
  public static ContentPart video(byte[] data, String mediaType) {
    return video(ByteString.copyFrom(data), mediaType);
  }

  /**
   * A part of the video file at {@code path}, its media type detected from its signature
   * ({@link #mediaType(byte[])}).
   *
   * @throws IOException when it cannot be read
   * @throws UnknownVideoTypeException when it is not an MP4, QuickTime, WebM, Matroska or AVI file
   */
  public static ContentPart video(Path path) throws IOException {
    byte[] data = Files.readAllBytes(path);
    return video(data, mediaType(data, path.toString()));
  }
}
