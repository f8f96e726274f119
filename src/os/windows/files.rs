//! Files kwinctl places on a Windows node: one file (downloaded, uploaded
//! or written inline) and a release archive unpacked into several.

use serde::Serialize;

use crate::hash::sha256_bytes;

/// A file kwinctl places on a Windows node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WinFile {
    pub path: String,
    pub sha256: String,
    pub source: FileSource,
    /// For kubelet.exe and kube-proxy.exe: the release the inventory
    /// declares; the action runs the new file's `--version` and refuses to
    /// put it in place unless its line matches `version_regex`.
    pub version: Option<String>,
    pub version_regex: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    /// The host downloads it.
    Url(String),
    /// Sent from the operator's machine inside the script (base64); shared,
    /// not copied, between hosts.
    Inline(#[serde(skip)] std::sync::Arc<[u8]>),
}
/// A release archive kwinctl unpacks: containerd's tarball or the CNI
/// plugins'.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Archive {
    pub name: String,
    /// The archive as kwinctl places it first (downloaded or uploaded,
    /// SHA-256 checked).
    pub archive: WinFile,
    /// Where its files go, each taken from the archive by file name.
    pub members: Vec<String>,
    /// The member whose `--version` must match the archive's `version_regex`.
    pub version_binary: Option<String>,
    /// Written last, holding the archive's SHA-256: an archive whose marker
    /// says so is unpacked.
    pub marker: String,
}

impl Archive {
    /// The SHA-256 of the marker file's content (the archive's SHA-256 in
    /// lowercase hex, nothing else).
    pub fn marker_sha256(&self) -> String {
        sha256_bytes(self.archive.sha256.as_bytes())
    }
}

/// A file written from text kwinctl renders itself.
pub fn inline(path: &str, text: String) -> WinFile {
    let bytes: std::sync::Arc<[u8]> = text.into_bytes().into();
    WinFile {
        path: path.into(),
        sha256: sha256_bytes(&bytes),
        source: FileSource::Inline(bytes),
        version: None,
        version_regex: None,
    }
}

/// The largest file kwinctl uploads inside a script. The bytes travel as
/// base64 in a PowerShell string literal: read into UTF-16, parsed, then
/// decoded — about five times the file in the host's memory, against
/// WinRS's per-shell memory quota (MaxMemoryPerShellMB) — and in one remote
/// call (research defect 24). A real kubelet.exe is over 100 MB: serve it
/// over HTTP(S) instead.
pub const MAX_INLINE: u64 = crate::localfile::Kind::Upload.max();

/// Local files to upload, read once per command and shared between hosts.
#[derive(Default)]
pub struct Uploads(
    std::sync::Mutex<std::collections::BTreeMap<std::path::PathBuf, std::sync::Arc<[u8]>>>,
);

impl Uploads {
    pub(crate) fn read(&self, p: &std::path::Path) -> std::io::Result<std::sync::Arc<[u8]>> {
        let mut m = self.0.lock().unwrap();
        if let Some(b) = m.get(p) {
            return Ok(b.clone());
        }
        let size = std::fs::metadata(p)?.len();
        if size > MAX_INLINE {
            return Err(std::io::Error::other(format!(
                "{size} bytes is over kwinctl's limit of {} MiB for a file uploaded inside the script (it travels as base64 in a PowerShell string, about five times its size in the host's memory): serve it over HTTP(S) and give its url and sha256 instead of path",
                MAX_INLINE >> 20
            )));
        }
        // a regular file within the bound only: never /dev/zero or a pipe
        let b: std::sync::Arc<[u8]> =
            crate::localfile::read(p, crate::localfile::Kind::Upload)?.into();
        m.insert(p.to_path_buf(), b.clone());
        Ok(b)
    }
}
