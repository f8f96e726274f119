//! Files pushed from the operator's machine to a host, of any size: each
//! streamed in pieces straight to a temporary file on the host (one piece
//! held at a time on either side), hashed there before it takes the name
//! the placing actions copy from, resumed after an interrupted run, and
//! sent once per host however many entries share it.
//!
//! One push to one host, for each distinct SHA-256:
//!
//! 1. **Ask** (one call for all the host's files): the host answers, per
//!    file, `done` (the verified file is in its place, under its SHA-256),
//!    `part LEN SHA` (a partial file of LEN bytes, whose content hashes to
//!    SHA) or `none`.
//! 2. **Resume**: a part that is a prefix of the local file (its SHA-256
//!    is that of the local file's first LEN bytes) is kept and the transfer
//!    starts at LEN; any other part is dropped and the transfer starts at 0.
//!    So no byte the host already holds is sent again.
//! 3. **Send**: one streamed call ([`crate::transport::Session::stream`]):
//!    a short script in the command line, the file's own bytes on its
//!    stdin (over WinRM one piece per Send request — see
//!    `docs/research/push.md`). The host appends each piece to
//!    `<sha256>.part` as it comes, then hashes the whole and renames it
//!    `<sha256>` only when the hash is right.
//!
//! What happens to the verified file next (copied to its destination,
//! version-checked, swapped in) is the placing action's business, not this
//! module's.

use crate::transport::{Session, StreamMode, TransportError};

pub mod cache;
pub mod linux;
pub mod local;
pub mod windows;

pub use local::Local;

/// The host's side of a push: where its files live and the scripts that
/// ask about them and receive them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Windows,
    Linux,
}

impl Target {
    /// Where the verified file with this SHA-256 is kept on the host.
    pub fn staged(self, sha256: &str) -> String {
        match self {
            Target::Windows => format!(r"{}\{sha256}", windows::DIR),
            Target::Linux => format!("{}/{sha256}", linux::DIR),
        }
    }

    fn ask(self, files: &[&Local], mode: StreamMode) -> String {
        match self {
            Target::Windows => windows::ask(files, mode),
            Target::Linux => linux::ask(files),
        }
    }

    fn receive(self, f: &Local, offset: u64) -> String {
        match self {
            Target::Windows => windows::receive(f, offset),
            Target::Linux => linux::receive(f, offset),
        }
    }
}

/// The bytes in one piece of a stream: over WinRM what one Send request to
/// this host carries (within its `MaxEnvelopeSizekb`, `envelope_kb`, when
/// it said); over SSH a size that keeps the channel's window full.
pub fn piece(mode: StreamMode, envelope_kb: Option<u32>) -> usize {
    match mode {
        StreamMode::Raw => 256 << 10,
        StreamMode::Sends => crate::transport::winrm::stream::send_payload(envelope_kb),
    }
}

/// The host's `MaxEnvelopeSizekb`, from the ask's `KWP-ENVELOPE KB` line
/// (0 or absent: it could not be read).
pub fn parse_envelope(stdout: &str) -> Option<u32> {
    stdout.lines().find_map(|l| {
        let kb = l
            .trim()
            .strip_prefix("KWP-ENVELOPE ")?
            .trim()
            .parse()
            .ok()?;
        (kb > 0).then_some(kb)
    })
}

/// What a host said it holds of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Done,
    Part { len: u64, sha256: String },
    Nothing,
}

/// The host's answer to [`Target::ask`]: `KWP <sha256> done|none|part LEN SHA` lines.
pub fn parse_held(stdout: &str, sha256: &str) -> Option<Held> {
    stdout.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != "KWP" || w.next()? != sha256 {
            return None;
        }
        match w.next()? {
            "done" => Some(Held::Done),
            "none" => Some(Held::Nothing),
            "part" => Some(Held::Part {
                len: w.next()?.parse().ok()?,
                sha256: w.next()?.to_ascii_lowercase(),
            }),
            _ => None,
        }
    })
}

/// What one file's push did on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub sha256: String,
    /// Where the transfer started (what the host already held and kept).
    pub from: u64,
    /// Bytes of the file sent now (0 when the host had it).
    pub sent: u64,
}

/// Why a push failed; nothing was replaced on the host.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Transport(#[from] TransportError),
    #[error("{path}: {msg}")]
    Local { path: String, msg: String },
    #[error("{0}")]
    Host(String),
}

/// Push `files` (the distinct SHA-256 among them once each) to the host
/// behind `s`. A file the host already holds verified is not sent; a part
/// it holds is resumed.
pub async fn push(
    s: &mut Box<dyn Session>,
    target: Target,
    files: &[Local],
) -> Result<Vec<Pushed>, PushError> {
    let mut distinct: Vec<&Local> = Vec::new();
    for f in files {
        if !distinct.iter().any(|d| d.sha256 == f.sha256) {
            distinct.push(f);
        }
    }
    if distinct.is_empty() {
        return Ok(Vec::new());
    }
    let Some(mode) = s.stream_mode() else {
        return Err(PushError::Host(
            "this transport cannot stream a file: give the binary's url instead of path".into(),
        ));
    };
    let out = s.run(&target.ask(&distinct, mode)).await?;
    let envelope = parse_envelope(&out.stdout);
    let mut done = Vec::new();
    for f in distinct {
        let held = parse_held(&out.stdout, &f.sha256).ok_or_else(|| {
            PushError::Host(format!(
                "the host did not say what it holds of {} (exit {:?}): {}",
                f.path.display(),
                out.exit,
                crate::text::clip(&crate::text::safe_text(&out.stderr), 400)
            ))
        })?;
        let from = match held {
            Held::Done => {
                done.push(Pushed {
                    sha256: f.sha256.clone(),
                    from: f.size,
                    sent: 0,
                });
                continue;
            }
            Held::Nothing => 0,
            Held::Part { len, sha256 } => {
                let local = f.clone();
                let prefix = tokio::task::spawn_blocking(move || {
                    (len <= local.size)
                        .then(|| local.prefix_sha256(len))
                        .transpose()
                })
                .await
                .map_err(|e| PushError::Host(e.to_string()))?
                .map_err(|e| PushError::Local {
                    path: f.path.display().to_string(),
                    msg: e.to_string(),
                })?
                .flatten();
                if prefix.as_deref() == Some(sha256.as_str()) {
                    len
                } else {
                    0
                }
            }
        };
        let input = f.pieces(from, piece(mode, envelope));
        let out = s.stream(&target.receive(f, from), input).await?;
        let ok = format!("KWP {} ok", f.sha256);
        if !out.stdout.lines().any(|l| l.trim() == ok) {
            return Err(PushError::Host(format!(
                "{} did not arrive whole (exit {:?}): {} {}; rerun to resume",
                f.path.display(),
                out.exit,
                crate::text::clip(&crate::text::safe_text(out.stdout.trim()), 300),
                crate::text::clip(&crate::text::safe_text(out.stderr.trim()), 300),
            )));
        }
        done.push(Pushed {
            sha256: f.sha256.clone(),
            from,
            sent: f.size - from,
        });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_host_holds_is_read_per_file() {
        let out = "noise\nKWP aa done\nKWP bb part 1048576 ABCD\nKWP cc none\nKWP dd part x y\n";
        assert_eq!(parse_held(out, "aa"), Some(Held::Done));
        assert_eq!(
            parse_held(out, "bb"),
            Some(Held::Part {
                len: 1 << 20,
                sha256: "abcd".into()
            })
        );
        assert_eq!(parse_held(out, "cc"), Some(Held::Nothing));
        assert_eq!(parse_held(out, "dd"), None);
        assert_eq!(parse_held(out, "ee"), None);
    }

    #[test]
    fn a_winrm_piece_is_one_send_request() {
        use crate::transport::winrm::stream::send_payload;
        for kb in [None, Some(32), Some(150), Some(500), Some(8192)] {
            assert_eq!(piece(StreamMode::Sends, kb), send_payload(kb), "{kb:?}");
        }
        // a host with the larger default gets pieces over twice as large
        assert!(piece(StreamMode::Sends, Some(500)) > 2 * piece(StreamMode::Sends, None));
    }

    #[test]
    fn the_hosts_envelope_is_read_when_it_said() {
        assert_eq!(
            parse_envelope("KWP aa none\nKWP-ENVELOPE 500\r\n"),
            Some(500)
        );
        assert_eq!(parse_envelope("KWP-ENVELOPE 0\n"), None);
        assert_eq!(parse_envelope("KWP-ENVELOPE x\n"), None);
        assert_eq!(parse_envelope("KWP aa none\n"), None);
    }
}
