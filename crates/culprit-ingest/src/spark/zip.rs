//! Just enough of the zip format to read the History Server's download
//! (`/api/v1/applications/<app>/logs`: `eventLogs-<app>.zip`): stored and
//! deflated entries, sizes from the central directory (the writer streams,
//! so local headers carry none). Zip64 archives are refused.

use std::io::Read;

pub fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

fn u16le(b: &[u8], at: usize) -> Result<usize, String> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
        .ok_or_else(|| "the zip archive is cut short".to_string())
}

fn u32le(b: &[u8], at: usize) -> Result<usize, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
        .ok_or_else(|| "the zip archive is cut short".to_string())
}

/// The files of an archive, in archive order: (name, bytes).
/// The archive's entries, decoded; all of them together at most `max`
/// bytes (each entry's sizes are the archive's claims: checked first).
pub fn entries(bytes: &[u8], max: usize) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut total = 0usize;
    let tail = bytes.len().saturating_sub(65_557);
    let eocd = (tail..bytes.len().saturating_sub(21))
        .rev()
        .find(|&i| bytes[i..].starts_with(b"PK\x05\x06"))
        .ok_or("no zip end-of-central-directory record")?;
    let count = u16le(bytes, eocd + 10)?;
    let mut at = u32le(bytes, eocd + 16)?;
    if count == 0xffff || at == 0xffff_ffff {
        return Err("zip64 archives are not supported (unzip it first)".into());
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        if !bytes
            .get(at..)
            .is_some_and(|b| b.starts_with(b"PK\x01\x02"))
        {
            return Err("a broken zip central directory".into());
        }
        let method = u16le(bytes, at + 10)?;
        let csize = u32le(bytes, at + 20)?;
        let usize_ = u32le(bytes, at + 24)?;
        let (n, e, c) = (
            u16le(bytes, at + 28)?,
            u16le(bytes, at + 30)?,
            u16le(bytes, at + 32)?,
        );
        let local = u32le(bytes, at + 42)?;
        let name = String::from_utf8_lossy(
            bytes
                .get(at + 46..at + 46 + n)
                .ok_or("the zip archive is cut short")?,
        )
        .to_string();
        at += 46 + n + e + c;
        if name.ends_with('/') {
            continue;
        }
        if !bytes
            .get(local..)
            .is_some_and(|b| b.starts_with(b"PK\x03\x04"))
        {
            return Err(format!("zip entry {name}: no local header"));
        }
        let start = local + 30 + u16le(bytes, local + 26)? + u16le(bytes, local + 28)?;
        let data = bytes
            .get(start..start + csize)
            .ok_or_else(|| format!("zip entry {name} is cut short"))?;
        if total.saturating_add(usize_) > max {
            return Err(format!("zip entry {name}: {}", super::codec::over_cap(max)));
        }
        let content = match method {
            0 => data.to_vec(),
            8 => {
                // Read one byte past the entry's claimed size, so a longer
                // stream is caught without decoding all of it.
                let mut v = Vec::new();
                flate2::read::DeflateDecoder::new(data)
                    .take(usize_ as u64 + 1)
                    .read_to_end(&mut v)
                    .map_err(|e| format!("zip entry {name}: {e}"))?;
                v
            }
            m => {
                return Err(format!(
                    "zip entry {name}: compression method {m} is not supported"
                ))
            }
        };
        if content.len() != usize_ {
            return Err(format!("zip entry {name}: wrong size"));
        }
        total += content.len();
        out.push((name, content));
    }
    Ok(out)
}
