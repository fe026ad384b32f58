// Images: signature detection and the parts a user message is built of (offline); against
// a live server with a model named "vision" (the test fixture's tiny vision-language
// model), an image refused by the text-only "llama" and by a media type that does not
// match its bytes, and streamed text for one on "vision". A server without a model named
// "vision" (the default one never has it) skips the live ones, even under MLXGRPC_REQUIRE_LIVE=1.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";

import {
  ChatMessageSchema,
  Code,
  ConnectError,
  FinishReason,
  MediaType,
  UnknownImageTypeError,
  chatPrompt,
  connect,
  errorDetails,
  imageFile,
  imagePart,
  mediaTypeOf,
  textPart,
  userMessage,
  type ChatMessageInit,
  type MlxClient,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

/** clients/testdata/gradient.png (a 64x64 RGB PNG), from dist/test/. */
const GRADIENT = fileURLToPath(new URL("../../../testdata/gradient.png", import.meta.url));

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const SIGNATURES: Record<string, Uint8Array> = {
  [MediaType.PNG]: bytes("\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
  [MediaType.JPEG]: bytes("\xff\xd8\xff\xe0\0\x10JFIF\0"),
  [MediaType.GIF]: bytes("GIF89a\x01\0\x01\0"),
  [MediaType.WEBP]: bytes("RIFF\x24\0\0\0WEBPVP8 "),
};

test("mediaTypeOf detects PNG, JPEG, GIF and WebP by signature, and refuses anything else", () => {
  for (const [type, data] of Object.entries(SIGNATURES)) assert.equal(mediaTypeOf(data), type);
  for (const other of ["", "hello, world", "RIFF\x24\0\0\0WAVEfmt ", "RIFF", "\xff\xd8"]) {
    assert.throws(() => mediaTypeOf(bytes(other)), UnknownImageTypeError, JSON.stringify(other));
  }
  assert.throws(() => mediaTypeOf(bytes("hello"), "notes.txt"), /notes\.txt: not a PNG, JPEG, WebP or GIF image \(first bytes 68 65 6c 6c 6f\)/);
});

test("imageFile reads a file and detects its media type; an unknown file is an error", async () => {
  const dir = await mkdtemp(join(tmpdir(), "mlxgrpc-images-"));
  for (const [type, data] of Object.entries(SIGNATURES)) {
    const path = join(dir, `image-${type.slice(6)}`);
    await writeFile(path, data);
    assert.deepEqual(await imageFile(path), { part: { case: "image", value: { data, mediaType: type } } });
  }
  await writeFile(join(dir, "notes.txt"), "not an image");
  await assert.rejects(imageFile(join(dir, "notes.txt")), UnknownImageTypeError);
  await assert.rejects(imageFile(join(dir, "missing.png")), { code: "ENOENT" });
  const gradient = await imageFile(GRADIENT);
  assert.equal(gradient.part?.case === "image" && gradient.part.value.mediaType, MediaType.PNG);
});

test("userMessage keeps the parts in order, each with its oneof case", () => {
  const jpeg = SIGNATURES[MediaType.JPEG];
  const msg = userMessage("Compare", imagePart(jpeg, MediaType.JPEG), textPart("with"), imagePart(bytes("x"), "image/webp"));
  assert.deepEqual(msg, {
    role: "user",
    parts: [
      { part: { case: "text", value: "Compare" } },
      { part: { case: "image", value: { data: jpeg, mediaType: "image/jpeg" } } },
      { part: { case: "text", value: "with" } },
      { part: { case: "image", value: { data: bytes("x"), mediaType: "image/webp" } } },
    ],
  });
  // As the server decodes it: parts, no content.
  const wire = fromBinary(ChatMessageSchema, toBinary(ChatMessageSchema, create(ChatMessageSchema, msg)));
  assert.equal(wire.content, "");
  assert.deepEqual(wire.parts.map((p) => p.part.case), ["text", "image", "text", "image"]);
  assert.deepEqual(wire.parts[1].part.value, create(ChatMessageSchema, msg).parts[1].part.value);
});

// Live: the fixture's "vision" and text-only "llama" models.

const NO_VISION_MODEL = 'the server has no model named "vision" (the fixture server\'s vision-language model; the default server never has one)';

/** A client when the server has a model named "vision"; skips the test (even under MLXGRPC_REQUIRE_LIVE) otherwise. */
async function visionClient(t: TestContext): Promise<MlxClient | undefined> {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  const { all } = await discover(client);
  if (all.some((m) => m.name === "vision")) return client;
  client.close();
  t.skip(NO_VISION_MODEL);
  return undefined;
}

const describeRequest = (model: string, message: ChatMessageInit) => ({
  model,
  prompt: chatPrompt([message]),
  sampling: { temperature: 0 },
  stopping: { maxTokens: 4 },
});

async function expectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  assert.fail("expected the call to fail");
}

liveTest("an image to a text-only model (llama): FAILED_PRECONDITION, UNSUPPORTED_OPERATION", async (t) => {
  const client = await visionClient(t);
  if (!client) return;
  try {
    const message = userMessage(await imageFile(GRADIENT), "Describe the image.");
    const err = await expectError(client.generateText(describeRequest("llama", message)));
    const d = errorDetails(err);
    assert.equal(d.code, Code.FailedPrecondition, String(err));
    assert.equal(d.errorInfo?.reason, "UNSUPPORTED_OPERATION");
  } finally {
    client.close();
  }
});

liveTest("an image to the vision model: streamed tokens and a finish reason", async (t) => {
  const client = await visionClient(t);
  if (!client) return;
  try {
    const message = userMessage(await imageFile(GRADIENT), "Describe the image.");
    let tokens = 0;
    let reason = FinishReason.UNSPECIFIED;
    for await (const res of client.generate(describeRequest("vision", message))) {
      if (res.event.case === "delta") tokens += res.event.value.tokenIds.length;
      else if (res.event.case === "finished") reason = res.event.value.reason;
    }
    assert.ok(tokens >= 1, `${tokens} tokens`);
    assert.notEqual(reason, FinishReason.UNSPECIFIED);
  } finally {
    client.close();
  }
});

liveTest("PNG bytes declared image/jpeg: INVALID_ARGUMENT with a field violation", async (t) => {
  const client = await visionClient(t);
  if (!client) return;
  try {
    const png = new Uint8Array(await readFile(GRADIENT));
    const message = userMessage(imagePart(png, MediaType.JPEG), "Describe the image.");
    const d = errorDetails(await expectError(client.generateText(describeRequest("vision", message))));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.ok(d.fieldViolations.length >= 1, "a BadRequest field violation");
  } finally {
    client.close();
  }
});
