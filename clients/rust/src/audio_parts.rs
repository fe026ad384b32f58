//! Audio in chat messages: a part of a [`pb::ChatMessage`]'s `parts`, beside text, images
//! and videos, heard by the model where it stands.
//!
//! [`pb::ContentPart::audio_file`] reads an audio file and detects its media type from its
//! signature ([`crate::audio_media_type_of`], as Transcribe's [`pb::Audio::file`] does);
//! [`pb::ContentPart::audio`] takes bytes you already have with their media type, sent as
//! given, and a [`pb::Audio`] becomes a part with `.into()`. A model that takes audio (its
//! `capabilities.media.audio` is true, a Qwen3-Omni) hears it: about 13 prompt tokens a
//! second of audio, plus 2 around it; any other refuses an audio part with
//! FAILED_PRECONDITION (ErrorInfo reason `UNSUPPORTED_OPERATION`). Audio whose media type
//! does not match its bytes, one too large or too long, one cut short, or more than 4 in a
//! request is INVALID_ARGUMENT with a BadRequest field violation naming the part
//! (`chat.messages[0].parts[0].audio.media_type` or `...audio.data`).
//!
//! ```
//! use mlx_grpc_client::{media_type, pb};
//!
//! let wav = b"RIFF\x24\0\0\0WAVEfmt ".to_vec();
//! let message = pb::ChatMessage::user_parts([
//!     pb::ContentPart::audio(wav, media_type::WAV), // or pb::ContentPart::audio_file(path)?
//!     pb::ContentPart::text("What is said in the recording?"),
//! ]);
//! # assert_eq!(message.parts.len(), 2);
//! ```

use std::path::Path;

use crate::pb::content_part::Part;
use crate::{AudioError, pb};

impl From<pb::Audio> for pb::ContentPart {
    /// A part of `audio` (a [`pb::Audio::new`] or [`pb::Audio::file`], as Transcribe takes).
    fn from(audio: pb::Audio) -> Self {
        Self {
            part: Some(Part::Audio(audio)),
        }
    }
}

impl pb::ContentPart {
    /// A part of an encoded audio file's bytes with its media type ([`crate::media_type::WAV`],
    /// ...), sent as given: the server checks it against the bytes.
    pub fn audio(data: impl Into<Vec<u8>>, media_type: impl Into<String>) -> Self {
        pb::Audio::new(data, media_type).into()
    }

    /// A part of the audio file at `path`, its media type detected from its signature
    /// ([`crate::audio_media_type_of`]).
    pub fn audio_file(path: impl AsRef<Path>) -> Result<Self, AudioError> {
        pb::Audio::file(path).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media_type;

    const SPEECH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/speech.wav");

    fn audio(data: &[u8], media_type: &str) -> Option<Part> {
        Some(Part::Audio(pb::Audio {
            data: data.to_vec(),
            media_type: media_type.into(),
        }))
    }

    #[test]
    fn audio_keeps_the_bytes_and_media_type_as_given() {
        // Sent as given, even when the bytes say otherwise: the server checks them.
        let wav = b"RIFF\x24\0\0\0WAVEfmt ";
        assert_eq!(
            pb::ContentPart::audio(wav.to_vec(), media_type::MP3).part,
            audio(wav, "audio/mpeg")
        );
        assert_eq!(
            pb::ContentPart::from(pb::Audio::new(wav.to_vec(), media_type::WAV)),
            pb::ContentPart::audio(wav.to_vec(), "audio/wav")
        );
    }

    #[test]
    fn audio_file_reads_and_detects() {
        let dir = std::env::temp_dir().join(format!("mlxgrpc-audio-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (want, data) in [
            (media_type::WAV, &b"RIFF\x24\0\0\0WAVEfmt "[..]),
            (media_type::MP3, b"ID3\x04\0\0\0\0\0\0"),
            (media_type::MP3, b"\xff\xfb\x90\x64\0\0"),
            (media_type::FLAC, b"fLaC\0\0\0\x22"),
            (media_type::OGG, b"OggS\0\x02\0\0"),
        ] {
            let path = dir.join("audio");
            std::fs::write(&path, data).unwrap();
            assert_eq!(
                pb::ContentPart::audio_file(&path).unwrap().part,
                audio(data, want),
                "{data:?}"
            );
        }
        let notes = dir.join("notes.txt");
        std::fs::write(&notes, "not audio").unwrap();
        assert!(matches!(
            pb::ContentPart::audio_file(&notes),
            Err(AudioError::UnknownType(_))
        ));
        let missing = pb::ContentPart::audio_file(dir.join("missing.wav")).unwrap_err();
        assert!(
            matches!(&missing, AudioError::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound)
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let speech = std::fs::read(SPEECH).unwrap();
        assert_eq!(
            pb::ContentPart::audio_file(SPEECH).unwrap().part,
            audio(&speech, "audio/wav")
        );
    }

    #[test]
    fn user_parts_keeps_audio_then_image_then_text_in_order() {
        let wav = b"RIFF\x24\0\0\0WAVEfmt ";
        let message = pb::ChatMessage::user_parts([
            pb::ContentPart::audio(wav.to_vec(), media_type::WAV),
            pb::ContentPart::image(b"png".to_vec(), media_type::PNG),
            pb::ContentPart::text("What is said, and what is shown?"),
        ]);
        assert_eq!(
            (message.role.as_str(), message.content.as_str()),
            ("user", "")
        );
        let parts: Vec<_> = message.parts.into_iter().map(|p| p.part).collect();
        assert_eq!(
            parts,
            [
                audio(wav, "audio/wav"),
                Some(Part::Image(pb::Image {
                    data: b"png".to_vec(),
                    media_type: "image/png".into()
                })),
                Some(Part::Text("What is said, and what is shown?".into())),
            ]
        );
    }
}
