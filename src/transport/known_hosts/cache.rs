//! known_hosts files read once per run: every connection of a command
//! looks its host up in the same files (twice: to order the host key
//! algorithms, then to check the key), so each file is read and split into
//! lines once, each line's host field parsed once and its key decoded the
//! first time a lookup needs it. A file is read again when its metadata
//! (device, inode, length, modification and change times) differs from
//! when it was read: a key recorded by `--accept-new-host-keys`, or by
//! anyone else, is seen by the next lookup. Reading goes on a blocking
//! thread; a lookup over files as they were read runs in memory.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use russh::keys::ssh_key::known_hosts::{Entry, HostPatterns};

use super::{Known, names};
use crate::localfile::{self, Kind};
use crate::transport::TransportError;

/// What a file's metadata says about its content: equal stamps, same
/// bytes (a write changes the length or the times; a replacement the inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// A regular file's stamp; `None` for anything else (read every time,
    /// so that its error is the reader's).
    fn of(m: &std::fs::Metadata) -> Option<Stamp> {
        m.is_file().then(|| Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// One non-empty, non-comment line.
struct Line {
    no: usize,
    text: Box<str>,
    /// The host field (after the marker), `None` when it does not parse:
    /// then the whole line is parsed for each lookup and skipped if that
    /// fails too (as OpenSSH skips it).
    hosts: Option<HostPatterns>,
    /// The whole line, parsed the first time a lookup needs it.
    entry: OnceLock<Option<Entry>>,
}

impl Line {
    fn new(no: usize, text: &str) -> Line {
        let mut fields = text.split_ascii_whitespace();
        let field = match fields.next() {
            Some(m) if m.starts_with('@') => fields.next(),
            f => f,
        };
        Line {
            no,
            text: text.into(),
            hosts: field.and_then(|f| f.parse::<HostPatterns>().ok()),
            entry: OnceLock::new(),
        }
    }

    fn entry(&self) -> Option<&Entry> {
        self.entry
            .get_or_init(|| self.text.parse::<Entry>().ok())
            .as_ref()
    }
}

/// A file as it was read; `stamp` `None`: it did not exist.
struct File {
    stamp: Option<Stamp>,
    lines: Vec<Line>,
}

/// The files of one lookup as they are now.
pub struct Snapshot(Vec<(PathBuf, Arc<File>)>);

impl Snapshot {
    /// Every line that names `name`, in file order (what
    /// [`super::lookup`] finds in the files).
    pub fn lookup(&self, name: &str) -> Vec<Known> {
        let mut out = Vec::new();
        for (path, f) in &self.0 {
            for l in &f.lines {
                if l.hosts.as_ref().is_some_and(|h| !names(h, name)) {
                    continue;
                }
                if let Some(entry) = l.entry()
                    && names(entry.host_patterns(), name)
                {
                    out.push(Known {
                        file: path.clone(),
                        line: l.no,
                        entry: entry.clone(),
                    });
                }
            }
        }
        out
    }
}

/// The known_hosts files read so far in this run, shared by its
/// connections.
#[derive(Clone, Default)]
pub struct Cache {
    files: Arc<Mutex<HashMap<PathBuf, Arc<File>>>>,
}

/// The stamp `path` has now: `Ok(None)` when it does not exist, `Err` when
/// it must be read to know (not a regular file, or its metadata cannot be
/// read: the read gives the error).
fn stamp_now(path: &Path) -> Result<Option<Stamp>, ()> {
    match std::fs::metadata(path) {
        Ok(m) => Stamp::of(&m).map(Some).ok_or(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(_) => Err(()),
    }
}

impl Cache {
    /// The files as last read, if none has changed since (one `stat` per
    /// file, no read): what the runtime's thread may do.
    pub fn fresh(&self, files: &[PathBuf]) -> Option<Snapshot> {
        let held = self.files.lock().unwrap();
        let mut out = Vec::with_capacity(files.len());
        for p in files {
            let f = held.get(p)?;
            if stamp_now(p).ok()? != f.stamp {
                return None;
            }
            out.push((p.clone(), f.clone()));
        }
        Some(Snapshot(out))
    }

    /// The files as they are now, reading those that changed (blocking).
    pub fn load(&self, files: &[PathBuf]) -> Result<Snapshot, TransportError> {
        let mut out = Vec::with_capacity(files.len());
        for p in files {
            let known = self.files.lock().unwrap().get(p).cloned();
            let f = match known {
                Some(f) if stamp_now(p).is_ok_and(|s| s == f.stamp) => f,
                _ => {
                    let f = Arc::new(read(p)?);
                    self.files.lock().unwrap().insert(p.clone(), f.clone());
                    f
                }
            };
            out.push((p.clone(), f));
        }
        Ok(Snapshot(out))
    }

    /// The files as they are now: in memory when none changed, else read
    /// (crate::blocking: in place on one thread, else on the blocking pool).
    pub async fn snapshot(&self, files: Vec<PathBuf>) -> Result<Snapshot, TransportError> {
        if let Some(s) = self.fresh(&files) {
            return Ok(s);
        }
        let me = self.clone();
        crate::blocking::file_work(move || me.load(&files))
            .await
            .map_err(|e| TransportError::Setup(format!("reading known_hosts failed: {e}")))?
    }
}

/// Read one file; a missing file is empty. The stamp is the open file's,
/// taken before its bytes are read: a write during the read changes it, so
/// the next lookup reads the file again.
fn read(path: &Path) -> Result<File, TransportError> {
    let fail = |e: std::io::Error| {
        TransportError::Setup(format!("cannot read known_hosts {}: {e}", path.display()))
    };
    let f = match localfile::open_regular(path, Kind::KnownHosts) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(File {
                stamp: None,
                lines: Vec::new(),
            });
        }
        Err(e) => return Err(fail(e)),
    };
    let stamp = f.metadata().map_err(fail)?;
    let mut bytes = Vec::new();
    f.take(Kind::KnownHosts.max() + 1)
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > Kind::KnownHosts.max() {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it grew past the most kwinctl reads for a known_hosts file while being read",
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not UTF-8 text",
        ))
    })?;
    let lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(no, l)| Line::new(no, l))
        .collect();
    Ok(File {
        stamp: Stamp::of(&stamp),
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkLc8WgqEjTYqi0yBkJYHP0zTk0J6vdBCzDqMwCV4Bo";

    fn lines(k: &[Known]) -> Vec<(PathBuf, usize)> {
        k.iter().map(|k| (k.file.clone(), k.line)).collect()
    }

    /// The cache finds what a fresh read of the files finds, for every
    /// name, markers, patterns, hashed names and unparsable lines included.
    #[test]
    fn finds_what_reading_the_files_finds() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::write(
            &a,
            format!(
                "10.0.0.1 {KEY}\n# comment\n\n10.0.0.2 {KEY}\n@cert-authority 10.0.0.* {KEY}\n\
                 @revoked 10.0.0.9,10.0.0.2 {KEY}\n10.0.0.2 not-a-key\n10.0.0.*,!10.0.0.2 {KEY}\n\
                 [web?]:2222 {KEY}\n"
            ),
        )
        .unwrap();
        let key: russh::keys::PublicKey = KEY.parse().unwrap();
        super::super::learn(&b, "10.0.0.3", &key, true).unwrap();
        let files = vec![a, b, d.path().join("missing")];
        let cache = Cache::default();
        let snap = cache.load(&files).unwrap();
        for name in [
            "10.0.0.1",
            "10.0.0.2",
            "10.0.0.3",
            "10.0.0.9",
            "[web1]:2222",
            "web1",
            "other",
        ] {
            let want = super::super::lookup(&files, name).unwrap();
            assert_eq!(lines(&snap.lookup(name)), lines(&want), "{name}");
        }
        // the hashed line of the second file, after the first file's
        assert_eq!(snap.lookup("10.0.0.3").last().unwrap().file, files[1]);
        assert!(cache.fresh(&files).is_some());
    }

    /// A key appended (as --accept-new-host-keys appends it), a file
    /// replaced, created or removed: the next lookup sees it.
    #[test]
    fn a_changed_file_is_read_again() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("kh");
        let files = vec![f.clone()];
        let cache = Cache::default();
        // missing, then created
        assert!(cache.load(&files).unwrap().lookup("10.0.0.1").is_empty());
        assert!(cache.fresh(&files).is_some());
        std::fs::write(&f, format!("10.0.0.1 {KEY}\n")).unwrap();
        assert!(cache.fresh(&files).is_none());
        assert_eq!(cache.load(&files).unwrap().lookup("10.0.0.1").len(), 1);
        // appended to
        let key: russh::keys::PublicKey = KEY.parse().unwrap();
        super::super::learn(&f, "10.0.0.2", &key, false).unwrap();
        assert!(cache.fresh(&files).is_none());
        let snap = cache.load(&files).unwrap();
        assert_eq!(snap.lookup("10.0.0.2").len(), 1);
        assert!(cache.fresh(&files).is_some());
        // replaced by a file of the same length (another inode)
        let g = d.path().join("new");
        std::fs::write(&g, format!("10.0.0.5 {KEY}\n10.0.0.2 {KEY}\n")).unwrap();
        std::fs::rename(&g, &f).unwrap();
        assert!(cache.fresh(&files).is_none());
        let snap = cache.load(&files).unwrap();
        assert_eq!(snap.lookup("10.0.0.5").len(), 1);
        assert!(snap.lookup("10.0.0.1").is_empty());
        // removed
        std::fs::remove_file(&f).unwrap();
        assert!(cache.fresh(&files).is_none());
        assert!(cache.load(&files).unwrap().lookup("10.0.0.5").is_empty());
    }

    /// What cannot be read is an error each time, never a cached empty file.
    #[test]
    fn an_unreadable_file_is_not_cached() {
        let d = tempfile::tempdir().unwrap();
        let files = vec![d.path().to_path_buf()];
        let cache = Cache::default();
        let e = cache.load(&files).err().expect("a folder is refused");
        assert!(e.to_string().contains("cannot read known_hosts"), "{e}");
        assert!(cache.fresh(&files).is_none());
        assert!(cache.load(&files).is_err());
    }
}
