// Images, videos and audio in chat messages: a message's content can be parts (text,
// images, videos and audio files, in order) instead of `content` (not both). A model that
// takes images (ModelInfo capabilities.media set) reads them; any other refuses an image
// with FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION). A model that takes
// videos (capabilities.media.video true) samples frames from them (by default 2 a second,
// at most 32); a model that takes audio (capabilities.media.audio true: Qwen3-Omni) hears
// an audio file where it stands (about 13 prompt tokens a second); any other refuses a
// video or an audio file the same way. An image, video or audio file whose media type does
// not match its bytes, a truncated one or one too large (a video also: too long, too high
// a frame rate or frame size; a video or audio file: more than 4 of them) is
// INVALID_ARGUMENT with a BadRequest field violation naming the part.
import { readFile } from "node:fs/promises";
import type { MessageInitShape } from "@bufbuild/protobuf";

import type { ContentPartSchema } from "./gen/mlxgrpc/v1/generation_pb.js";
import { audio, audioFile } from "./speech.js";
import type { ChatMessageInit } from "./tools.js";

export type ContentPartInit = MessageInitShape<typeof ContentPartSchema>;

/** The media types of the images, videos (message parts) and audio (Transcribe and message parts) the server takes. */
export const MediaType = {
  PNG: "image/png",
  JPEG: "image/jpeg",
  WEBP: "image/webp",
  GIF: "image/gif",
  MP4: "video/mp4",
  QUICKTIME: "video/quicktime",
  WEBM: "video/webm",
  MATROSKA: "video/x-matroska",
  AVI: "video/x-msvideo",
  WAV: "audio/wav",
  MP3: "audio/mpeg",
  FLAC: "audio/flac",
  OGG: "audio/ogg",
} as const;

/** Bytes that do not start like a PNG, JPEG, WebP or GIF file (`mediaTypeOf`, `imageFile`). */
export class UnknownImageTypeError extends Error {
  constructor(what: string, head: Uint8Array) {
    const bytes = Array.from(head.subarray(0, 12), (b) => b.toString(16).padStart(2, "0")).join(" ");
    super(`${what}: not a PNG, JPEG, WebP or GIF image (first bytes ${bytes || "none"})`);
    this.name = "UnknownImageTypeError";
  }
}

/** Bytes that do not start like an MP4, QuickTime, WebM, Matroska or AVI file (`videoMediaTypeOf`, `videoFile`). */
export class UnknownVideoTypeError extends Error {
  constructor(what: string, head: Uint8Array) {
    const bytes = Array.from(head.subarray(0, 12), (b) => b.toString(16).padStart(2, "0")).join(" ");
    super(`${what}: not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes ${bytes || "none"})`);
    this.name = "UnknownVideoTypeError";
  }
}

const startsWith = (data: Uint8Array, sig: number[] | string, at = 0): boolean => {
  const bytes = typeof sig === "string" ? Array.from(sig, (c) => c.charCodeAt(0)) : sig;
  return data.length >= at + bytes.length && bytes.every((b, i) => data[at + i] === b);
};

/**
 * The media type of an encoded image from its signature: PNG 89 50 4E 47, JPEG FF D8 FF,
 * GIF "GIF8", WebP "RIFF" then "WEBP" at offset 8. Throws UnknownImageTypeError otherwise.
 */
export function mediaTypeOf(data: Uint8Array, what = "image"): string {
  if (startsWith(data, [0x89, 0x50, 0x4e, 0x47])) return MediaType.PNG;
  if (startsWith(data, [0xff, 0xd8, 0xff])) return MediaType.JPEG;
  if (startsWith(data, "GIF8")) return MediaType.GIF;
  if (startsWith(data, "RIFF") && startsWith(data, "WEBP", 8)) return MediaType.WEBP;
  throw new UnknownImageTypeError(what, data);
}

const ISO_BOXES = ["ftyp", "moov", "mdat", "wide", "free"];

/**
 * The media type of an encoded video from its signature: an ISO base media box ("ftyp",
 * "moov", "mdat", "wide" or "free") at offset 4 is MP4, or QuickTime when it is "ftyp" of
 * brand "qt  "; EBML 1A 45 DF A3 is WebM when "webm" occurs in the first 64 bytes, else
 * Matroska; "RIFF" then "AVI " at offset 8 is AVI. Throws UnknownVideoTypeError otherwise.
 */
export function videoMediaTypeOf(data: Uint8Array, what = "video"): string {
  if (ISO_BOXES.some((box) => startsWith(data, box, 4))) {
    return startsWith(data, "ftyp", 4) && startsWith(data, "qt  ", 8) ? MediaType.QUICKTIME : MediaType.MP4;
  }
  if (startsWith(data, [0x1a, 0x45, 0xdf, 0xa3])) {
    const head = data.subarray(0, 64);
    return head.some((_, i) => startsWith(head, "webm", i)) ? MediaType.WEBM : MediaType.MATROSKA;
  }
  if (startsWith(data, "RIFF") && startsWith(data, "AVI ", 8)) return MediaType.AVI;
  throw new UnknownVideoTypeError(what, data);
}

/** A message part of text. */
export function textPart(text: string): ContentPartInit {
  return { part: { case: "text", value: text } };
}

/** A message part of an encoded image's bytes with its media type (`MediaType.PNG`, ...), sent as given. */
export function imagePart(data: Uint8Array, mediaType: string): ContentPartInit {
  return { part: { case: "image", value: { data, mediaType } } };
}

/** A message part of the image file at `path`, its media type detected from its signature (`mediaTypeOf`). */
export async function imageFile(path: string): Promise<ContentPartInit> {
  const data = new Uint8Array(await readFile(path));
  return imagePart(data, mediaTypeOf(data, path));
}

/** A message part of an encoded video's bytes with its media type (`MediaType.MP4`, ...), sent as given. */
export function videoPart(data: Uint8Array, mediaType: string): ContentPartInit {
  return { part: { case: "video", value: { data, mediaType } } };
}

/** A message part of the video file at `path`, its media type detected from its signature (`videoMediaTypeOf`). */
export async function videoFile(path: string): Promise<ContentPartInit> {
  const data = new Uint8Array(await readFile(path));
  return videoPart(data, videoMediaTypeOf(data, path));
}

/** A message part of an encoded audio file's bytes with its media type (`MediaType.WAV`, ...), sent as given. */
export function audioPart(data: Uint8Array, mediaType: string): ContentPartInit {
  return { part: { case: "audio", value: audio(data, mediaType) } };
}

/**
 * A message part of the audio file at `path`, its media type detected from its signature
 * (`audioMediaTypeOf`; read as `audioFile` reads Transcribe's audio).
 */
export async function audioFilePart(path: string): Promise<ContentPartInit> {
  return { part: { case: "audio", value: await audioFile(path) } };
}

/**
 * A "user" message of parts in order, each a part (`imagePart`, `imageFile`, `videoPart`,
 * `videoFile`, `audioPart`, `audioFilePart`, `textPart`) or a string (a text part):
 *
 *     chatPrompt([userMessage(await imageFile("photo.png"), "Describe the image.")])
 *     chatPrompt([userMessage(await videoFile("clip.mp4"), "What happens in the video?")])
 *     chatPrompt([userMessage(await audioFilePart("speech.wav"), "What is said?")])
 */
export function userMessage(...parts: (ContentPartInit | string)[]): ChatMessageInit {
  return { role: "user", parts: parts.map((p) => (typeof p === "string" ? textPart(p) : p)) };
}
