// Speech to text: audio signature detection and the audio a request carries, a Transcript
// assembled from events, and the requests transcribe sends (with retries) to an in-process
// server (offline); against a live server with a model named "whisper" (the test fixture's
// tiny Whisper, random weights), its model info, clients/testdata/speech.wav transcribed,
// the WAV declared audio/mpeg, an unknown language, Transcribe on the text model "llama" and Cancel. A server
// without a model named "whisper" (the default one never has it) skips those live tests,
// even under MLXGRPC_REQUIRE_LIVE=1.
import { after, before, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  InferenceService,
  MediaType,
  ModelKind,
  RetryInfoSchema,
  TranscribeResponseSchema,
  TranscriptionTask,
  UnknownAudioTypeError,
  UnknownImageTypeError,
  UnknownVideoTypeError,
  audio,
  audioFile,
  audioMediaTypeOf,
  connect,
  errorDetails,
  mediaTypeOf,
  transcriptOf,
  transcriptionTask,
  videoMediaTypeOf,
  type MlxClient,
  type TranscribeRequest,
  type TranscribeResponse,
} from "../index.js";
import { address, discover, liveTest, token } from "./support.js";

/** clients/testdata/speech.wav (a 2-second 16 kHz WAV), from dist/test/. */
const SPEECH = fileURLToPath(new URL("../../../testdata/speech.wav", import.meta.url));

const bytes = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const SIGNATURES: [string, Uint8Array][] = [
  [MediaType.WAV, bytes("RIFF\x24\0\0\0WAVEfmt ")],
  [MediaType.FLAC, bytes("fLaC\0\0\0\x22\x10\0")],
  [MediaType.OGG, bytes("OggS\0\x02\0\0\0\0")],
  [MediaType.MP3, bytes("ID3\x04\0\0\0\0\x01\x0f")],
  [MediaType.MP3, bytes("\xff\xfb\x90\x64\0\0")],
  [MediaType.MP3, bytes("\xff\xf3")],
  [MediaType.MP3, bytes("\xff\xe2")],
];

test("audioMediaTypeOf detects WAV, FLAC, Ogg and MP3 by signature, and refuses anything else", () => {
  assert.deepEqual([MediaType.WAV, MediaType.MP3, MediaType.FLAC, MediaType.OGG], ["audio/wav", "audio/mpeg", "audio/flac", "audio/ogg"]);
  for (const [type, data] of SIGNATURES) assert.equal(audioMediaTypeOf(data), type, JSON.stringify([...data]));
  const others = [
    "",
    "hello, world",
    "RIFF\x24\0\0\0WEBPVP8 ", // a WebP image
    "RIFF\x24\0\0\0AVI LIST", // an AVI video
    "RIFF\x24\0\0\0WAV",
    "RIFF",
    "fLa",
    "Ogg",
    "ID",
    "\xff", // a frame sync needs two bytes
    "\xff\xd8\xff\xe0", // a JPEG: FF D8, the second byte's top three bits not all set
    "\xff\xc0",
    "\x89PNG\r\n\x1a\n",
    "\0\0\0\x1cftypisom",
  ];
  for (const other of others) assert.throws(() => audioMediaTypeOf(bytes(other)), UnknownAudioTypeError, JSON.stringify(other));
  assert.throws(
    () => audioMediaTypeOf(bytes("hello"), "notes.txt"),
    /notes\.txt: not a WAV, MP3, FLAC or Ogg audio file \(first bytes 68 65 6c 6c 6f\)/,
  );
  assert.throws(() => audioMediaTypeOf(new Uint8Array()), /audio: .*\(first bytes none\)/);
  // Audio is not an image or a video.
  for (const [, data] of SIGNATURES) {
    assert.throws(() => mediaTypeOf(data), UnknownImageTypeError);
    assert.throws(() => videoMediaTypeOf(data), UnknownVideoTypeError);
  }
});

test("audio and audioFile: the bytes with their media type; an unknown file is an error", async () => {
  const wav = SIGNATURES[0][1];
  assert.deepEqual(audio(wav, MediaType.MP3), { data: wav, mediaType: "audio/mpeg" }, "sent as given");
  const dir = await mkdtemp(join(tmpdir(), "mlxgrpc-audio-"));
  for (const [i, [type, data]] of SIGNATURES.entries()) {
    const path = join(dir, `audio-${i}`);
    await writeFile(path, data);
    assert.deepEqual(await audioFile(path), { data, mediaType: type });
  }
  await writeFile(join(dir, "notes.txt"), "not audio");
  await assert.rejects(audioFile(join(dir, "notes.txt")), UnknownAudioTypeError);
  await assert.rejects(audioFile(join(dir, "missing.wav")), { code: "ENOENT" });
  const speech = await audioFile(SPEECH);
  assert.equal(speech.mediaType, MediaType.WAV);
  assert.deepEqual(speech.data, new Uint8Array(await readFile(SPEECH)));
});

test("transcriptionTask: by name or value", () => {
  assert.equal(transcriptionTask("transcribe"), TranscriptionTask.TRANSCRIBE);
  assert.equal(transcriptionTask("translate"), TranscriptionTask.TRANSLATE);
  assert.equal(transcriptionTask(TranscriptionTask.UNSPECIFIED), TranscriptionTask.UNSPECIFIED);
  assert.throws(() => transcriptionTask("summarize" as "translate"), RangeError);
});

/** A stream's events for `requestId`: started, two segments, finished. */
function events(requestId: string, model = "whisper"): TranscribeResponse[] {
  return [
    create(TranscribeResponseSchema, { event: { case: "started", value: { requestId, model, audioSeconds: 2 } } }),
    create(TranscribeResponseSchema, {
      event: {
        case: "segment",
        value: { index: 0, startSeconds: 0, endSeconds: 1.2, text: " Hello", tokenIds: [50364, 2425, 50424], avgLogprob: -0.25, noSpeechProb: 0.01, compressionRatio: 0.8 },
      },
    }),
    create(TranscribeResponseSchema, {
      event: {
        case: "segment",
        value: { index: 1, startSeconds: 1.2, endSeconds: 2, text: " world.", tokenIds: [50424, 1002, 13, 50464], avgLogprob: -0.5, noSpeechProb: 0.02, compressionRatio: 0.9 },
      },
    }),
    create(TranscribeResponseSchema, { event: { case: "finished", value: { text: " Hello world.", language: "en", segments: 2, seconds: 0.31 } } }),
  ];
}

const EXPECTED_SEGMENTS = [
  { index: 0, start: 0, end: 1.2, text: " Hello", tokenIds: [50364, 2425, 50424], avgLogprob: -0.25, noSpeechProb: 0.01, compressionRatio: 0.8 },
  { index: 1, start: 1.2, end: 2, text: " world.", tokenIds: [50424, 1002, 13, 50464], avgLogprob: -0.5, noSpeechProb: 0.02, compressionRatio: 0.9 },
];

test("transcriptOf assembles a Transcript from started, segments and finished", () => {
  assert.deepEqual(transcriptOf(events("r-1")), {
    requestId: "r-1",
    model: "whisper",
    audioSeconds: 2,
    segments: EXPECTED_SEGMENTS,
    text: " Hello world.",
    language: "en",
    segmentCount: 2,
    seconds: 0.31,
  });
  // Without started: the given request id; no segments: none.
  const [, , , finished] = events("ignored");
  assert.deepEqual(transcriptOf([finished], "mine"), {
    requestId: "mine",
    model: "",
    audioSeconds: 0,
    segments: [],
    text: " Hello world.",
    language: "en",
    segmentCount: 2,
    seconds: 0.31,
  });
  // A stream that stopped before finished.
  assert.throws(() => transcriptOf(events("r-2").slice(0, 3)), (err: unknown) => {
    assert.ok(err instanceof ConnectError);
    assert.equal(err.code, Code.Internal);
    assert.match(err.rawMessage, /"r-2" ended without finished/);
    return true;
  });
});

// An in-process server that records the requests; `refusals` refuses that many attempts
// first (RESOURCE_EXHAUSTED with a RetryInfo of 50 ms).
const requests: TranscribeRequest[] = [];
const server = { refusals: 0 };
let h2: http2.Http2Server;
let local = "";
before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(InferenceService, {
        async *transcribe(req: TranscribeRequest) {
          requests.push(req);
          if (server.refusals-- > 0) {
            const retryDelay = { seconds: 0n, nanos: 50e6 };
            throw new ConnectError("queue full", Code.ResourceExhausted, undefined, [{ desc: RetryInfoSchema, value: { retryDelay } }]);
          }
          yield* events(req.requestId, req.model || "whisper");
        },
      }),
  });
  h2 = http2.createServer(handler);
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  local = `127.0.0.1:${(h2.address() as AddressInfo).port}`;
});
after(() => h2.close());

test("transcribe sends the audio and options; the Transcript comes back", async () => {
  requests.length = 0;
  server.refusals = 0;
  const client = connect(local, { priority: -20 });
  const wav = SIGNATURES[0][1];
  try {
    const plain = await client.transcribe({ audio: audio(wav, MediaType.WAV) });
    assert.match(plain.requestId, /^[0-9a-f-]{36}$/, "a request id assigned client-side");
    assert.deepEqual({ ...plain, requestId: "" }, {
      requestId: "",
      model: "whisper",
      audioSeconds: 2,
      segments: EXPECTED_SEGMENTS,
      text: " Hello world.",
      language: "en",
      segmentCount: 2,
      seconds: 0.31,
    });
    const full = await client.transcribe({
      model: "whisper-small",
      audio: audio(wav, MediaType.FLAC),
      language: "de",
      task: "translate",
      prompt: "Names: Ada, Grace.",
      requestId: "t-1",
      priority: 30,
    });
    assert.equal(full.requestId, "t-1");
    assert.equal(full.model, "whisper-small");
    await client.transcribe({ audio: audio(wav, MediaType.WAV), task: TranscriptionTask.TRANSCRIBE, requestId: "t-2" });
    const fields = (r: TranscribeRequest) => [r.model, r.audio?.mediaType, [...(r.audio?.data ?? [])], r.language, r.task, r.prompt, r.priority];
    assert.equal(requests.length, 3);
    assert.equal(requests[0].requestId, plain.requestId);
    assert.deepEqual(fields(requests[0]), ["", "audio/wav", [...wav], "", TranscriptionTask.UNSPECIFIED, "", -20], "unset: the server's defaults, the client's priority");
    assert.deepEqual([requests[1].requestId, ...fields(requests[1])], ["t-1", "whisper-small", "audio/flac", [...wav], "de", TranscriptionTask.TRANSLATE, "Names: Ada, Grace.", 30]);
    assert.equal(requests[2].task, TranscriptionTask.TRANSCRIBE);
  } finally {
    client.close();
  }
});

test("transcribeStream: the events in order under the call's request id", async () => {
  requests.length = 0;
  server.refusals = 0;
  const client = connect(local);
  try {
    const call = client.transcribeStream({ audio: audio(SIGNATURES[0][1], MediaType.WAV), requestId: "s-1" });
    assert.equal(call.requestId, "s-1");
    const cases: string[] = [];
    for await (const res of call) cases.push(res.event.case ?? "none");
    assert.deepEqual(cases, ["started", "segment", "segment", "finished"]);
    assert.equal(requests[0].priority, 0, "no client priority: the server's default");
    // Leaving the loop early cancels the call and ends the iteration.
    const early = client.transcribeStream({ audio: audio(SIGNATURES[0][1], MediaType.WAV) });
    for await (const res of early) {
      assert.equal(res.event.case, "started");
      break;
    }
  } finally {
    client.close();
  }
});

test("a Transcribe refused with RetryInfo is retried with the same request id", async () => {
  requests.length = 0;
  server.refusals = 2;
  const retries: number[] = [];
  const client = connect(local, { onRetry: (_, ms) => retries.push(ms) });
  try {
    const t = await client.transcribe({ audio: audio(SIGNATURES[0][1], MediaType.WAV) });
    assert.deepEqual(retries, [50, 50]);
    assert.deepEqual(requests.map((r) => r.requestId), [t.requestId, t.requestId, t.requestId]);
    assert.equal(t.segmentCount, 2);
    server.refusals = 1;
    const once = connect(local, { maxAttempts: 1 });
    try {
      await assert.rejects(once.transcribe({ audio: audio(SIGNATURES[0][1], MediaType.WAV) }), { code: Code.ResourceExhausted });
    } finally {
      once.close();
    }
  } finally {
    client.close();
  }
});

// Live: the fixture's "whisper" (a tiny random-weights Whisper, English only) and "llama".

const NO_WHISPER = 'the server has no model named "whisper" (the fixture server\'s speech model; the default server never has one)';

/** A client when the server has a model named "whisper"; skips the test (even under MLXGRPC_REQUIRE_LIVE) otherwise. */
async function whisperClient(t: TestContext): Promise<{ client: MlxClient; served: string[] } | undefined> {
  const client = connect(address!, { token, timeoutMs: 120_000 });
  const served = (await discover(client)).all.map((m) => m.name);
  if (served.includes("whisper")) return { client, served };
  client.close();
  t.skip(NO_WHISPER);
  return undefined;
}

async function expectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  assert.fail("expected the call to fail");
}

liveTest("model info: whisper is a speech model that transcribes and does not generate", async (t) => {
  const live = await whisperClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const info = await client.getModelInfo("whisper");
    assert.equal(info.kind, ModelKind.SPEECH);
    assert.equal(info.capabilities?.transcription, true, "capabilities.transcription");
    assert.equal(info.capabilities?.generation, false, "capabilities.generation");
  } finally {
    client.close();
  }
});

liveTest("speech.wav transcribed by whisper: the request id, model, duration, segments and language", async (t) => {
  const live = await whisperClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const tr = await client.transcribe({ model: "whisper", audio: await audioFile(SPEECH), requestId: "ts-transcribe-1" });
    assert.equal(tr.requestId, "ts-transcribe-1");
    assert.equal(tr.model, "whisper");
    assert.ok(Math.abs(tr.audioSeconds - 2) <= 0.05, `${tr.audioSeconds} audio seconds`);
    assert.ok(tr.segments.length >= 1, "at least one segment");
    // Random weights: the text and the times mean nothing (start <= end is not guaranteed), their form does.
    assert.deepEqual(tr.segments.map((s) => s.index), [...tr.segments.keys()], "indices 0..n-1");
    assert.equal(tr.segmentCount, tr.segments.length, "finished.segments");
    assert.equal(tr.language, "en");
    assert.ok(tr.seconds >= 0);
    for (const s of tr.segments) assert.ok(s.tokenIds.length >= 1 && Number.isFinite(s.start) && Number.isFinite(s.end));
    // The stream form: started, the segments, finished.
    const cases: string[] = [];
    for await (const res of client.transcribeStream({ model: "whisper", audio: await audioFile(SPEECH), language: "en" })) {
      cases.push(res.event.case ?? "none");
    }
    assert.deepEqual(cases, ["started", ...tr.segments.map(() => "segment"), "finished"], "the same file, the same transcript");
  } finally {
    client.close();
  }
});

liveTest("WAV bytes declared audio/mpeg: INVALID_ARGUMENT naming audio.media_type; an unknown language naming language", async (t) => {
  const live = await whisperClient(t);
  if (!live) return;
  const { client } = live;
  try {
    const wav = new Uint8Array(await readFile(SPEECH));
    const d = errorDetails(await expectError(client.transcribe({ model: "whisper", audio: audio(wav, MediaType.MP3) })));
    assert.equal(d.code, Code.InvalidArgument, d.message);
    assert.deepEqual(d.fieldViolations.map((v) => v.field), ["audio.media_type"]);
    // A language the model does not know: INVALID_ARGUMENT naming language.
    const bad = errorDetails(await expectError(client.transcribe({ model: "whisper", audio: audio(wav, MediaType.WAV), language: "xx" })));
    assert.deepEqual([bad.code, bad.fieldViolations.map((v) => v.field)], [Code.InvalidArgument, ["language"]], bad.message);
  } finally {
    client.close();
  }
});

liveTest("Transcribe on the text model llama: FAILED_PRECONDITION, UNSUPPORTED_OPERATION", async (t) => {
  const live = await whisperClient(t);
  if (!live) return;
  const { client, served } = live;
  try {
    if (!served.includes("llama")) return t.skip('the server has no model named "llama"');
    const d = errorDetails(await expectError(client.transcribe({ model: "llama", audio: await audioFile(SPEECH) })));
    assert.equal(d.code, Code.FailedPrecondition, d.message);
    assert.equal(d.errorInfo?.reason, "UNSUPPORTED_OPERATION");
  } finally {
    client.close();
  }
});

liveTest("Cancel by the call's request id after started: the stream fails with CANCELLED", async (t) => {
  const live = await whisperClient(t);
  if (!live) return;
  const { client } = live;
  try {
    // A minute of silence: two 30-second windows, far longer than the Cancel's round trip.
    const call = client.transcribeStream({ model: "whisper", audio: audio(silentWav(60), MediaType.WAV) });
    let cancelled: boolean | undefined;
    let err: unknown;
    try {
      for await (const res of call) if (res.event.case === "started") cancelled = await call.cancel();
    } catch (e) {
      err = e;
    }
    assert.equal(cancelled, true, String(err));
    assert.ok(err instanceof ConnectError, String(err));
    assert.equal(err.code, Code.Canceled, err.message);
  } finally {
    client.close();
  }
});

/** A 16 kHz mono 16-bit WAV of `seconds` of silence. */
function silentWav(seconds: number): Uint8Array {
  const bytes = seconds * 16000 * 2;
  const out = new Uint8Array(44 + bytes);
  const view = new DataView(out.buffer);
  const ascii = (at: number, text: string) => [...text].forEach((c, i) => out[at + i] = c.charCodeAt(0));
  ascii(0, "RIFF"); view.setUint32(4, 36 + bytes, true); ascii(8, "WAVE");
  ascii(12, "fmt "); view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, 16000, true); view.setUint32(28, 32000, true); view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  ascii(36, "data"); view.setUint32(40, bytes, true);
  return out;
}
