//! OP_COMPRESSED (2012): another message, compressed with snappy, zlib or
//! zstd. Inflated only on the analysis side, after the declared size has been
//! checked against the message size limit, and never past that size: a
//! "compression bomb" or a lying size is an error, not an allocation.

use super::{read_i32, Header, OpCode, WireError, HEADER_LEN, MAX_MESSAGE_SIZE};
use std::io::Read;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Compressor {
    Noop,
    Snappy,
    Zlib,
    Zstd,
}

impl Compressor {
    /// Every compressor, `noop` first.
    pub const ALL: [Compressor; 4] = [
        Compressor::Noop,
        Compressor::Snappy,
        Compressor::Zlib,
        Compressor::Zstd,
    ];

    pub fn from_id(id: u8) -> Option<Compressor> {
        Some(match id {
            0 => Compressor::Noop,
            1 => Compressor::Snappy,
            2 => Compressor::Zlib,
            3 => Compressor::Zstd,
            _ => return None,
        })
    }

    pub fn id(self) -> u8 {
        match self {
            Compressor::Noop => 0,
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    /// How many bytes one byte of this compressor's input can inflate to,
    /// at most, with margin: snappy's densest copy (3 bytes → 64) is about
    /// 21×, deflate's 1,032×. zstd's run-length blocks have no useful bound;
    /// its output is only ever grown as it inflates (and stopped one byte
    /// past the declared size).
    pub fn max_inflation(self) -> Option<usize> {
        match self {
            Compressor::Noop => Some(1),
            Compressor::Snappy => Some(32),
            Compressor::Zlib => Some(1_100),
            Compressor::Zstd => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compressor::Noop => "noop",
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }
}

#[derive(Clone, Debug)]
pub struct OpCompressed<'a> {
    pub header: Header,
    pub original_opcode: OpCode,
    /// The size of the original message *without* its header.
    pub uncompressed_size: usize,
    pub compressor: Compressor,
    pub data: &'a [u8],
}

impl<'a> OpCompressed<'a> {
    /// Parses the OP_COMPRESSED envelope. Checks the original opcode, the
    /// compressor id and that the declared size is within the message limit.
    pub fn parse(frame: &'a [u8]) -> Result<OpCompressed<'a>, WireError> {
        let header = Header::parse_frame(frame)?;
        let original = read_i32(frame, HEADER_LEN).ok_or(WireError::Truncated("originalOpcode"))?;
        let size =
            read_i32(frame, HEADER_LEN + 4).ok_or(WireError::Truncated("uncompressedSize"))?;
        let id = *frame
            .get(HEADER_LEN + 8)
            .ok_or(WireError::Truncated("compressorId"))?;
        let original_opcode =
            OpCode::from_i32(original).ok_or(WireError::UnknownOpCode(original))?;
        if original_opcode == OpCode::Compressed {
            return Err(WireError::BadCompressed(
                "compressed message inside a compressed message",
            ));
        }
        if size < 0 || size as usize > MAX_MESSAGE_SIZE - HEADER_LEN {
            return Err(WireError::BadCompressed(
                "declared uncompressed size out of range",
            ));
        }
        let compressor = Compressor::from_id(id).ok_or(WireError::UnknownCompressor(id))?;
        Ok(OpCompressed {
            header,
            original_opcode,
            uncompressed_size: size as usize,
            compressor,
            data: &frame[HEADER_LEN + 9..],
        })
    }

    /// Inflates the payload and rebuilds the original message (header with
    /// the original opcode and length, then the body), ready for parsing.
    /// Fails if the data inflates to anything but the declared size.
    pub fn decompress(&self) -> Result<Vec<u8>, WireError> {
        let declared = self.uncompressed_size;
        // A size no input of this length can inflate to is a lie, refused
        // before any memory is set aside for it: what decompression may
        // allocate is bounded by the bytes actually present.
        if let Some(ratio) = self.compressor.max_inflation() {
            let most = self.data.len().saturating_mul(ratio).saturating_add(1024);
            if declared > most {
                return Err(WireError::BadCompressed(
                    "declared size beyond what these compressed bytes can inflate to",
                ));
            }
        }
        // Room for what the input can plausibly give; more is grown only
        // as it actually inflates.
        let mut out =
            Vec::with_capacity(HEADER_LEN + declared.min(self.data.len().saturating_mul(64)));
        Header {
            message_length: (HEADER_LEN + declared) as i32,
            request_id: self.header.request_id,
            response_to: self.header.response_to,
            op_code: self.original_opcode.as_i32(),
        }
        .write(&mut out);
        let mismatch = |actual| WireError::SizeMismatch { declared, actual };
        match self.compressor {
            Compressor::Noop => {
                if self.data.len() != declared {
                    return Err(mismatch(self.data.len()));
                }
                out.extend_from_slice(self.data);
            }
            Compressor::Snappy => {
                // The snappy preamble states the output length: check it
                // before allocating anything for the output.
                let len = snap::raw::decompress_len(self.data)
                    .map_err(|_| WireError::BadCompressed("invalid snappy data"))?;
                if len != declared {
                    return Err(mismatch(len));
                }
                out.resize(HEADER_LEN + declared, 0);
                let n = snap::raw::Decoder::new()
                    .decompress(self.data, &mut out[HEADER_LEN..])
                    .map_err(|_| WireError::BadCompressed("invalid snappy data"))?;
                if n != declared {
                    return Err(mismatch(n));
                }
            }
            Compressor::Zlib => {
                let decoder = flate2::read::ZlibDecoder::new(self.data);
                read_bounded(decoder, declared, &mut out, "invalid zlib data")?;
            }
            Compressor::Zstd => {
                let decoder = zstd::stream::read::Decoder::with_buffer(self.data)
                    .map_err(|_| WireError::BadCompressed("invalid zstd data"))?;
                read_bounded(decoder, declared, &mut out, "invalid zstd data")?;
            }
        }
        Ok(out)
    }
}

impl OpCompressed<'_> {
    /// The first `max` bytes (at most) of the original message's body — the
    /// flag bits and the start of the command — inflating no more than
    /// needed for them: what the forwarding side reads of a compressed
    /// request to tell whether it is answered and how long it may take.
    /// Snappy's first bytes are a literal read in place; zlib inflates into
    /// a bounded reader; zstd uses one decoding context per thread, its
    /// window capped at 8 MiB (a frame that needs more is an error here).
    pub fn inflate_prefix(&self, max: usize) -> Result<Vec<u8>, WireError> {
        let max = max.min(self.uncompressed_size);
        let bad = |what| WireError::BadCompressed(what);
        match self.compressor {
            Compressor::Noop => Ok(self.data.get(..max).ok_or(bad("short noop data"))?.to_vec()),
            Compressor::Snappy => snappy_prefix(self.data, max).ok_or(bad("invalid snappy data")),
            Compressor::Zlib => {
                let mut out = Vec::with_capacity(max);
                flate2::bufread::ZlibDecoder::new(self.data)
                    .take(max as u64)
                    .read_to_end(&mut out)
                    .map_err(|_| bad("invalid zlib data"))?;
                Ok(out)
            }
            Compressor::Zstd => ZSTD_PREFIX.with(|cell| {
                let mut dctx = cell.borrow_mut();
                let mut out = Vec::with_capacity(max);
                zstd::stream::read::Decoder::with_context(self.data, &mut dctx)
                    .single_frame()
                    .take(max as u64)
                    .read_to_end(&mut out)
                    .map_err(|_| bad("invalid zstd data"))?;
                Ok(out)
            }),
        }
    }
}

thread_local! {
    /// The zstd context `inflate_prefix` reuses (creating one per message
    /// costs more than decoding a short prefix).
    static ZSTD_PREFIX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> = {
        let mut dctx = zstd::zstd_safe::DCtx::create();
        // 2^23 = 8 MiB of window at most per thread.
        let _ = dctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(23));
        std::cell::RefCell::new(dctx)
    };
}

/// The first `max` bytes of a raw snappy block, decoding its elements
/// (literals, and copies of what came before) only until that many bytes
/// are out. `None` if the data is not valid snappy that far.
fn snappy_prefix(data: &[u8], max: usize) -> Option<Vec<u8>> {
    // The preamble: the uncompressed length as a varint.
    let mut pos = 0;
    loop {
        let b = *data.get(pos)?;
        pos += 1;
        if b & 0x80 == 0 {
            break;
        }
        if pos >= 5 {
            return None;
        }
    }
    let mut out = Vec::with_capacity(max);
    let le = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize)
    };
    while out.len() < max && pos < data.len() {
        let tag = data[pos];
        pos += 1;
        let (len, offset) = match tag & 0b11 {
            0 => {
                let len = match tag >> 2 {
                    n @ 0..=59 => n as usize + 1,
                    n => {
                        // 60..63: the length - 1 in the next 1..4 bytes.
                        let bytes = (n - 59) as usize;
                        let raw = data.get(pos..pos + bytes)?;
                        pos += bytes;
                        le(raw) + 1
                    }
                };
                let literal = data.get(pos..pos.checked_add(len)?)?;
                pos += len;
                let room = max - out.len();
                out.extend_from_slice(&literal[..len.min(room)]);
                continue;
            }
            1 => {
                let low = *data.get(pos)? as usize;
                pos += 1;
                (
                    4 + ((tag >> 2) & 0b111) as usize,
                    ((tag as usize >> 5) << 8) | low,
                )
            }
            2 => {
                let raw = data.get(pos..pos + 2)?;
                pos += 2;
                ((tag >> 2) as usize + 1, le(raw))
            }
            _ => {
                let raw = data.get(pos..pos + 4)?;
                pos += 4;
                ((tag >> 2) as usize + 1, le(raw))
            }
        };
        if offset == 0 || offset > out.len() {
            return None;
        }
        for _ in 0..len.min(max - out.len()) {
            out.push(out[out.len() - offset]);
        }
    }
    Some(out)
}

/// Reads at most `declared + 1` bytes so a bomb is detected after one byte
/// too many, never after inflating it all.
fn read_bounded(
    reader: impl Read,
    declared: usize,
    out: &mut Vec<u8>,
    what: &'static str,
) -> Result<(), WireError> {
    let start = out.len();
    reader
        .take(declared as u64 + 1)
        .read_to_end(out)
        .map_err(|_| WireError::BadCompressed(what))?;
    let actual = out.len() - start;
    if actual != declared {
        // `actual` is `declared + 1` for a bomb: report it as "more than".
        return Err(WireError::SizeMismatch { declared, actual });
    }
    Ok(())
}

/// Compresses a whole message (header included) into an OP_COMPRESSED frame.
/// Used by tests and fixtures; the proxy itself never compresses.
pub fn compress(frame: &[u8], compressor: Compressor) -> std::io::Result<Vec<u8>> {
    let header = Header::parse(frame)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "short frame"))?;
    let body = &frame[HEADER_LEN..];
    let data = match compressor {
        Compressor::Noop => body.to_vec(),
        Compressor::Snappy => snap::raw::Encoder::new()
            .compress_vec(body)
            .map_err(std::io::Error::other)?,
        Compressor::Zlib => {
            use std::io::Write;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(body)?;
            e.finish()?
        }
        Compressor::Zstd => zstd::bulk::compress(body, 3)?,
    };
    let len = HEADER_LEN + 9 + data.len();
    let mut out = Vec::with_capacity(len);
    Header {
        message_length: len as i32,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: OpCode::Compressed.as_i32(),
    }
    .write(&mut out);
    out.extend_from_slice(&header.op_code.to_le_bytes());
    out.extend_from_slice(&(body.len() as i32).to_le_bytes());
    out.push(compressor.id());
    out.extend_from_slice(&data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg;
    use bson::rawdoc;

    fn sample() -> Vec<u8> {
        let body = rawdoc! {"find": "c", "filter": {"a": "x".repeat(300)}, "$db": "d"};
        op_msg::encode(11, 0, 0, body.as_bytes(), &[])
    }

    /// A 20-byte snappy message declaring 48 MB is refused from its sizes
    /// alone, before anything is allocated for it.
    #[test]
    fn impossible_declared_sizes_are_refused_before_allocating() {
        let mut m = compress(&sample(), Compressor::Snappy).unwrap();
        m[20..24].copy_from_slice(&47_000_000i32.to_le_bytes());
        let c = OpCompressed::parse(&m).unwrap();
        assert!(matches!(
            c.decompress(),
            Err(WireError::BadCompressed(m)) if m.contains("beyond what")
        ));
        // A real high ratio is within the bounds: a megabyte of zeros.
        let zeros = op_msg::encode(
            1,
            0,
            0,
            bson::rawdoc! {"z": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0; 1 << 20] }}
                .as_bytes(),
            &[],
        );
        for c in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let z = compress(&zeros, c).unwrap();
            assert_eq!(
                OpCompressed::parse(&z).unwrap().decompress().unwrap(),
                zeros,
                "{c:?}"
            );
        }
    }

    /// The prefix is the original body's first bytes, for every compressor
    /// and every prefix length, on data with repeats (snappy copies) and
    /// without; garbage gives an error, never a panic.
    #[test]
    fn a_prefix_is_the_start_of_the_body() {
        let repetitive = op_msg::encode(
            3,
            0,
            op_msg::MORE_TO_COME,
            rawdoc! {"insert": "c", "documents": [{"a": "ab".repeat(500)}], "$db": "d"}.as_bytes(),
            &[],
        );
        for frame in [sample(), repetitive] {
            for c in Compressor::ALL {
                let z = compress(&frame, c).unwrap();
                let env = OpCompressed::parse(&z).unwrap();
                for max in [0, 1, 4, 5, 64, 512, 100_000] {
                    let want = &frame[HEADER_LEN..(HEADER_LEN + max).min(frame.len())];
                    assert_eq!(env.inflate_prefix(max).unwrap(), want, "{c:?} {max}");
                }
            }
        }
        for c in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let mut z = compress(&sample(), c).unwrap();
            for b in z[HEADER_LEN + 9..].iter_mut() {
                *b = 0xff;
            }
            let _ = OpCompressed::parse(&z).unwrap().inflate_prefix(64);
        }
    }

    #[test]
    fn every_compressor_round_trips() {
        let frame = sample();
        for c in Compressor::ALL {
            let z = compress(&frame, c).unwrap();
            let parsed = OpCompressed::parse(&z).unwrap();
            assert_eq!(parsed.compressor, c);
            assert_eq!(parsed.original_opcode, OpCode::Msg);
            assert_eq!(parsed.decompress().unwrap(), frame, "{c:?}");
        }
    }

    #[test]
    fn lying_sizes_are_errors() {
        let frame = sample();
        for c in Compressor::ALL {
            for delta in [-1i32, 1, 1000] {
                let mut z = compress(&frame, c).unwrap();
                let declared = read_i32(&z, HEADER_LEN + 4).unwrap() + delta;
                z[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&declared.to_le_bytes());
                let parsed = OpCompressed::parse(&z).unwrap();
                assert!(
                    matches!(parsed.decompress(), Err(WireError::SizeMismatch { .. })),
                    "{c:?} {delta}"
                );
            }
        }
    }

    #[test]
    fn bomb_stops_at_declared_size() {
        // 40 MB of zeros compresses to a few kB; declare 1 kB.
        let zeros = vec![0u8; 40_000_000];
        let mut frame = Vec::new();
        Header {
            message_length: (HEADER_LEN + zeros.len()) as i32,
            request_id: 1,
            response_to: 0,
            op_code: 2013,
        }
        .write(&mut frame);
        frame.extend_from_slice(&zeros);
        for c in [Compressor::Zlib, Compressor::Zstd] {
            let mut z = compress(&frame, c).unwrap();
            z[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&1024i32.to_le_bytes());
            let err = OpCompressed::parse(&z).unwrap().decompress().unwrap_err();
            assert_eq!(
                err,
                WireError::SizeMismatch {
                    declared: 1024,
                    actual: 1025
                }
            );
        }
    }

    #[test]
    fn envelope_checks() {
        let frame = sample();
        let z = compress(&frame, Compressor::Snappy).unwrap();
        let mut bad = z.clone();
        bad[HEADER_LEN + 8] = 9;
        assert_eq!(
            OpCompressed::parse(&bad).unwrap_err(),
            WireError::UnknownCompressor(9)
        );
        let mut bad = z.clone();
        bad[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(OpCompressed::parse(&bad).is_err());
        let mut bad = z.clone();
        bad[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2012i32.to_le_bytes());
        assert!(OpCompressed::parse(&bad).is_err());
    }
}
