// Speech to text (Transcribe): the audio a request carries, a running Transcribe and the
// Transcript it comes to. The audio is an encoded file and its media type (WAV, MP3, FLAC
// or Ogg Vorbis), which the server checks against the file's signature before decoding
// anything: a mismatch, a file cut short, too large or too long is INVALID_ARGUMENT with a
// BadRequest field violation naming `audio.media_type` or `audio.data`. A model that is
// not a speech model (capabilities.transcription false) refuses Transcribe with
// FAILED_PRECONDITION (ErrorInfo reason UNSUPPORTED_OPERATION).
import { readFile } from "node:fs/promises";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions } from "@connectrpc/connect";

import {
  TranscriptionTask,
  type AudioSchema,
  type TranscribeRequest,
  type TranscribeRequestSchema,
  type TranscribeResponse,
} from "./gen/mlxgrpc/v1/speech_pb.js";
import { StreamCall, type CancelById, type StartStream } from "./generate.js";
import { MediaType } from "./images.js";
import type { Attempts } from "./retry.js";

export type AudioInit = MessageInitShape<typeof AudioSchema>;
export type TranscribeRequestInit = MessageInitShape<typeof TranscribeRequestSchema>;

/** A TranscriptionTask by name. */
export type TranscriptionTaskName = "transcribe" | "translate";

/**
 * A TranscribeRequest for transcribe and transcribeStream: `task` by name ("transcribe", the
 * default, or "translate": into English) or TranscriptionTask.
 */
export type TranscribeInit = Omit<Exclude<TranscribeRequestInit, TranscribeRequest>, "$typeName" | "task"> & {
  task?: TranscriptionTask | TranscriptionTaskName;
};

/** The TranscriptionTask of a task given by name or value. */
export function transcriptionTask(task: TranscriptionTask | TranscriptionTaskName): TranscriptionTask {
  if (typeof task !== "string") return task;
  if (task === "transcribe") return TranscriptionTask.TRANSCRIBE;
  if (task === "translate") return TranscriptionTask.TRANSLATE;
  throw new RangeError(`unknown transcription task "${String(task)}" (transcribe or translate)`);
}

/** Bytes that do not start like a WAV, FLAC, Ogg or MP3 file (`audioMediaTypeOf`, `audioFile`). */
export class UnknownAudioTypeError extends Error {
  constructor(what: string, head: Uint8Array) {
    const bytes = Array.from(head.subarray(0, 12), (b) => b.toString(16).padStart(2, "0")).join(" ");
    super(`${what}: not a WAV, MP3, FLAC or Ogg audio file (first bytes ${bytes || "none"})`);
    this.name = "UnknownAudioTypeError";
  }
}

const startsWith = (data: Uint8Array, sig: string, at = 0): boolean =>
  data.length >= at + sig.length && Array.from(sig).every((c, i) => data[at + i] === c.charCodeAt(0));

/**
 * The media type of an encoded audio file from its signature: "RIFF" then "WAVE" at offset 8
 * is WAV, "fLaC" FLAC, "OggS" Ogg, "ID3" (a tag) or an MPEG frame sync (FF, then a byte whose
 * top three bits are set) MP3. Throws UnknownAudioTypeError otherwise.
 */
export function audioMediaTypeOf(data: Uint8Array, what = "audio"): string {
  if (startsWith(data, "RIFF") && startsWith(data, "WAVE", 8)) return MediaType.WAV;
  if (startsWith(data, "fLaC")) return MediaType.FLAC;
  if (startsWith(data, "OggS")) return MediaType.OGG;
  if (startsWith(data, "ID3") || (data.length >= 2 && data[0] === 0xff && (data[1] & 0xe0) === 0xe0)) return MediaType.MP3;
  throw new UnknownAudioTypeError(what, data);
}

/** A request's audio: an encoded file's bytes with its media type (`MediaType.WAV`, ...), sent as given. */
export function audio(data: Uint8Array, mediaType: string): AudioInit {
  return { data, mediaType };
}

/** A request's audio from the file at `path`, its media type detected from its signature (`audioMediaTypeOf`). */
export async function audioFile(path: string): Promise<AudioInit> {
  const data = new Uint8Array(await readFile(path));
  return audio(data, audioMediaTypeOf(data, path));
}

/** One piece of a transcript, as the model timed it. */
export interface SpeechSegment {
  /** Its position among the segments, from 0. */
  index: number;
  /** Where it starts in the audio, in seconds. */
  start: number;
  /** Where it ends in the audio, in seconds. */
  end: number;
  /** Its text. */
  text: string;
  /** The tokens the model wrote for it (text and timestamp tokens). */
  tokenIds: number[];
  /** The mean log probability of its tokens. */
  avgLogprob: number;
  /** The model's probability that its window holds no speech. */
  noSpeechProb: number;
  /** Its text's gzip compression ratio (high: repetitive). */
  compressionRatio: number;
}

/** Everything one Transcribe produced: its started event's fields, the segments and its finished event's. */
export interface Transcript {
  /** The request's id (the caller's, or the one assigned client-side). */
  requestId: string;
  /** The model that transcribed it. */
  model: string;
  /** The audio's duration in seconds. */
  audioSeconds: number;
  /** The segments, in time order. */
  segments: SpeechSegment[];
  /** The whole transcript: every segment's text. */
  text: string;
  /** The spoken language (ISO 639-1): the request's, or the one the model detected. */
  language: string;
  /** The segments the server says it sent (finished.segments). */
  segmentCount: number;
  /** Seconds from admission to the transcript. */
  seconds: number;
}

/**
 * A Transcribe stream's events as a Transcript (`started`, the `segment`s, `finished`); the
 * request id is `requestId` when the stream has no `started`. A stream without `finished`
 * (it stopped early) throws a ConnectError with Code.Internal.
 */
export function transcriptOf(events: Iterable<TranscribeResponse>, requestId = ""): Transcript {
  const t: Transcript = {
    requestId,
    model: "",
    audioSeconds: 0,
    segments: [],
    text: "",
    language: "",
    segmentCount: 0,
    seconds: 0,
  };
  let finished = false;
  for (const res of events) {
    const ev = res.event;
    if (ev.case === "started") {
      t.requestId = ev.value.requestId || requestId;
      t.model = ev.value.model;
      t.audioSeconds = ev.value.audioSeconds;
    } else if (ev.case === "segment") {
      const s = ev.value;
      t.segments.push({
        index: s.index,
        start: s.startSeconds,
        end: s.endSeconds,
        text: s.text,
        tokenIds: [...s.tokenIds],
        avgLogprob: s.avgLogprob,
        noSpeechProb: s.noSpeechProb,
        compressionRatio: s.compressionRatio,
      });
    } else if (ev.case === "finished") {
      finished = true;
      t.text = ev.value.text;
      t.language = ev.value.language;
      t.segmentCount = ev.value.segments;
      t.seconds = ev.value.seconds;
    }
  }
  if (!finished) throw new ConnectError(`Transcribe stream of "${t.requestId}" ended without finished`, Code.Internal);
  return t;
}

/**
 * A running Transcribe: an async iterable of its events (`started` once the audio is decoded
 * and admitted, one `segment` per piece of the transcript in time order, then `finished`),
 * retried before the first one when the server refuses it for now. `collect()` reads it
 * to a Transcript; leaving the loop early or `abort()` cancels it client-side, `cancel()`
 * with the Cancel RPC.
 */
export class TranscribeCall extends StreamCall<TranscribeResponse> {
  constructor(requestId: string, start: StartStream<TranscribeResponse>, attempts: Attempts, controller: AbortController, cancelById: CancelById) {
    super(requestId, start, attempts, controller, cancelById, "transcribe");
  }

  /** Reads the whole stream: the unary form of Transcribe. */
  async collect(): Promise<Transcript> {
    const events: TranscribeResponse[] = [];
    for await (const res of this) events.push(res);
    return transcriptOf(events, this.requestId);
  }

  /**
   * Asks the server to cancel (Cancel RPC): the stream then fails with Code.Canceled (a
   * transcription already running on the model's thread finishes there, its result
   * dropped). False if none was running (not yet arrived, or already finished).
   */
  override cancel(options?: CallOptions): Promise<boolean> {
    return super.cancel(options);
  }
}
