//! The file on the operator's machine: its size and SHA-256 (read once, in
//! pieces), the SHA-256 of a prefix (to trust what a host already holds),
//! and its bytes from an offset, one piece at a time. Nothing here holds
//! more than one piece of the file, whatever its size.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::localfile::{Kind, open_regular};

/// The piece read from disk at a time while hashing.
const READ: usize = 1 << 20;

/// A file to push, as found when it was hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    pub path: PathBuf,
    pub size: u64,
    /// Lower-case hex.
    pub sha256: String,
}

/// Hash up to `len` bytes of `f` from where it stands; how many were read.
fn hash_into(f: &mut std::fs::File, len: u64, h: &mut Sha256) -> std::io::Result<u64> {
    let mut buf = vec![0u8; READ];
    let mut left = len;
    while left > 0 {
        let want = left.min(READ as u64) as usize;
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(len - left)
}

impl Local {
    /// Size and SHA-256 of a regular file (a device or a pipe is refused
    /// before a byte is read).
    pub fn of(path: &Path) -> std::io::Result<Local> {
        let mut f = open_regular(path, Kind::Push)?;
        let size = f.metadata()?.len();
        let mut h = Sha256::new();
        let read = hash_into(&mut f, size, &mut h)?;
        if read != size {
            return Err(std::io::Error::other(format!(
                "it shrank from {size} to {read} bytes while being read"
            )));
        }
        Ok(Local {
            path: path.to_path_buf(),
            size,
            sha256: crate::hash::hex(&h.finalize()),
        })
    }

    /// The SHA-256 of the file's first `len` bytes, `None` when it is
    /// shorter.
    pub fn prefix_sha256(&self, len: u64) -> std::io::Result<Option<String>> {
        let mut f = open_regular(&self.path, Kind::Push)?;
        let mut h = Sha256::new();
        Ok((hash_into(&mut f, len, &mut h)? == len).then(|| crate::hash::hex(&h.finalize())))
    }

    /// The file from `offset` on, in pieces of `piece` bytes (the last one
    /// shorter), as they go on the wire. One piece is read when the
    /// transport asks for it: what is held is one piece. A file that
    /// changed since it was hashed ends in an error here or in the host's
    /// hash check.
    pub fn pieces(&self, offset: u64, piece: usize) -> crate::transport::StreamInput<'static> {
        use futures::StreamExt;
        let path = self.path.clone();
        let size = self.size;
        let opened = open_regular(&path, Kind::Push).and_then(|mut f| {
            f.seek(SeekFrom::Start(offset))?;
            Ok(f)
        });
        futures::stream::unfold((opened, offset), move |(file, at)| {
            let path = path.clone();
            async move {
                let mut f = match file {
                    Ok(f) => f,
                    Err(e) => {
                        // said once, then the stream ends
                        let err = std::io::Error::new(e.kind(), e.to_string());
                        return Some((Err(err), (Err(e), size)));
                    }
                };
                if at >= size {
                    return None;
                }
                let want = (size - at).min(piece as u64) as usize;
                let mut buf = vec![0u8; want];
                let read = tokio::task::block_in_place(|| f.read_exact(&mut buf));
                match read {
                    Ok(()) => Some((Ok(buf), (Ok(f), at + want as u64))),
                    Err(e) => {
                        let msg = format!(
                            "{}: {e} (did it change since it was hashed?)",
                            path.display()
                        );
                        Some((Err(std::io::Error::other(msg)), (Err(e), size)))
                    }
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn file(bytes: &[u8]) -> (tempfile::TempDir, Local) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.bin");
        std::fs::write(&p, bytes).unwrap();
        let l = Local::of(&p).unwrap();
        (d, l)
    }

    #[test]
    fn size_hash_and_prefix_hash_of_a_file() {
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (_d, l) = file(&bytes);
        assert_eq!(l.size, 3_000_000);
        assert_eq!(l.sha256, crate::hash::sha256_bytes(&bytes));
        assert_eq!(
            l.prefix_sha256(1_234_567).unwrap().unwrap(),
            crate::hash::sha256_bytes(&bytes[..1_234_567])
        );
        assert_eq!(l.prefix_sha256(3_000_001).unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn pieces_from_an_offset_cover_the_rest_once() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 13) as u8).collect();
        let (_d, l) = file(&bytes);
        let got: Vec<Vec<u8>> = l
            .pieces(30_000, 32 * 1024)
            .map(|p| p.unwrap())
            .collect()
            .await;
        assert_eq!(
            got.iter().map(Vec::len).collect::<Vec<_>>(),
            [32768, 32768, 4464]
        );
        assert_eq!(got.concat(), bytes[30_000..]);
        assert!(l.pieces(100_000, 1024).next().await.is_none());
    }

    #[test]
    fn a_device_is_refused_before_it_is_read() {
        let e = Local::of(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
    }
}
