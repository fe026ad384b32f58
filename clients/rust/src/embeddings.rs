//! Packed embeddings: [`Client::embed_packed`] has the server send up to 64 inputs'
//! vectors a message as one little-endian byte string of one element type
//! ([`pb::PackedEmbeddings`]) and decodes them, in input order, into [`Embeddings`]:
//! float32 and float16 as `Vec<f32>`, int8 as `Vec<i8>` with a scale per vector
//! (value ≈ int8 × scale), ubinary as `Vec<u8>` of packed bits (1 where the value is above
//! 0, the first value in the most significant bit of the first byte).
//!
//! ```
//! use mlx_grpc_client::pb;
//!
//! let request = pb::EmbedRequest::new(["first text", "second text"])
//!     .with_packed(pb::EmbeddingType::Int8);
//! # assert!(request.packed);
//! # assert_eq!(request.embedding_type(), pb::EmbeddingType::Int8);
//! ```

use std::fmt;

use tonic::{IntoRequest, Status};

use crate::{Client, pb};

/// The vectors of a packed Embed call, in the order of the request's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    /// Values per vector (ubinary: bits).
    pub dimensions: usize,
    /// The vectors, by their element type.
    pub vectors: Vectors,
    /// Tokens each input used (after truncation to the model's limit).
    pub tokens: Vec<i32>,
    /// Response messages the server sent (up to 64 vectors each).
    pub messages: usize,
}

/// Packed vectors by element type, one per input, in input order.
#[derive(Clone, Debug, PartialEq)]
pub enum Vectors {
    /// IEEE single precision.
    Float32(Vec<Vec<f32>>),
    /// IEEE half precision, widened to `f32` exactly.
    Float16(Vec<Vec<f32>>),
    /// One signed byte a value and each vector's scale: value ≈ int8 × scale.
    Int8 {
        values: Vec<Vec<i8>>,
        scales: Vec<f32>,
    },
    /// One bit a value, `ceil(dimensions / 8)` bytes a vector, the first value in the
    /// most significant bit (compare with [`hamming`]; [`unpack_bits`] spells them out).
    Ubinary(Vec<Vec<u8>>),
}

/// A packed Embed response that does not hold what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedError(String);

impl fmt::Display for PackedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "packed embeddings: {}", self.0)
    }
}

impl std::error::Error for PackedError {}

impl From<PackedError> for Status {
    fn from(e: PackedError) -> Self {
        Status::internal(e.to_string())
    }
}

fn kind(t: i32) -> Result<pb::EmbeddingType, PackedError> {
    match pb::EmbeddingType::try_from(t) {
        Ok(pb::EmbeddingType::Unspecified) => Ok(pb::EmbeddingType::Float32),
        Ok(t) => Ok(t),
        Err(_) => Err(PackedError(format!("unknown embedding type {t}"))),
    }
}

/// Bytes one vector of `dimensions` values takes in `PackedEmbeddings.data`.
fn vector_bytes(t: pb::EmbeddingType, dimensions: usize) -> usize {
    match t {
        pb::EmbeddingType::Float16 => 2 * dimensions,
        pb::EmbeddingType::Int8 => dimensions,
        pb::EmbeddingType::Ubinary => dimensions.div_ceil(8),
        _ => 4 * dimensions,
    }
}

impl Embeddings {
    /// Gathers the packed responses of an Embed call (what [`Client::embed`] returns for a
    /// request with `packed`) into input order. `inputs`, the request's number of inputs,
    /// must be covered exactly (`None`: as many as the responses hold). Fails on a response
    /// that is not packed, data of the wrong size, mixed types or dimensions, or an index
    /// out of range, repeated or missing.
    pub fn from_responses(
        responses: &[pb::EmbedResponse],
        inputs: Option<usize>,
    ) -> Result<Self, PackedError> {
        let mut packed = Vec::with_capacity(responses.len());
        for r in responses {
            packed.push(r.packed.as_ref().ok_or_else(|| {
                PackedError(format!("the response for input {} is not packed", r.index))
            })?);
        }
        let (t, dimensions) = match packed.first() {
            Some(p) => (
                kind(p.r#type)?,
                usize::try_from(p.dimensions)
                    .map_err(|_| PackedError(format!("{} dimensions", p.dimensions)))?,
            ),
            None => (pb::EmbeddingType::Float32, 0),
        };
        let count = inputs.unwrap_or_else(|| packed.iter().map(|p| p.indices.len()).sum());
        let size = vector_bytes(t, dimensions);
        let mut tokens = vec![0; count];
        let mut scales = vec![0f32; count];
        let mut slots: Vec<Option<&[u8]>> = vec![None; count];
        for p in &packed {
            let (pt, pd) = (kind(p.r#type)?, p.dimensions);
            if pt != t || usize::try_from(pd).ok() != Some(dimensions) {
                return Err(PackedError(format!(
                    "{} x {pd} after {} x {dimensions}",
                    pt.as_str_name(),
                    t.as_str_name()
                )));
            }
            let n = p.indices.len();
            if Some(p.data.len()) != n.checked_mul(size) {
                return Err(PackedError(format!(
                    "{} bytes of data for {n} vectors of {dimensions} {} values",
                    p.data.len(),
                    t.as_str_name()
                )));
            }
            if !p.tokens.is_empty() && p.tokens.len() != n {
                return Err(PackedError(format!(
                    "{} token counts for {n} vectors",
                    p.tokens.len()
                )));
            }
            if t == pb::EmbeddingType::Int8 && p.scales.len() != n {
                return Err(PackedError(format!(
                    "{} scales for {n} int8 vectors",
                    p.scales.len()
                )));
            }
            for (j, &index) in p.indices.iter().enumerate() {
                let slot = usize::try_from(index)
                    .ok()
                    .filter(|&i| i < count && slots[i].is_none())
                    .ok_or_else(|| {
                        PackedError(format!("index {index} out of range or repeated"))
                    })?;
                slots[slot] = Some(&p.data[j * size..(j + 1) * size]);
                tokens[slot] = p.tokens.get(j).copied().unwrap_or(0);
                if t == pb::EmbeddingType::Int8 {
                    scales[slot] = p.scales[j];
                }
            }
        }
        let mut chunks = Vec::with_capacity(count);
        for (i, slot) in slots.into_iter().enumerate() {
            chunks.push(slot.ok_or_else(|| PackedError(format!("no vector for input {i}")))?);
        }
        let vectors = match t {
            pb::EmbeddingType::Float16 => Vectors::Float16(
                chunks
                    .iter()
                    .map(|c| {
                        c.chunks_exact(2)
                            .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                            .collect()
                    })
                    .collect(),
            ),
            pb::EmbeddingType::Int8 => Vectors::Int8 {
                values: chunks
                    .iter()
                    .map(|c| c.iter().map(|&b| b as i8).collect())
                    .collect(),
                scales,
            },
            pb::EmbeddingType::Ubinary => {
                Vectors::Ubinary(chunks.iter().map(|c| c.to_vec()).collect())
            }
            _ => Vectors::Float32(
                chunks
                    .iter()
                    .map(|c| {
                        c.chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect()
                    })
                    .collect(),
            ),
        };
        Ok(Self {
            dimensions,
            vectors,
            tokens,
            messages: responses.len(),
        })
    }

    /// The element type of the vectors.
    pub fn embedding_type(&self) -> pb::EmbeddingType {
        match self.vectors {
            Vectors::Float32(_) => pb::EmbeddingType::Float32,
            Vectors::Float16(_) => pb::EmbeddingType::Float16,
            Vectors::Int8 { .. } => pb::EmbeddingType::Int8,
            Vectors::Ubinary(_) => pb::EmbeddingType::Ubinary,
        }
    }

    /// The number of vectors.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are no vectors.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Every vector as `f32` values: float32 and float16 as they are, int8 dequantized
    /// (int8 × scale), ubinary as its 0 and 1 bits.
    pub fn to_f32(&self) -> Vec<Vec<f32>> {
        match &self.vectors {
            Vectors::Float32(v) | Vectors::Float16(v) => v.clone(),
            Vectors::Int8 { values, scales } => values
                .iter()
                .zip(scales)
                .map(|(v, &s)| dequantize(v, s))
                .collect(),
            Vectors::Ubinary(v) => v
                .iter()
                .map(|b| {
                    unpack_bits(b, self.dimensions)
                        .into_iter()
                        .map(f32::from)
                        .collect()
                })
                .collect(),
        }
    }
}

/// An IEEE 754 half-precision value (its bits) widened to `f32`, exactly: subnormals,
/// infinities and NaN included.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exponent = u32::from(h >> 10) & 0x1f;
    let fraction = u32::from(h & 0x3ff);
    match exponent {
        // zero or subnormal: fraction × 2^-24
        0 => f32::from_bits(sign | (fraction as f32 * f32::from_bits(0x3380_0000)).to_bits()),
        0x1f => f32::from_bits(sign | 0x7f80_0000 | fraction << 13),
        _ => f32::from_bits(sign | (exponent + 127 - 15) << 23 | fraction << 13),
    }
}

/// An int8 vector's approximate values: `v[i] × scale`.
pub fn dequantize(v: &[i8], scale: f32) -> Vec<f32> {
    v.iter().map(|&x| f32::from(x) * scale).collect()
}

/// A ubinary vector's first `dimensions` bits, one 0 or 1 a value (1: it was above 0),
/// the first value first.
pub fn unpack_bits(v: &[u8], dimensions: usize) -> Vec<u8> {
    (0..dimensions)
        .map(|i| (v[i / 8] >> (7 - i % 8)) & 1)
        .collect()
}

/// The number of bits in which two ubinary vectors differ.
///
/// # Panics
/// If they are not of the same length.
pub fn hamming(a: &[u8], b: &[u8]) -> u32 {
    assert_eq!(a.len(), b.len(), "ubinary vectors of different lengths");
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

impl pb::EmbedRequest {
    /// Asks for the vectors packed, up to 64 a message, as `embedding_type`
    /// ([`Client::embed_packed`] decodes them).
    pub fn with_packed(mut self, embedding_type: pb::EmbeddingType) -> Self {
        self.packed = true;
        self.set_embedding_type(embedding_type);
        self
    }

    /// The packed vectors' element type alone (a type other than float32 without
    /// `packed` is INVALID_ARGUMENT naming `embedding_type`).
    pub fn with_embedding_type(mut self, embedding_type: pb::EmbeddingType) -> Self {
        self.set_embedding_type(embedding_type);
        self
    }
}

impl Client {
    /// Embeds texts packed (the request's `packed` is set for you; its `embedding_type`,
    /// [`pb::EmbedRequest::with_packed`], chooses float32, float16, int8 or ubinary) and
    /// decodes the vectors into input order. Priority, truncation and retries as in
    /// [`Client::embed`]; a response that does not decode is an INTERNAL status.
    pub async fn embed_packed(
        &self,
        request: impl IntoRequest<pb::EmbedRequest>,
    ) -> Result<Embeddings, Status> {
        let mut request = request.into_request();
        request.get_mut().packed = true;
        let inputs = request.get_ref().inputs.len();
        let responses = self.embed(request).await?;
        Ok(Embeddings::from_responses(&responses, Some(inputs))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(p: pb::PackedEmbeddings) -> pb::EmbedResponse {
        pb::EmbedResponse {
            packed: Some(p),
            ..Default::default()
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn f32le(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn float32_little_endian_gathered_by_index() {
        // 1.0, -2.5 | 0.5, 0.0: the vectors of inputs 1 and 0
        let data = hex("0000803f000020c00000003f00000000");
        for t in [pb::EmbeddingType::Float32, pb::EmbeddingType::Unspecified] {
            let e = Embeddings::from_responses(
                &[packed(pb::PackedEmbeddings {
                    indices: vec![1, 0],
                    tokens: vec![4, 5],
                    dimensions: 2,
                    r#type: t as i32,
                    data: data.clone(),
                    scales: vec![],
                })],
                Some(2),
            )
            .unwrap();
            assert_eq!(
                e.vectors,
                Vectors::Float32(vec![vec![0.5, 0.0], vec![1.0, -2.5]])
            );
            assert_eq!(
                (e.dimensions, e.tokens.clone(), e.messages),
                (2, vec![5, 4], 1)
            );
            assert_eq!(e.embedding_type(), pb::EmbeddingType::Float32);
        }
    }

    #[test]
    fn float16_exact_halves() {
        // 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800 | 65504 = 0x7bff (largest), 2^-24 =
        // 0x0001 (smallest subnormal), 0.333251953125 = 0x3555
        let data = hex("003c00c00038ff7b01005535");
        let e = Embeddings::from_responses(
            &[packed(pb::PackedEmbeddings {
                indices: vec![0, 1],
                tokens: vec![2, 2],
                dimensions: 3,
                r#type: pb::EmbeddingType::Float16 as i32,
                data,
                scales: vec![],
            })],
            None,
        )
        .unwrap();
        assert_eq!(
            e.vectors,
            Vectors::Float16(vec![
                vec![1.0, -2.0, 0.5],
                vec![65504.0, 2f32.powi(-24), 1365.0 / 4096.0] // 0.333251953125
            ])
        );
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x0400), 2f32.powi(-14));
        assert!(f16_to_f32(0x8000) == 0.0 && f16_to_f32(0x8000).is_sign_negative());
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn int8_with_scales() {
        // 127 -127 0 64 | 1 -1 -128 0
        let message = pb::PackedEmbeddings {
            indices: vec![0, 1],
            tokens: vec![1, 1],
            dimensions: 4,
            r#type: pb::EmbeddingType::Int8 as i32,
            data: vec![0x7f, 0x81, 0x00, 0x40, 0x01, 0xff, 0x80, 0x00],
            scales: vec![0.5, 0.25],
        };
        let e = Embeddings::from_responses(&[packed(message.clone())], Some(2)).unwrap();
        assert_eq!(
            e.vectors,
            Vectors::Int8 {
                values: vec![vec![127, -127, 0, 64], vec![1, -1, -128, 0]],
                scales: vec![0.5, 0.25]
            }
        );
        assert_eq!(
            dequantize(&[127, -127, 0, 64], 0.5),
            [63.5, -63.5, 0.0, 32.0]
        );
        assert_eq!(
            e.to_f32(),
            [vec![63.5, -63.5, 0.0, 32.0], vec![0.25, -0.25, -32.0, 0.0]]
        );
        let one_scale = pb::PackedEmbeddings {
            scales: vec![0.5],
            ..message
        };
        let err = Embeddings::from_responses(&[packed(one_scale)], Some(2)).unwrap_err();
        assert!(err.to_string().contains("scales"), "{err}");
    }

    #[test]
    fn ubinary_with_dimensions_not_a_multiple_of_eight() {
        // 10 bits a vector in 2 bytes, the first value in the most significant bit, unused
        // low bits zero
        let data = vec![0b1011_0000, 0b0100_0000, 0b0111_1111, 0b1100_0000];
        let message = pb::PackedEmbeddings {
            indices: vec![0, 1],
            tokens: vec![3, 3],
            dimensions: 10,
            r#type: pb::EmbeddingType::Ubinary as i32,
            data: data.clone(),
            scales: vec![],
        };
        let e = Embeddings::from_responses(&[packed(message.clone())], Some(2)).unwrap();
        assert_eq!(e.dimensions, 10);
        let Vectors::Ubinary(bits) = &e.vectors else {
            panic!("{:?}", e.vectors)
        };
        assert_eq!(bits, &[data[..2].to_vec(), data[2..].to_vec()]);
        assert_eq!(unpack_bits(&bits[0], 10), [1, 0, 1, 1, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            e.to_f32()[1],
            [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
        );
        assert_eq!(hamming(&bits[0], &bits[1]), 7);
        assert_eq!(hamming(&bits[0], &bits[0]), 0);
        let short = pb::PackedEmbeddings {
            data: data[..3].to_vec(),
            ..message
        };
        let err = Embeddings::from_responses(&[packed(short)], Some(2)).unwrap_err();
        assert!(err.to_string().contains("bytes of data"), "{err}");
    }

    #[test]
    fn messages_gathered_in_input_order_and_malformed_ones_refused() {
        let message = |indices: Vec<i32>, tokens: Vec<i32>, values: &[f32]| {
            packed(pb::PackedEmbeddings {
                indices,
                tokens,
                dimensions: 1,
                r#type: pb::EmbeddingType::Float32 as i32,
                data: f32le(values),
                scales: vec![],
            })
        };
        let responses = [
            message(vec![2, 0], vec![7, 5], &[3.0, 1.0]),
            message(vec![1], vec![6], &[2.0]),
        ];
        let e = Embeddings::from_responses(&responses, Some(3)).unwrap();
        assert_eq!(
            e.vectors,
            Vectors::Float32(vec![vec![1.0], vec![2.0], vec![3.0]])
        );
        assert_eq!(
            (e.tokens.clone(), e.messages, e.len()),
            (vec![5, 6, 7], 2, 3)
        );
        let missing = Embeddings::from_responses(&responses, Some(4)).unwrap_err();
        assert!(
            missing.to_string().contains("no vector for input 3"),
            "{missing}"
        );
        let twice = [
            responses[0].clone(),
            responses[1].clone(),
            responses[1].clone(),
        ];
        assert!(Embeddings::from_responses(&twice, Some(3)).is_err());
        let plain = pb::EmbedResponse {
            index: 0,
            embedding: vec![1.0],
            ..Default::default()
        };
        assert!(Embeddings::from_responses(&[plain], Some(1)).is_err());
        let mixed = packed(pb::PackedEmbeddings {
            indices: vec![1],
            dimensions: 1,
            r#type: pb::EmbeddingType::Int8 as i32,
            data: vec![1],
            scales: vec![1.0],
            ..Default::default()
        });
        let err = Embeddings::from_responses(&[responses[0].clone(), mixed], Some(3)).unwrap_err();
        assert!(err.to_string().contains("after"), "{err}");
        let status = Status::from(err);
        assert_eq!(status.code(), tonic::Code::Internal);
    }

    #[test]
    fn request_builders() {
        let request = pb::EmbedRequest::new(["a"]).with_packed(pb::EmbeddingType::Ubinary);
        assert!(request.packed);
        assert_eq!(request.embedding_type(), pb::EmbeddingType::Ubinary);
        let unpacked = pb::EmbedRequest::new(["a"]).with_embedding_type(pb::EmbeddingType::Int8);
        assert!(!unpacked.packed);
        assert_eq!(unpacked.embedding_type(), pb::EmbeddingType::Int8);
    }
}
