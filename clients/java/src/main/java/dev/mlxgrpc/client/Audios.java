package dev.mlxgrpc.client;

import com.google.protobuf.ByteString;
import dev.mlxgrpc.v1.Audio;
import dev.mlxgrpc.v1.ContentPart;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

/**
 * Audio for Transcribe ({@link MlxGrpcClient#transcribe}) and in chat messages ({@link #part}): an
 * {@link Audio} is an encoded file's bytes and its media type. The server checks it from its header
 * and decodes it to 16 kHz mono; a media type that does not match the bytes, too many bytes, a
 * duration over the server's limit, a file cut short or no bytes is INVALID_ARGUMENT with a
 * BadRequest field violation ({@link ErrorDetails#violationFields()}: {@code audio.media_type} or
 * {@code audio.data}; in a chat message {@code chat.messages[0].parts[0].audio.media_type}, ...).
 *
 * <pre>{@code
 * Transcript transcript = client.transcribe(TranscribeRequest.newBuilder()
 *     .setModel("whisper")
 *     .setAudio(Audios.audio(Path.of("speech.wav")))   // or Audios.audio(bytes, Audios.FLAC)
 *     .build());
 * }</pre>
 *
 * <p>A part of a chat message's content, beside text, images and videos ({@link Images#user}), is
 * heard by the model where it stands. A model that takes audio (its {@code
 * capabilities.media.audio} is true: Qwen3-Omni) reads it as about 13 tokens a second plus 2
 * markers; any other refuses it with FAILED_PRECONDITION (ErrorInfo reason {@code
 * UNSUPPORTED_OPERATION}); more than 4 audio files in one request is INVALID_ARGUMENT.
 *
 * <pre>{@code
 * ChatMessage message = Images.user(
 *     Audios.part(Path.of("speech.wav")),             // or Audios.part(bytes, Audios.FLAC)
 *     Images.text("What is said?"));
 * }</pre>
 */
public final class Audios {
  /** The media types of the audio the server takes: WAV (PCM or IEEE float). */
  public static final String WAV = "audio/wav";
  /** MP3 (MPEG audio). */
  public static final String MPEG = "audio/mpeg";
  /** FLAC. */
  public static final String FLAC = "audio/flac";
  /** Ogg Vorbis. */
  public static final String OGG = "audio/ogg";

  private Audios() {}

  /** Bytes that do not start like a WAV, MP3, FLAC or Ogg file. */
  public static final class UnknownAudioTypeException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    UnknownAudioTypeException(String what, byte[] data) {
      super(what + ": not a WAV, MP3, FLAC or Ogg audio file (first bytes "
          + (data.length == 0 ? "none" : HexFormat.ofDelimiter(" ").formatHex(data, 0, Math.min(data.length, 12)))
          + ")");
    }
  }

  /**
   * The media type of an encoded audio file from its signature: WAV {@code "RIFF"} then {@code
   * "WAVE"} at offset 8, FLAC {@code "fLaC"}, Ogg {@code "OggS"}, MP3 {@code "ID3"} (an ID3v2 tag)
   * or an MPEG frame sync ({@code FF}, then a byte whose top 3 bits are set).
   *
   * @throws UnknownAudioTypeException for anything else
   */
  public static String mediaType(byte[] data) {
    return mediaType(data, "audio");
  }

  private static String mediaType(byte[] data, String what) {
    if (Images.startsWith(data, 0, 'R', 'I', 'F', 'F') && Images.startsWith(data, 8, 'W', 'A', 'V', 'E')) {
      return WAV;
    } else if (Images.startsWith(data, 0, 'f', 'L', 'a', 'C')) {
      return FLAC;
    } else if (Images.startsWith(data, 0, 'O', 'g', 'g', 'S')) {
      return OGG;
    } else if (Images.startsWith(data, 0, 'I', 'D', '3')
        || (data.length >= 2 && (data[0] & 0xFF) == 0xFF && (data[1] & 0xE0) == 0xE0)) {
      return MPEG;
    }
    throw new UnknownAudioTypeException(what, data);
  }

  /** An encoded audio file's bytes with its media type ({@link #WAV}, ...), sent as given. */
  public static Audio audio(ByteString data, String mediaType) {
    return Audio.newBuilder().setData(data).setMediaType(mediaType).build();
  }

  /** An encoded audio file's bytes with its media type ({@link #WAV}, ...), sent as given. */
  public static Audio audio(byte[] data, String mediaType) {
    return audio(ByteString.copyFrom(data), mediaType);
  }

  /**
   * The audio file at {@code path}, its media type detected from its signature ({@link
   * #mediaType(byte[])}).
   *
   * @throws IOException when it cannot be read
   * @throws UnknownAudioTypeException when it is not a WAV, MP3, FLAC or Ogg file
   */
  public static Audio audio(Path path) throws IOException {
    byte[] data = Files.readAllBytes(path);
    return audio(data, mediaType(data, path.toString()));
  }

  /** A chat message part of {@code audio} ({@link #audio}), heard where it stands in the message. */
  public static ContentPart part(Audio audio) {
    return ContentPart.newBuilder().setAudio(audio).build();
  }

  /** A part of an encoded audio file's bytes with its media type ({@link #WAV}, ...), sent as given. */
  public static ContentPart part(ByteString data, String mediaType) {
    return part(audio(data, mediaType));
  }

  /** A part of an encoded audio file's bytes with its media type ({@link #WAV}, ...), sent as given. */
  public static ContentPart part(byte[] data, String mediaType) {
    return part(audio(data, mediaType));
  }

  /**
   * A part of the audio file at {@code path}, its media type detected from its signature ({@link
   * #mediaType(byte[])}).
   *
   * @throws IOException when it cannot be read
   * @throws UnknownAudioTypeException when it is not a WAV, MP3, FLAC or Ogg file
   */
  public static ContentPart part(Path path) throws IOException {
    return part(audio(path));
  }
}
