//! Lists and reads input files: local paths (files or folders, recursively)
//! and object-store URLs (`s3://bucket/prefix`, `file:///path`).

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::{source_err, Result};

/// One input file.
#[derive(Clone)]
pub struct SourceFile {
    /// How the file is named in messages: the path or URL the user gave.
    pub name: String,
    pub size: u64,
    /// Whether the user named the file itself (not a folder holding it).
    pub explicit: bool,
    loc: Loc,
}

#[derive(Clone)]
enum Loc {
    Local(PathBuf),
    Object(Arc<dyn ObjectStore>, Path),
    /// Fetched already (`culprit collect`): the bytes themselves.
    Memory(Bytes),
}

impl SourceFile {
    /// A file already in memory (a document fetched over HTTP), named
    /// `name` in messages and read as if the user had named it.
    pub fn from_bytes(name: impl Into<String>, bytes: Bytes) -> SourceFile {
        SourceFile {
            name: name.into(),
            size: bytes.len() as u64,
            explicit: true,
            loc: Loc::Memory(bytes),
        }
    }

    /// The file's path when it is a local file (read in chunks, never whole).
    pub fn local_path(&self) -> Option<&FsPath> {
        match &self.loc {
            Loc::Local(p) => Some(p),
            _ => None,
        }
    }

    /// The SHA-256 of a local file's bytes, read a MiB at a time (the
    /// file is not held): what names the file in the manifest; and the
    /// number of bytes hashed.
    pub fn digest_file(path: &FsPath) -> std::io::Result<(String, u64)> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        Ok((hex::encode(hasher.finish()), size))
    }

    /// [`SourceFile::digest_file`]'s error, named by the file.
    pub fn digest_error(&self, e: std::io::Error) -> crate::error::IngestError {
        source_err(&self.name, format!("cannot read: {e}"))
    }

    /// Reads the whole file.
    pub async fn read(&self) -> Result<Bytes> {
        match &self.loc {
            Loc::Local(p) => std::fs::read(p)
                .map(Bytes::from)
                .map_err(|e| source_err(&self.name, format!("cannot read: {e}"))),
            Loc::Memory(bytes) => Ok(bytes.clone()),
            Loc::Object(store, path) => {
                let get = store
                    .get(path)
                    .await
                    .map_err(|e| source_err(&self.name, format!("cannot read: {e}")))?;
                get.bytes()
                    .await
                    .map_err(|e| source_err(&self.name, format!("cannot read: {e}")))
            }
        }
    }
}

/// Expands the inputs into files, sorted by name within each input.
/// Hidden files and culprit's own `_culprit` folders are skipped.
pub async fn list_sources(inputs: &[String]) -> Result<Vec<SourceFile>> {
    let mut out = Vec::new();
    for input in inputs {
        if let Some(rest) = input.strip_prefix("file://") {
            list_local(input, FsPath::new(rest), &mut out)?;
        } else if input.starts_with("s3://") || input.starts_with("s3a://") {
            list_s3(input, &mut out).await?;
        } else if input.contains("://") {
            return Err(source_err(
                input,
                "unsupported URL scheme (use a path, file:// or s3://)",
            ));
        } else {
            list_local(input, FsPath::new(input), &mut out)?;
        }
    }
    Ok(out)
}

fn list_local(input: &str, path: &FsPath, out: &mut Vec<SourceFile>) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| source_err(input, e))?;
    if meta.is_file() {
        out.push(SourceFile {
            name: input.to_string(),
            size: meta.len(),
            explicit: true,
            loc: Loc::Local(path.to_path_buf()),
        });
        return Ok(());
    }
    let mut stack = vec![path.to_path_buf()];
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| source_err(&dir.display().to_string(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| source_err(&dir.display().to_string(), e))?;
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name == "_culprit" {
                continue;
            }
            let p = entry.path();
            let ft = entry
                .file_type()
                .map_err(|e| source_err(&p.display().to_string(), e))?;
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                found.push(SourceFile {
                    name: p.display().to_string(),
                    size,
                    explicit: false,
                    loc: Loc::Local(p),
                });
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    out.extend(found);
    Ok(())
}

async fn list_s3(input: &str, out: &mut Vec<SourceFile>) -> Result<()> {
    let url = url::Url::parse(input).map_err(|e| source_err(input, e))?;
    let bucket = url
        .host_str()
        .ok_or_else(|| source_err(input, "no bucket name"))?;
    let store: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| source_err(input, e))?,
    );
    let prefix = Path::from(url.path().trim_matches('/'));
    let mut metas: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| source_err(input, e))?;
    metas.sort_by(|a, b| a.location.cmp(&b.location));
    let single = metas.len() == 1 && metas[0].location == prefix;
    for m in metas {
        let hidden = m
            .location
            .parts()
            .any(|p| p.as_ref().starts_with('.') || p.as_ref() == "_culprit");
        if hidden {
            continue;
        }
        out.push(SourceFile {
            name: format!("s3://{bucket}/{}", m.location),
            size: m.size,
            explicit: single,
            loc: Loc::Object(store.clone(), m.location),
        });
    }
    if out.is_empty() {
        return Err(source_err(input, "no objects under this prefix"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::SourceFile;

    /// A file's digest is its SHA-256 (what names it in stores written by
    /// every earlier culprit): checked against FIPS 180-2's examples and
    /// against coreutils' `sha256sum` of a file read in several chunks.
    #[test]
    fn a_files_digest_is_its_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let abc = dir.path().join("abc");
        std::fs::write(&abc, b"abc").unwrap();
        assert_eq!(
            SourceFile::digest_file(&abc).unwrap(),
            (
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".to_string(),
                3
            )
        );
        let a = dir.path().join("a");
        std::fs::write(&a, vec![b'a'; 1_000_000]).unwrap();
        assert_eq!(
            SourceFile::digest_file(&a).unwrap(),
            (
                "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0".to_string(),
                1_000_000
            )
        );
        // Three whole 1 MiB reads and a fourth short one; coreutils reads
        // the same bytes from its standard input.
        let big = dir.path().join("big");
        let bytes: Vec<u8> = (0..(3 << 20) + 12_345u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&big, &bytes).unwrap();
        let out = std::process::Command::new("sha256sum")
            .stdin(std::fs::File::open(&big).unwrap())
            .output()
            .expect("coreutils' sha256sum");
        assert!(out.status.success(), "sha256sum: {out:?}");
        let expected = String::from_utf8(out.stdout).unwrap();
        let expected = expected.split_whitespace().next().unwrap();
        assert_eq!(
            SourceFile::digest_file(&big).unwrap(),
            (expected.to_string(), bytes.len() as u64)
        );
    }
}
