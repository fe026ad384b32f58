//! Videos in chat messages: a part of a [`pb::ChatMessage`]'s `parts`, beside text and
//! images.
//!
//! [`pb::ContentPart::video_file`] reads a video file and detects its media type from its
//! container's signature ([`video_media_type_of`]); [`pb::ContentPart::video`] takes bytes
//! you already have with their media type, sent as given. The server samples the video's
//! frames (by default 2 per second, at most 32, in pairs). A model that takes videos (its
//! `capabilities.media.video` is true) reads them; any other refuses a video with
//! FAILED_PRECONDITION (ErrorInfo reason `UNSUPPORTED_OPERATION`). A video whose media type
//! does not match its bytes, one too large, too long or of too high a frame rate or frame
//! size, a truncated one, or more than 4 in a request is INVALID_ARGUMENT with a
//! BadRequest field violation naming the part (`chat.messages[0].parts[0].video.media_type`
//! or `...video.data`).
//!
//! ```
//! use mlx_grpc_client::{media_type, pb};
//!
//! let mp4 = b"\0\0\0\x1cftypisom...".to_vec();
//! let message = pb::ChatMessage::user_parts([
//!     pb::ContentPart::video(mp4, media_type::MP4), // or pb::ContentPart::video_file(path)?
//!     pb::ContentPart::text("What happens in the video?"),
//! ]);
//! # assert_eq!(message.parts.len(), 2);
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use crate::media_type;
use crate::pb;
use crate::pb::content_part::Part;

/// Why a video file could not become a message part.
#[derive(Debug)]
pub enum VideoError {
    /// The file could not be read.
    Io(PathBuf, std::io::Error),
    /// The bytes do not start like an MP4, QuickTime, WebM, Matroska or AVI file: their
    /// first bytes.
    UnknownType(Vec<u8>),
}

impl fmt::Display for VideoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(path, err) => write!(f, "reading video {}: {err}", path.display()),
            Self::UnknownType(head) => {
                write!(
                    f,
                    "not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes"
                )?;
                if head.is_empty() {
                    write!(f, " none")?;
                }
                for b in head {
                    write!(f, " {b:02x}")?;
                }
                write!(f, ")")
            }
        }
    }
}

impl std::error::Error for VideoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(_, err) => Some(err),
            Self::UnknownType(_) => None,
        }
    }
}

/// The ISO base media boxes an MP4 or QuickTime file starts with (the type at offset 4).
const ISO_BOXES: [&[u8; 4]; 5] = [b"ftyp", b"moov", b"mdat", b"wide", b"free"];

/// The media type of an encoded video from its container's signature: an ISO base media
/// box (`ftyp`, `moov`, `mdat`, `wide` or `free`) at offset 4 is MP4, or QuickTime when
/// it is `ftyp` with the brand `qt  `; EBML `1A 45 DF A3` is WebM when `webm` occurs in
/// the first 64 bytes, Matroska otherwise; `RIFF` then `AVI ` at offset 8 is AVI;
/// [`VideoError::UnknownType`] otherwise.
pub fn video_media_type_of(data: &[u8]) -> Result<&'static str, VideoError> {
    let at = |range: std::ops::Range<usize>| data.get(range);
    if at(4..8).is_some_and(|b| ISO_BOXES.iter().any(|box_type| b == *box_type)) {
        if at(4..8) == Some(b"ftyp") && at(8..12) == Some(b"qt  ") {
            Ok(media_type::QUICKTIME)
        } else {
            Ok(media_type::MP4)
        }
    } else if data.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]) {
        let head = &data[..data.len().min(64)];
        if head.windows(4).any(|w| w == b"webm") {
            Ok(media_type::WEBM)
        } else {
            Ok(media_type::MATROSKA)
        }
    } else if data.starts_with(b"RIFF") && at(8..12) == Some(b"AVI ") {
        Ok(media_type::AVI)
    } else {
        Err(VideoError::UnknownType(data[..data.len().min(12)].to_vec()))
    }
}

impl pb::ContentPart {
    /// A part of an encoded video's bytes with its media type ([`media_type::MP4`], ...),
    /// sent as given: the server checks it against the bytes.
    pub fn video(data: impl Into<Vec<u8>>, media_type: impl Into<String>) -> Self {
        Self {
            part: Some(Part::Video(pb::Video {
                data: data.into(),
                media_type: media_type.into(),
            })),
        }
    }

    /// A part of the video file at `path`, its media type detected from its container's
    /// signature ([`video_media_type_of`]).
    pub fn video_file(path: impl AsRef<Path>) -> Result<Self, VideoError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| VideoError::Io(path.to_path_buf(), e))?;
        let media_type = video_media_type_of(&data)?;
        Ok(Self::video(data, media_type))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGNATURES: [(&str, &[u8]); 9] = [
        (media_type::MP4, b"\0\0\0\x1cftypisom\0\0\x02\0"),
        (media_type::MP4, b"\0\0\0\x14ftypmp42\0\0\0\0"),
        (media_type::MP4, b"\0\0\x01\0moov\0\0\0\x6cmvhd"),
        (media_type::MP4, b"\0\0\0\x08free\0\0\x10\x1bmdat"),
        (media_type::MP4, b"\0\0\0\x08wide"),
        (media_type::QUICKTIME, b"\0\0\0\x14ftypqt  \0\0\x02\0"),
        (
            media_type::WEBM,
            b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\xf2\x81\x04\x42\xf3\x81\x08\x42\x82\x84webm",
        ),
        (
            media_type::MATROSKA,
            b"\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\xf7\x81\x01\x42\xf2\x81\x04\x42\xf3\x81\x08\x42\x82\x88matroska",
        ),
        (media_type::AVI, b"RIFF\x24\0\0\0AVI LIST"),
    ];

    #[test]
    fn video_media_type_of_detects_each_signature() {
        for (want, data) in SIGNATURES {
            assert_eq!(video_media_type_of(data).unwrap(), want, "{data:?}");
        }
        // "webm" past the first 64 bytes does not make a WebM file.
        let mut late = b"\x1a\x45\xdf\xa3".to_vec();
        late.resize(64, 0);
        late.extend(b"webm");
        assert_eq!(video_media_type_of(&late).unwrap(), media_type::MATROSKA);
        for other in [
            &b""[..],
            b"hello, world",
            b"\0\0\0\x1cfty",
            b"\0\0\0\x1cboxx\0\0\0\0",
            b"RIFF\x24\0\0\0WEBPVP8 ",
            b"RIFF\x24\0\0\0AVI",
            b"\x1a\x45\xdf",
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        ] {
            assert!(
                matches!(video_media_type_of(other), Err(VideoError::UnknownType(_))),
                "{other:?}"
            );
        }
        assert_eq!(
            video_media_type_of(b"hello").unwrap_err().to_string(),
            "not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes 68 65 6c 6c 6f)"
        );
        assert_eq!(
            video_media_type_of(b"").unwrap_err().to_string(),
            "not an MP4, QuickTime, WebM, Matroska or AVI video (first bytes none)"
        );
    }

    #[test]
    fn video_file_reads_and_detects() {
        let dir = std::env::temp_dir().join(format!("mlxgrpc-videos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (want, data) in SIGNATURES {
            let path = dir.join("video");
            std::fs::write(&path, data).unwrap();
            assert_eq!(
                pb::ContentPart::video_file(&path).unwrap(),
                pb::ContentPart::video(data, want)
            );
        }
        let notes = dir.join("notes.txt");
        std::fs::write(&notes, "not a video").unwrap();
        assert!(matches!(
            pb::ContentPart::video_file(&notes),
            Err(VideoError::UnknownType(_))
        ));
        let missing = pb::ContentPart::video_file(dir.join("missing.mp4")).unwrap_err();
        assert!(
            matches!(&missing, VideoError::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound)
        );
        assert!(
            missing.to_string().starts_with("reading video "),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let clip = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/clip.mp4");
        match pb::ContentPart::video_file(clip).unwrap().part {
            Some(Part::Video(video)) => {
                assert_eq!(video.media_type, media_type::MP4);
                assert_eq!(video.data, std::fs::read(clip).unwrap());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn user_parts_keeps_a_video_beside_text_and_images() {
        let mp4 = SIGNATURES[0].1;
        let message = pb::ChatMessage::user_parts([
            pb::ContentPart::video(mp4, media_type::MP4),
            pb::ContentPart::text("and"),
            pb::ContentPart::image(b"png".to_vec(), media_type::PNG),
            pb::ContentPart::video(b"x".to_vec(), "video/webm"),
        ]);
        assert_eq!(
            (message.role.as_str(), message.content.as_str()),
            ("user", "")
        );
        let parts: Vec<_> = message.parts.into_iter().map(|p| p.part).collect();
        assert_eq!(
            parts,
            [
                Some(Part::Video(pb::Video {
                    data: mp4.to_vec(),
                    media_type: "video/mp4".into()
                })),
                Some(Part::Text("and".into())),
                Some(Part::Image(pb::Image {
                    data: b"png".to_vec(),
                    media_type: "image/png".into()
                })),
                Some(Part::Video(pb::Video {
                    data: b"x".to_vec(),
                    media_type: "video/webm".into()
                })),
            ]
        );
    }
}
