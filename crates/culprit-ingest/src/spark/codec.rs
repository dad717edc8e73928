//! The compression codecs Spark writes event logs with
//! (`spark.eventLog.compression.codec`), told apart by their magic bytes:
//!
//! - `lz4`: lz4-java's `LZ4BlockOutputStream` framing (not the LZ4 frame
//!   format): blocks of `"LZ4Block"`, a token byte, compressed length,
//!   decompressed length and an XXHash32 checksum (little endian), then the
//!   raw LZ4 block;
//! - `snappy`: snappy-java's `SnappyOutputStream` framing (not the snappy
//!   framing format): the header `\x82SNAPPY\0`, two big-endian version
//!   words, then chunks of a big-endian length and a raw snappy block;
//! - `lzf`: compress-lzf's chunks (`ZV`, type 0 plain or 1 compressed);
//! - `zstd`: standard zstd frames;
//! - gzip, which Databricks uses for its rolled logs.
//!
//! An in-progress log may end inside a block: decoding stops there and
//! reports the stream as truncated, never as an error.

use std::io::Read;

/// A codec of an event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Plain,
    Lz4,
    Snappy,
    Lzf,
    Zstd,
    Gzip,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::Plain => "none",
            Codec::Lz4 => "lz4",
            Codec::Snappy => "snappy",
            Codec::Lzf => "lzf",
            Codec::Zstd => "zstd",
            Codec::Gzip => "gzip",
        }
    }

    /// The codec whose magic bytes start `bytes`.
    pub fn sniff(bytes: &[u8]) -> Codec {
        if bytes.starts_with(LZ4_MAGIC) {
            Codec::Lz4
        } else if bytes.starts_with(SNAPPY_MAGIC) {
            Codec::Snappy
        } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Codec::Zstd
        } else if bytes.starts_with(&[0x1f, 0x8b]) {
            Codec::Gzip
        } else if bytes.len() >= 3 && bytes[0] == b'Z' && bytes[1] == b'V' && bytes[2] <= 1 {
            Codec::Lzf
        } else {
            Codec::Plain
        }
    }

    /// The codec a file name's extension names, as Spark names them.
    pub fn from_extension(name: &str) -> Option<Codec> {
        let name = name.strip_suffix(".inprogress").unwrap_or(name);
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "lz4" => Some(Codec::Lz4),
            "snappy" => Some(Codec::Snappy),
            "lzf" => Some(Codec::Lzf),
            "zstd" | "zst" => Some(Codec::Zstd),
            "gz" => Some(Codec::Gzip),
            _ => None,
        }
    }
}

const LZ4_MAGIC: &[u8] = b"LZ4Block";
const SNAPPY_MAGIC: &[u8] = b"\x82SNAPPY\x00";

/// Decoded bytes and whether the stream ended early (inside a block).
pub struct Decoded {
    pub bytes: Vec<u8>,
    /// Why the stream stopped before its end, if it did.
    pub truncated: Option<String>,
}

/// The error of a stream that decodes to more than `max` bytes.
pub fn over_cap(max: usize) -> String {
    format!(
        "decodes to more than {} MiB (the cap per file; raise it with --max-decoded-mb)",
        max >> 20
    )
}

/// Checks, before it is written, that `n` more bytes keep the output of
/// length `len` within `max`.
fn room(len: usize, n: usize, max: usize) -> Result<(), String> {
    match len.checked_add(n) {
        Some(total) if total <= max => Ok(()),
        _ => Err(over_cap(max)),
    }
}

/// A first reservation: what the input suggests, never more than the cap.
fn reserve(input: &[u8], max: usize) -> Vec<u8> {
    Vec::with_capacity(input.len().saturating_mul(4).min(max).min(1 << 26))
}

/// Decodes a whole compressed stream (`Plain` is the caller's: no copy)
/// into at most `max` bytes: each decoder checks the cap before it writes,
/// so a bomb costs `max` bytes at most, never its full size.
pub fn decode(codec: Codec, input: &[u8], max: usize) -> Result<Decoded, String> {
    match codec {
        Codec::Plain => Err("a plain stream needs no decoding".into()),
        Codec::Lz4 => lz4_java(input, max),
        Codec::Snappy => snappy_java(input, max),
        Codec::Lzf => lzf(input, max),
        Codec::Zstd => read_to_end(
            zstd::stream::read::Decoder::new(input).map_err(|e| e.to_string())?,
            max,
        ),
        Codec::Gzip => read_to_end(flate2::read::MultiGzDecoder::new(input), max),
    }
}

/// Reads a streaming decoder to its end; an error after some output is a
/// truncated stream (an in-progress log), an error before any is not.
pub(crate) fn read_to_end(mut r: impl Read, max: usize) -> Result<Decoded, String> {
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match r.read(&mut buf) {
            Ok(0) => {
                return Ok(Decoded {
                    bytes,
                    truncated: None,
                })
            }
            Ok(n) => {
                room(bytes.len(), n, max)?;
                bytes.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if bytes.is_empty() => return Err(e.to_string()),
            Err(e) => {
                return Ok(Decoded {
                    bytes,
                    truncated: Some(e.to_string()),
                })
            }
        }
    }
}

fn truncated(bytes: Vec<u8>, why: &str) -> Result<Decoded, String> {
    Ok(Decoded {
        bytes,
        truncated: Some(why.to_string()),
    })
}

/// lz4-java `LZ4BlockInputStream`.
fn lz4_java(input: &[u8], max: usize) -> Result<Decoded, String> {
    const HEADER: usize = 8 + 1 + 4 + 4 + 4;
    const RAW: u8 = 0x10;
    const LZ4: u8 = 0x20;
    const SEED: u32 = 0x9747_b28c;
    let mut out = reserve(input, max);
    let mut pos = 0;
    let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    while pos < input.len() {
        if input.len() - pos < HEADER {
            return truncated(out, "the lz4 stream ends inside a block header");
        }
        let h = &input[pos..pos + HEADER];
        if &h[..8] != LZ4_MAGIC {
            return Err(format!("not an lz4-java block at byte {pos}"));
        }
        let method = h[8] & 0xf0;
        let (clen, dlen) = (le(&h[9..13]), le(&h[13..17]));
        let checksum = le(&h[17..21]) as u32;
        pos += HEADER;
        if dlen == 0 && clen == 0 {
            // The end mark of one stream; another may follow (concatenated).
            continue;
        }
        if dlen > 1 << 26 || clen > 1 << 26 {
            return Err(format!(
                "lz4-java block at byte {} is too large",
                pos - HEADER
            ));
        }
        if input.len() - pos < clen {
            return truncated(out, "the lz4 stream ends inside a block");
        }
        let block = &input[pos..pos + clen];
        let start = out.len();
        room(start, dlen.max(clen), max)?;
        match method {
            RAW => out.extend_from_slice(block),
            LZ4 => {
                out.resize(start + dlen, 0);
                let n = lz4_flex::block::decompress_into(block, &mut out[start..])
                    .map_err(|e| format!("lz4 block at byte {}: {e}", pos - HEADER))?;
                out.truncate(start + n);
            }
            m => return Err(format!("unknown lz4-java block method {m:#x}")),
        }
        if out.len() - start != dlen {
            return Err(format!(
                "lz4-java block at byte {} has the wrong length",
                pos - HEADER
            ));
        }
        let sum = twox_hash::XxHash32::oneshot(SEED, &out[start..]) & 0x0fff_ffff;
        if sum != checksum {
            return Err(format!(
                "lz4-java block at byte {}: checksum mismatch",
                pos - HEADER
            ));
        }
        pos += clen;
    }
    Ok(Decoded {
        bytes: out,
        truncated: None,
    })
}

/// snappy-java `SnappyInputStream` (streams may be concatenated).
fn snappy_java(input: &[u8], max: usize) -> Result<Decoded, String> {
    let mut out = reserve(input, max);
    let mut pos = 0;
    let mut dec = snap::raw::Decoder::new();
    while pos < input.len() {
        if input[pos..].starts_with(SNAPPY_MAGIC) {
            if input.len() - pos < 16 {
                return truncated(out, "the snappy stream ends inside its header");
            }
            pos += 16;
            continue;
        }
        if input.len() - pos < 4 {
            return truncated(out, "the snappy stream ends inside a chunk length");
        }
        let len = u32::from_be_bytes([input[pos], input[pos + 1], input[pos + 2], input[pos + 3]])
            as usize;
        pos += 4;
        if input.len() - pos < len {
            return truncated(out, "the snappy stream ends inside a chunk");
        }
        let chunk = &input[pos..pos + len];
        let n = snap::raw::decompress_len(chunk)
            .map_err(|e| format!("snappy chunk at byte {}: {e}", pos - 4))?;
        let start = out.len();
        // The length is the chunk's own claim (up to 4 GiB): checked first.
        room(start, n, max)?;
        out.resize(start + n, 0);
        dec.decompress(chunk, &mut out[start..])
            .map_err(|e| format!("snappy chunk at byte {}: {e}", pos - 4))?;
        pos += len;
    }
    Ok(Decoded {
        bytes: out,
        truncated: None,
    })
}

/// compress-lzf `LZFInputStream`.
fn lzf(input: &[u8], max: usize) -> Result<Decoded, String> {
    let mut out = reserve(input, max);
    let mut pos = 0;
    while pos < input.len() {
        if input.len() - pos < 5 {
            return truncated(out, "the lzf stream ends inside a chunk header");
        }
        if input[pos] != b'Z' || input[pos + 1] != b'V' {
            return Err(format!("not an lzf chunk at byte {pos}"));
        }
        let kind = input[pos + 2];
        let len = u16::from_be_bytes([input[pos + 3], input[pos + 4]]) as usize;
        match kind {
            0 => {
                pos += 5;
                if input.len() - pos < len {
                    return truncated(out, "the lzf stream ends inside a chunk");
                }
                room(out.len(), len, max)?;
                out.extend_from_slice(&input[pos..pos + len]);
                pos += len;
            }
            1 => {
                if input.len() - pos < 7 {
                    return truncated(out, "the lzf stream ends inside a chunk header");
                }
                let ulen = u16::from_be_bytes([input[pos + 5], input[pos + 6]]) as usize;
                pos += 7;
                if input.len() - pos < len {
                    return truncated(out, "the lzf stream ends inside a chunk");
                }
                let at = pos - 7;
                room(out.len(), ulen, max)?;
                lzf_block(&input[pos..pos + len], ulen, &mut out)
                    .map_err(|e| format!("lzf chunk at byte {at}: {e}"))?;
                pos += len;
            }
            k => return Err(format!("unknown lzf chunk type {k} at byte {pos}")),
        }
    }
    Ok(Decoded {
        bytes: out,
        truncated: None,
    })
}

/// One LZF block (Marc Lehmann's format, as compress-lzf writes it).
fn lzf_block(src: &[u8], ulen: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    let mut i = 0;
    while i < src.len() {
        let ctrl = src[i] as usize;
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            let lit = src.get(i..i + n).ok_or("literal run past the end")?;
            if out.len() - start + n > ulen {
                return Err(format!("decodes past the {ulen} bytes its header says"));
            }
            out.extend_from_slice(lit);
            i += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *src.get(i).ok_or("match length past the end")? as usize;
                i += 1;
            }
            let low = *src.get(i).ok_or("match offset past the end")? as usize;
            i += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            if back > out.len() - start {
                return Err("match before the start of the block".into());
            }
            let from = out.len() - back;
            if out.len() - start + len + 2 > ulen {
                return Err(format!("decodes past the {ulen} bytes its header says"));
            }
            for k in 0..len + 2 {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    if out.len() - start != ulen {
        return Err(format!(
            "decoded {} bytes, the header says {ulen}",
            out.len() - start
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lzf_literals_and_matches() {
        // "abcabcabc": 3 literals, then a match of 6 bytes 3 back.
        let block = [2u8, b'a', b'b', b'c', (4 << 5), 2];
        let mut stream = vec![b'Z', b'V', 1, 0, block.len() as u8, 0, 9];
        stream.extend_from_slice(&block);
        stream.extend_from_slice(&[b'Z', b'V', 0, 0, 2, b'x', b'y']);
        let d = lzf(&stream, 1 << 20).unwrap();
        assert_eq!(d.bytes, b"abcabcabcxy");
        assert!(d.truncated.is_none());
        let cut = lzf(&stream[..stream.len() - 1], 1 << 20).unwrap();
        assert_eq!(cut.bytes, b"abcabcabc");
        assert!(cut.truncated.is_some());
    }

    #[test]
    fn sniffs_magic() {
        assert_eq!(Codec::sniff(b"LZ4Block\x25"), Codec::Lz4);
        assert_eq!(Codec::sniff(b"\x82SNAPPY\x00\x00"), Codec::Snappy);
        assert_eq!(Codec::sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]), Codec::Zstd);
        assert_eq!(Codec::sniff(b"ZV\x01"), Codec::Lzf);
        assert_eq!(Codec::sniff(b"{\"Event\""), Codec::Plain);
        assert_eq!(Codec::from_extension("a.lz4.inprogress"), Some(Codec::Lz4));
    }
}
