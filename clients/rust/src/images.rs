//! Images in chat messages: a [`pb::ChatMessage`]'s content can be `parts` (text, images,
//! videos and audio, in order; see [`crate::video_media_type_of`],
//! [`crate::audio_media_type_of`]) instead of `content` (not both).
//!
//! [`pb::ContentPart::image_file`] reads an image file and detects its media type from
//! its signature ([`media_type_of`]); [`pb::ContentPart::image`] takes bytes you already
//! have with their media type, sent as given. A model that takes images (its
//! `capabilities.media` is set) reads them; any other refuses an image with
//! FAILED_PRECONDITION (ErrorInfo reason `UNSUPPORTED_OPERATION`). An image whose media
//! type does not match its bytes, a truncated one or one too large is INVALID_ARGUMENT
//! with a BadRequest field violation.
//!
//! ```
//! use mlx_grpc_client::{media_type, pb};
//!
//! let png = b"\x89PNG\r\n\x1a\n...".to_vec();
//! let message = pb::ChatMessage::user_parts([
//!     pb::ContentPart::image(png, media_type::PNG), // or pb::ContentPart::image_file(path)?
//!     pb::ContentPart::text("Describe the image."),
//! ]);
//! # assert_eq!(message.parts.len(), 2);
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use crate::pb;
use crate::pb::content_part::Part;

/// The media types of the images, videos and audio the server takes.
pub mod media_type {
    /// PNG (`89 50 4E 47`).
    pub const PNG: &str = "image/png";
    /// JPEG (`FF D8 FF`).
    pub const JPEG: &str = "image/jpeg";
    /// WebP (`RIFF`, the size, `WEBP`).
    pub const WEBP: &str = "image/webp";
    /// GIF (`GIF8`); the server reads its first frame.
    pub const GIF: &str = "image/gif";
    /// MP4 (an ISO base media box, `ftyp`, `moov`, `mdat`, `wide` or `free`, at offset 4).
    pub const MP4: &str = "video/mp4";
    /// QuickTime (`ftyp` at offset 4 with the brand `qt  `).
    pub const QUICKTIME: &str = "video/quicktime";
    /// WebM (EBML `1A 45 DF A3` with the doctype `webm`).
    pub const WEBM: &str = "video/webm";
    /// Matroska (EBML `1A 45 DF A3`, any other doctype).
    pub const MATROSKA: &str = "video/x-matroska";
    /// AVI (`RIFF`, the size, `AVI `).
    pub const AVI: &str = "video/x-msvideo";
    /// WAV (`RIFF`, the size, `WAVE`): PCM or IEEE float.
    pub const WAV: &str = "audio/wav";
    /// MP3 (`ID3`, or an MPEG frame sync: `FF`, then a byte whose top three bits are set).
    pub const MP3: &str = "audio/mpeg";
    /// FLAC (`fLaC`).
    pub const FLAC: &str = "audio/flac";
    /// Ogg Vorbis (`OggS`).
    pub const OGG: &str = "audio/ogg";
}

/// Why an image file could not become a message part.
#[derive(Debug)]
pub enum ImageError {
    /// The file could not be read.
    Io(PathBuf, std::io::Error),
    /// The bytes do not start like a PNG, JPEG, WebP or GIF file: their first bytes.
    UnknownType(Vec<u8>),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(path, err) => write!(f, "reading image {}: {err}", path.display()),
            Self::UnknownType(head) => {
                write!(f, "not a PNG, JPEG, WebP or GIF image (first bytes")?;
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

impl std::error::Error for ImageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(_, err) => Some(err),
            Self::UnknownType(_) => None,
        }
    }
}

/// The media type of an encoded image from its signature: PNG `89 50 4E 47`, JPEG
/// `FF D8 FF`, GIF `GIF8`, WebP `RIFF` then `WEBP` at offset 8;
/// [`ImageError::UnknownType`] otherwise.
pub fn media_type_of(data: &[u8]) -> Result<&'static str, ImageError> {
    if data.starts_with(b"\x89PNG") {
        Ok(media_type::PNG)
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Ok(media_type::JPEG)
    } else if data.starts_with(b"GIF8") {
        Ok(media_type::GIF)
    } else if data.starts_with(b"RIFF") && data.get(8..12) == Some(b"WEBP") {
        Ok(media_type::WEBP)
    } else {
        Err(ImageError::UnknownType(data[..data.len().min(12)].to_vec()))
    }
}

impl pb::ContentPart {
    /// A part of text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            part: Some(Part::Text(text.into())),
        }
    }

    /// A part of an encoded image's bytes with its media type ([`media_type::PNG`], ...),
    /// sent as given: the server checks it against the bytes.
    pub fn image(data: impl Into<Vec<u8>>, media_type: impl Into<String>) -> Self {
        Self {
            part: Some(Part::Image(pb::Image {
                data: data.into(),
                media_type: media_type.into(),
            })),
        }
    }

    /// A part of the image file at `path`, its media type detected from its signature
    /// ([`media_type_of`]).
    pub fn image_file(path: impl AsRef<Path>) -> Result<Self, ImageError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| ImageError::Io(path.to_path_buf(), e))?;
        let media_type = media_type_of(&data)?;
        Ok(Self::image(data, media_type))
    }
}

impl pb::ChatMessage {
    /// A "user" message of `parts` in order ([`pb::ContentPart::text`],
    /// [`pb::ContentPart::image`], [`pb::ContentPart::image_file`],
    /// [`pb::ContentPart::video`], [`pb::ContentPart::video_file`],
    /// [`pb::ContentPart::audio`], [`pb::ContentPart::audio_file`]); `content` stays empty.
    pub fn user_parts(parts: impl IntoIterator<Item = pb::ContentPart>) -> Self {
        Self {
            role: "user".into(),
            parts: parts.into_iter().collect(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGNATURES: [(&str, &[u8]); 4] = [
        (media_type::PNG, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
        (media_type::JPEG, b"\xFF\xD8\xFF\xE0\0\x10JFIF\0"),
        (media_type::GIF, b"GIF89a\x01\0\x01\0"),
        (media_type::WEBP, b"RIFF\x24\0\0\0WEBPVP8 "),
    ];

    #[test]
    fn media_type_of_detects_each_signature() {
        for (want, data) in SIGNATURES {
            assert_eq!(media_type_of(data).unwrap(), want);
        }
        for other in [
            &b""[..],
            b"hello, world",
            b"RIFF\x24\0\0\0WAVEfmt ",
            b"RIFF",
            b"\xFF\xD8",
        ] {
            assert!(
                matches!(media_type_of(other), Err(ImageError::UnknownType(_))),
                "{other:?}"
            );
        }
        assert_eq!(
            media_type_of(b"hello").unwrap_err().to_string(),
            "not a PNG, JPEG, WebP or GIF image (first bytes 68 65 6c 6c 6f)"
        );
    }

    #[test]
    fn image_file_reads_and_detects() {
        let dir = std::env::temp_dir().join(format!("mlxgrpc-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (want, data) in SIGNATURES {
            let path = dir.join("image");
            std::fs::write(&path, data).unwrap();
            assert_eq!(
                pb::ContentPart::image_file(&path).unwrap(),
                pb::ContentPart::image(data, want)
            );
        }
        let notes = dir.join("notes.txt");
        std::fs::write(&notes, "not an image").unwrap();
        assert!(matches!(
            pb::ContentPart::image_file(&notes),
            Err(ImageError::UnknownType(_))
        ));
        let missing = pb::ContentPart::image_file(dir.join("missing.png")).unwrap_err();
        assert!(
            matches!(&missing, ImageError::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound)
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let gradient = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/gradient.png");
        match pb::ContentPart::image_file(gradient).unwrap().part {
            Some(Part::Image(image)) => assert_eq!(image.media_type, media_type::PNG),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn user_parts_keeps_the_order_and_each_case() {
        let jpeg = SIGNATURES[1].1;
        let message = pb::ChatMessage::user_parts([
            pb::ContentPart::text("Compare"),
            pb::ContentPart::image(jpeg, media_type::JPEG),
            pb::ContentPart::text("with"),
            pb::ContentPart::image(b"x".to_vec(), "image/webp"),
        ]);
        assert_eq!(
            (message.role.as_str(), message.content.as_str()),
            ("user", "")
        );
        let parts: Vec<_> = message.parts.into_iter().map(|p| p.part).collect();
        assert_eq!(
            parts,
            [
                Some(Part::Text("Compare".into())),
                Some(Part::Image(pb::Image {
                    data: jpeg.to_vec(),
                    media_type: "image/jpeg".into()
                })),
                Some(Part::Text("with".into())),
                Some(Part::Image(pb::Image {
                    data: b"x".to_vec(),
                    media_type: "image/webp".into()
                })),
            ]
        );
    }
}
