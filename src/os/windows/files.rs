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
    /// Text kwinctl renders itself (a kubeconfig), sent inside the script
    /// (base64); shared, not copied, between hosts.
    Inline(#[serde(skip)] std::sync::Arc<[u8]>),
    /// A file on the operator's machine, of any size: pushed to the host
    /// before the script runs (`src/transfer/`), which copies it from
    /// where the push left it verified.
    Push(Pushed),
}

/// A file pushed from the operator's machine: where the host keeps it once
/// verified, and (not serialised) the local file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pushed {
    /// The verified file on the host (`transfer::Target::staged`).
    pub staged: String,
    pub size: u64,
    #[serde(skip)]
    pub local: std::sync::Arc<crate::transfer::Local>,
}

impl Pushed {
    pub fn of(local: std::sync::Arc<crate::transfer::Local>) -> Pushed {
        Pushed {
            staged: crate::transfer::Target::Windows.staged(&local.sha256),
            size: local.size,
            local,
        }
    }
}

impl FileSource {
    /// The file to push before the script runs, if this one is pushed.
    pub fn pushed(&self) -> Option<&crate::transfer::Local> {
        match self {
            FileSource::Push(p) => Some(&p.local),
            _ => None,
        }
    }
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

/// Local files to push, hashed once per command (read in pieces, never
/// held) and shared between hosts.
#[derive(Default)]
pub struct Uploads(
    std::sync::Mutex<
        std::collections::BTreeMap<std::path::PathBuf, std::sync::Arc<crate::transfer::Local>>,
    >,
);

impl Uploads {
    pub(crate) fn read(
        &self,
        p: &std::path::Path,
    ) -> std::io::Result<std::sync::Arc<crate::transfer::Local>> {
        let mut m = self.0.lock().unwrap();
        if let Some(b) = m.get(p) {
            return Ok(b.clone());
        }
        // a regular file only: never /dev/zero or a pipe
        let l = std::sync::Arc::new(crate::transfer::Local::of(p)?);
        m.insert(p.to_path_buf(), l.clone());
        Ok(l)
    }

    /// A `url:` binary from the operator's cache (downloaded into it
    /// first, checked against `sha256`), once per command.
    pub(crate) fn fetch(
        &self,
        url: &str,
        sha256: &str,
    ) -> Result<std::sync::Arc<crate::transfer::Local>, String> {
        let key = std::path::PathBuf::from(format!("url:{url}"));
        let mut m = self.0.lock().unwrap();
        if let Some(b) = m.get(&key) {
            return Ok(b.clone());
        }
        let l = std::sync::Arc::new(crate::transfer::cache::fetch(url, sha256)?);
        m.insert(key, l.clone());
        Ok(l)
    }
}
