// Images in chat messages: a message's content can be parts (text and images, in order)
// instead of `content` (not both). A model that takes images (ModelInfo
// capabilities.media set) reads them; any other refuses an image with
// FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION). An image whose media type
// does not match its bytes, a truncated one or one too large is INVALID_ARGUMENT with a
// BadRequest field violation.
import { readFile } from "node:fs/promises";
import type { MessageInitShape } from "@bufbuild/protobuf";

import type { ContentPartSchema } from "./gen/mlxgrpc/v1/generation_pb.js";
import type { ChatMessageInit } from "./tools.js";

export type ContentPartInit = MessageInitShape<typeof ContentPartSchema>;

/** The media types of the images the server takes. */
export const MediaType = {
  PNG: "image/png",
  JPEG: "image/jpeg",
  WEBP: "image/webp",
  GIF: "image/gif",
} as const;

/** Bytes that do not start like a PNG, JPEG, WebP or GIF file (`mediaTypeOf`, `imageFile`). */
export class UnknownImageTypeError extends Error {
  constructor(what: string, head: Uint8Array) {
    const bytes = Array.from(head.subarray(0, 12), (b) => b.toString(16).padStart(2, "0")).join(" ");
    super(`${what}: not a PNG, JPEG, WebP or GIF image (first bytes ${bytes || "none"})`);
    this.name = "UnknownImageTypeError";
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

/**
 * A "user" message of parts in order, each a part (`imagePart`, `imageFile`, `textPart`) or
 * a string (a text part):
 *
 *     chatPrompt([userMessage(await imageFile("photo.png"), "Describe the image.")])
 */
export function userMessage(...parts: (ContentPartInit | string)[]): ChatMessageInit {
  return { role: "user", parts: parts.map((p) => (typeof p === "string" ? textPart(p) : p)) };
}
