from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TranscriptionTask(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSCRIPTION_TASK_UNSPECIFIED: _ClassVar[TranscriptionTask]
    TRANSCRIPTION_TASK_TRANSCRIBE: _ClassVar[TranscriptionTask]
    TRANSCRIPTION_TASK_TRANSLATE: _ClassVar[TranscriptionTask]
TRANSCRIPTION_TASK_UNSPECIFIED: TranscriptionTask
TRANSCRIPTION_TASK_TRANSCRIBE: TranscriptionTask
TRANSCRIPTION_TASK_TRANSLATE: TranscriptionTask

class Audio(_message.Message):
    __slots__ = ("data", "media_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    media_type: str
    def __init__(self, data: _Optional[bytes] = ..., media_type: _Optional[str] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("model", "audio", "language", "task", "prompt", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    audio: Audio
    language: str
    task: TranscriptionTask
    prompt: str
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., audio: _Optional[_Union[Audio, _Mapping]] = ..., language: _Optional[str] = ..., task: _Optional[_Union[TranscriptionTask, str]] = ..., prompt: _Optional[str] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class TranscribeResponse(_message.Message):
    __slots__ = ("started", "segment", "finished")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    started: TranscriptionStarted
    segment: TranscriptSegment
    finished: TranscriptionFinished
    def __init__(self, started: _Optional[_Union[TranscriptionStarted, _Mapping]] = ..., segment: _Optional[_Union[TranscriptSegment, _Mapping]] = ..., finished: _Optional[_Union[TranscriptionFinished, _Mapping]] = ...) -> None: ...

class TranscriptionStarted(_message.Message):
    __slots__ = ("request_id", "model", "audio_seconds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    audio_seconds: float
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., audio_seconds: _Optional[float] = ...) -> None: ...

class TranscriptSegment(_message.Message):
    __slots__ = ("index", "start_seconds", "end_seconds", "text", "token_ids", "avg_logprob", "no_speech_prob", "compression_ratio")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    START_SECONDS_FIELD_NUMBER: _ClassVar[int]
    END_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    AVG_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    NO_SPEECH_PROB_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_RATIO_FIELD_NUMBER: _ClassVar[int]
    index: int
    start_seconds: float
    end_seconds: float
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    def __init__(self, index: _Optional[int] = ..., start_seconds: _Optional[float] = ..., end_seconds: _Optional[float] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., avg_logprob: _Optional[float] = ..., no_speech_prob: _Optional[float] = ..., compression_ratio: _Optional[float] = ...) -> None: ...

class TranscriptionFinished(_message.Message):
    __slots__ = ("text", "language", "segments", "seconds")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    text: str
    language: str
    segments: int
    seconds: float
    def __init__(self, text: _Optional[str] = ..., language: _Optional[str] = ..., segments: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...
