// Images, videos and audio: signature detection and the parts a user message is built of
// (offline); against a live server with a model named "vision" (the test fixture's tiny
// vision-language model), an image refused by the text-only "llama" and by a media type
// that does not match its bytes, and streamed text for one on "vision"; with a model named
// "video" (the fixture's tiny Qwen2.5-VL), its capabilities, a clip's frames in the prompt,
// a media type that does not match the clip and the clip refused by "vision"; with a model
// named "omni" (the fixture's tiny Qwen3-Omni), its capabilities, an audio file's tokens in
// the prompt, a media type that does not match the file, more than 4 files and a file
// refused by "vision". A server without a model named "vision", "video" or "omni" (the
// default one never has them) skips those live tests, even under MLXGRPC_REQUIRE_LIVE=1.
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
  UnknownAudioTypeError,
  UnknownImageTypeError,
  UnknownVideoTypeError,
  audioFilePart,
  audioPart,
  chatPrompt,
  connect,
  errorDetails,
  imageFile,
  imagePart,
  mediaTypeOf,
  textPart,
  userMessage,
  videoFile,
  videoMediaTypeOf,
  videoPart,
  type ChatMessageInit,
  type MlxClient,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

/** clients/testdata/gradient.png (a 64x64 RGB PNG), from dist/test/. */
const GRADIENT = fileURLToPath(new URL("../../../testdata/gradient.png", import.meta.url));

/** clients/testdata/clip.mp4 (a 3-second MPEG-4 clip), from dist/test/. */
const CLIP = fileURLToPath(new URL("../../../testdata/clip.mp4", import.meta.url));

/** clients/testdata/speech.wav (a 2-second 16 kHz WAV), from dist/test/. */
const SPEECH = fileURLToPath(new URL("../../../testdata/speech.wav", import.meta.url));

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

const VIDEO_SIGNATURES: Record<string, Uint8Array> = {
  [MediaType.MP4]: bytes("\0\0\0\x1cftypisom\0\0\x02\0"),
  [MediaType.QUICKTIME]: bytes("\0\0\0\x14ftypqt  \0\0\x02\0"),
  [MediaType.WEBM]: bytes("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm\x42\x87"),
  [MediaType.MATROSKA]: bytes("\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\x82\x88matroska"),
  [MediaType.AVI]: bytes("RIFF\x24\0\0\0AVI LIST"),
};

test("videoMediaTypeOf detects MP4, QuickTime, WebM, Matroska and AVI by signature, and refuses anything else", () => {
  for (const [type, data] of Object.entries(VIDEO_SIGNATURES)) assert.equal(videoMediaTypeOf(data), type);
  // Any of the ISO base media boxes at offset 4 is MP4; only an "ftyp" of brand "qt  " is QuickTime.
  for (const box of ["moov", "mdat", "wide", "free"]) {
    assert.equal(videoMediaTypeOf(bytes(`\0\0\0\x08${box}qt  `)), MediaType.MP4, box);
  }
  assert.equal(videoMediaTypeOf(bytes("\0\0\0\x14ftypmp42")), MediaType.MP4);
  // "webm" counts within the first 64 bytes only.
  const late = new Uint8Array(72);
  late.set([0x1a, 0x45, 0xdf, 0xa3]);
  late.set(bytes("webm"), 64);
  assert.equal(videoMediaTypeOf(late), MediaType.MATROSKA);
  late.set(bytes("webm"), 60);
  assert.equal(videoMediaTypeOf(late), MediaType.WEBM);
  const others = ["", "hello, world", "RIFF\x24\0\0\0WEBPVP8 ", "RIFF\x24\0\0\0AVI", "\0\0\0\x1cfty", "\x1a\x45\xdf"];
  for (const other of [...others, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR"]) {
    assert.throws(() => videoMediaTypeOf(bytes(other)), UnknownVideoTypeError, JSON.stringify(other));
  }
  // Videos are not images, nor images videos.
  for (const data of Object.values(VIDEO_SIGNATURES)) assert.throws(() => mediaTypeOf(data), UnknownImageTypeError);
  assert.throws(
    () => videoMediaTypeOf(bytes("hello"), "notes.txt"),
    /notes\.txt: not an MP4, QuickTime, WebM, Matroska or AVI video \(first bytes 68 65 6c 6c 6f\)/,
  );
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

test("videoFile reads a file and detects its media type; an unknown file is an error", async () => {
  const dir = await mkdtemp(join(tmpdir(), "mlxgrpc-videos-"));
  for (const [type, data] of Object.entries(VIDEO_SIGNATURES)) {
    const path = join(dir, `video-${type.slice(6)}`);
    await writeFile(path, data);
    assert.deepEqual(await videoFile(path), { part: { case: "video", value: { data, mediaType: type } } });
  }
  await writeFile(join(dir, "notes.txt"), "not a video");
  await assert.rejects(videoFile(join(dir, "notes.txt")), UnknownVideoTypeError);
  await assert.rejects(videoFile(join(dir, "missing.mp4")), { code: "ENOENT" });
  const clip = await videoFile(CLIP);
  assert.equal(clip.part?.case === "video" && clip.part.value.mediaType, MediaType.MP4);
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

test("userMessage takes video parts beside text and images", () => {
  const mp4 = VIDEO_SIGNATURES[MediaType.MP4];
  const png = SIGNATURES[MediaType.PNG];
  const msg = userMessage(videoPart(mp4, MediaType.MP4), imagePart(png, MediaType.PNG), "What happens?");
  assert.deepEqual(msg, {
    role: "user",
    parts: [
      { part: { case: "video", value: { data: mp4, mediaType: "video/mp4" } } },
      { part: { case: "image", value: { data: png, mediaType: "image/png" } } },
      { part: { case: "text", value: "What happens?" } },
    ],
  });
  const wire = fromBinary(ChatMessageSchema, toBinary(ChatMessageSchema, create(ChatMessageSchema, msg)));
  assert.equal(wire.content, "");
  assert.deepEqual(wire.parts.map((p) => p.part.case), ["video", "image", "text"]);
  const video = wire.parts[0].part;
  assert.ok(video.case === "video");
  assert.deepEqual(video.value.data, mp4);
  assert.equal(video.value.mediaType, MediaType.MP4);
});

const AUDIO_SIGNATURES: Record<string, Uint8Array> = {
  [MediaType.WAV]: bytes("RIFF\x24\0\0\0WAVEfmt "),
  [MediaType.MP3]: bytes("ID3\x04\0\0\0\0\x01\x0f"),
  [MediaType.FLAC]: bytes("fLaC\0\0\0\x22\x10\0"),
  [MediaType.OGG]: bytes("OggS\0\x02\0\0\0\0"),
};

test("audioPart sends the bytes and media type as given", () => {
  const wav = AUDIO_SIGNATURES[MediaType.WAV];
  assert.deepEqual(audioPart(wav, MediaType.WAV), { part: { case: "audio", value: { data: wav, mediaType: "audio/wav" } } });
  // As given: no sniffing, a mislabelled file is the server's to refuse.
  assert.deepEqual(audioPart(wav, MediaType.MP3), { part: { case: "audio", value: { data: wav, mediaType: "audio/mpeg" } } });
});

test("audioFilePart reads a file and detects its media type; an unknown file is an error", async () => {
  const dir = await mkdtemp(join(tmpdir(), "mlxgrpc-audio-"));
  for (const [type, data] of Object.entries(AUDIO_SIGNATURES)) {
    const path = join(dir, `audio-${type.slice(6)}`);
    await writeFile(path, data);
    assert.deepEqual(await audioFilePart(path), { part: { case: "audio", value: { data, mediaType: type } } });
  }
  await writeFile(join(dir, "notes.txt"), "not audio");
  await assert.rejects(audioFilePart(join(dir, "notes.txt")), UnknownAudioTypeError);
  await assert.rejects(audioFilePart(join(dir, "missing.wav")), { code: "ENOENT" });
  await assert.rejects(audioFilePart(GRADIENT), UnknownAudioTypeError);
  const speech = await audioFilePart(SPEECH);
  assert.ok(speech.part?.case === "audio");
  assert.equal(speech.part.value.mediaType, MediaType.WAV);
  assert.deepEqual(speech.part.value.data, new Uint8Array(await readFile(SPEECH)));
});

test("userMessage takes audio parts beside images and text, in order", () => {
  const wav = AUDIO_SIGNATURES[MediaType.WAV];
  const png = SIGNATURES[MediaType.PNG];
  const msg = userMessage(audioPart(wav, MediaType.WAV), imagePart(png, MediaType.PNG), "What is said about the image?");
  assert.deepEqual(msg, {
    role: "user",
    parts: [
      { part: { case: "audio", value: { data: wav, mediaType: "audio/wav" } } },
      { part: { case: "image", value: { data: png, mediaType: "image/png" } } },
      { part: { case: "text", value: "What is said about the image?" } },
    ],
  });
  const wire = fromBinary(ChatMessageSchema, toBinary(ChatMessageSchema, create(ChatMessageSchema, msg)));
  assert.equal(wire.content, "");
  assert.deepEqual(wire.parts.map((p) => p.part.case), ["audio", "image", "text"]);
  const sound = wire.parts[0].part;
  assert.ok(sound.case === "audio");
  assert.deepEqual(sound.value.data, wav);
  assert.equal(sound.value.mediaType, MediaType.WAV);
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

// Live: the fixture's "video" model (a tiny Qwen2.5-VL) and "vision" (images only).

const NO_VIDEO_MODEL = 'the server has no model named "video" (the fixture server\'s video-taking Qwen2.5-VL; the default server never has one)';

/** A client when the server has a model named "video"; skips the test (even under MLXGRPC_REQUIRE_LIVE) otherwise. */
async function videoClient(t: TestContext): Promise<{ client: MlxClient; served: string[] } | undefined> {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  const served = (await discover(client)).all.map((m) => m.name);
  if (served.includes("video")) return { client, served };
  client.close();
  t.skip(NO_VIDEO_MODEL);
  return undefined;
}

const QUESTION = "What happens in the video?";

liveTest("model info: video takes videos, vision does not", async (t) => {
  const live = await videoClient(t);
  if (!live) return;
  const { client, served } = live;
  try {
    const info = await client.getModelInfo("video");
    assert.equal(info.capabilities?.media?.video, true, "video: capabilities.media.video");
    if (served.includes("vision")) {
      const vision = await client.getModelInfo("vision");
      assert.ok(vision.capabilities?.media, "vision: capabilities.media set");
      assert.equal(vision.capabilities?.media?.video, false, "vision: capabilities.media.video");
    }
  } finally {
    client.close();
  }
});

liveTest("a video to the video model: streamed tokens, FinishReason.LENGTH, the frames in the prompt", async (t) => {
  const live = await videoClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const message = userMessage(await videoFile(CLIP), QUESTION);
    let tokens = 0;
    let promptTokens = 0;
    let reason = FinishReason.UNSPECIFIED;
    for await (const res of client.generate(describeRequest("video", message))) {
      if (res.event.case === "started") promptTokens = res.event.value.promptTokens;
      else if (res.event.case === "delta") tokens += res.event.value.tokenIds.length;
      else if (res.event.case === "finished") reason = res.event.value.reason;
    }
    assert.ok(tokens >= 1, `${tokens} tokens`);
    assert.equal(reason, FinishReason.LENGTH);
    const textOnly = await client.generateText(describeRequest("video", userMessage(QUESTION)));
    const without = textOnly.started?.promptTokens ?? 0;
    assert.ok(without > 0, "prompt_tokens without the video");
    // 3 seconds at 2 frames a second: 3 pairs of frames, each at least one <|video_pad|>
    // (the fixture's processor makes each pair one merged patch), between <|vision_start|>
    // and <|vision_end|>.
    assert.ok(promptTokens >= without + 5, `${promptTokens} prompt tokens with the video, ${without} without`);
  } finally {
    client.close();
  }
});

liveTest("MP4 bytes declared video/webm: INVALID_ARGUMENT naming the part's media_type", async (t) => {
  const live = await videoClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const clip = new Uint8Array(await readFile(CLIP));
    const message = userMessage(videoPart(clip, MediaType.WEBM), QUESTION);
    const d = errorDetails(await expectError(client.generateText(describeRequest("video", message))));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    const fields = d.fieldViolations.map((v) => v.field);
    assert.ok(fields.some((f) => f.endsWith(".video.media_type")), `field violations: ${JSON.stringify(fields)}`);
  } finally {
    client.close();
  }
});

liveTest("a video to the image-only vision model: FAILED_PRECONDITION, UNSUPPORTED_OPERATION", async (t) => {
  const live = await videoClient(t);
  if (!live) return;
  const { client, served } = live;
  try {
    if (!served.includes("vision")) {
      t.skip(NO_VISION_MODEL);
      return;
    }
    const message = userMessage(await videoFile(CLIP), QUESTION);
    const err = await expectError(client.generateText(describeRequest("vision", message)));
    const d = errorDetails(err);
    assert.equal(d.code, Code.FailedPrecondition, String(err));
    assert.equal(d.errorInfo?.reason, "UNSUPPORTED_OPERATION");
  } finally {
    client.close();
  }
});

// Live: the fixture's "omni" model (a tiny Qwen3-Omni: audio and images) and "vision" (images only).

const NO_OMNI_MODEL = 'the server has no model named "omni" (the fixture server\'s audio-taking Qwen3-Omni; the default server never has one)';

/** A client when the server has a model named "omni"; skips the test (even under MLXGRPC_REQUIRE_LIVE) otherwise. */
async function omniClient(t: TestContext): Promise<{ client: MlxClient; served: string[] } | undefined> {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  const served = (await discover(client)).all.map((m) => m.name);
  if (served.includes("omni")) return { client, served };
  client.close();
  t.skip(NO_OMNI_MODEL);
  return undefined;
}

const HEARD = "What is said in the recording?";

liveTest("model info: omni takes audio, vision does not", async (t) => {
  const live = await omniClient(t);
  if (!live) return;
  const { client, served } = live;
  try {
    const info = await client.getModelInfo("omni");
    assert.equal(info.capabilities?.media?.audio, true, "omni: capabilities.media.audio");
    if (served.includes("vision")) {
      const vision = await client.getModelInfo("vision");
      assert.equal(vision.capabilities?.media?.audio, false, "vision: capabilities.media.audio");
    }
  } finally {
    client.close();
  }
});

liveTest("an audio file to the omni model: streamed tokens, FinishReason.LENGTH, the audio in the prompt", async (t) => {
  const live = await omniClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const message = userMessage(await audioFilePart(SPEECH), HEARD);
    let tokens = 0;
    let promptTokens = 0;
    let reason = FinishReason.UNSPECIFIED;
    for await (const res of client.generate(describeRequest("omni", message))) {
      if (res.event.case === "started") promptTokens = res.event.value.promptTokens;
      else if (res.event.case === "delta") tokens += res.event.value.tokenIds.length;
      else if (res.event.case === "finished") reason = res.event.value.reason;
    }
    assert.ok(tokens >= 1, `${tokens} tokens`);
    assert.equal(reason, FinishReason.LENGTH);
    const textOnly = await client.generateText(describeRequest("omni", userMessage(HEARD)));
    const without = textOnly.started?.promptTokens ?? 0;
    assert.ok(without > 0, "prompt_tokens without the audio");
    // 2 seconds at about 13 tokens a second, between two marker tokens.
    assert.ok(promptTokens >= without + 20, `${promptTokens} prompt tokens with the audio, ${without} without`);
  } finally {
    client.close();
  }
});

liveTest("WAV bytes declared audio/mpeg: INVALID_ARGUMENT naming the part's media_type", async (t) => {
  const live = await omniClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const wav = new Uint8Array(await readFile(SPEECH));
    const message = userMessage("Listen:", audioPart(wav, MediaType.MP3), HEARD);
    const d = errorDetails(await expectError(client.generateText(describeRequest("omni", message))));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    const fields = d.fieldViolations.map((v) => v.field);
    assert.ok(fields.includes("chat.messages[0].parts[1].audio.media_type"), `field violations: ${JSON.stringify(fields)}`);
  } finally {
    client.close();
  }
});

liveTest("five audio files in a request: INVALID_ARGUMENT, at most 4", async (t) => {
  const live = await omniClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const part = await audioFilePart(SPEECH);
    const message = userMessage(part, part, part, part, part, HEARD);
    const d = errorDetails(await expectError(client.generateText(describeRequest("omni", message))));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.match(d.message, /at most 4 audio files/);
  } finally {
    client.close();
  }
});

liveTest("an audio file to the image-only vision model: FAILED_PRECONDITION, UNSUPPORTED_OPERATION", async (t) => {
  const live = await omniClient(t);
  if (!live) return;
  const { client, served } = live;
  try {
    if (!served.includes("vision")) {
      t.skip(NO_VISION_MODEL);
      return;
    }
    const message = userMessage(await audioFilePart(SPEECH), HEARD);
    const err = await expectError(client.generateText(describeRequest("vision", message)));
    const d = errorDetails(err);
    assert.equal(d.code, Code.FailedPrecondition, String(err));
    assert.equal(d.errorInfo?.reason, "UNSUPPORTED_OPERATION");
    assert.match(d.message, /does not take audio/);
  } finally {
    client.close();
  }
});
