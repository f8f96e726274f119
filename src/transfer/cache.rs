//! The operator's cache of downloaded binaries (`windows.binaries_source:
//! push`): a `url:` binary is downloaded once to the operator's machine,
//! checked against its `sha256:`, kept under its SHA-256, and pushed from
//! there to nodes that cannot reach the internet. A cached file is hashed
//! again before each use: a damaged one is downloaded anew.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Local;

/// How long one download may take: a 100 MB binary over a slow link.
const DOWNLOAD: Duration = Duration::from_secs(30 * 60);

/// Where the cache lives: `KWINCTL_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/kwinctl/binaries`, else `~/.cache/kwinctl/binaries`.
pub fn dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("KWINCTL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(Path::new(&d).join("kwinctl/binaries"));
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => Ok(Path::new(&h).join(".cache/kwinctl/binaries")),
        None => Err("no cache folder: set KWINCTL_CACHE_DIR (or HOME)".into()),
    }
}

/// The file `url` names, whose SHA-256 must be `sha256`: from the cache,
/// or downloaded into it first (over HTTPS, the Mozilla roots and the CA
/// file `KWINCTL_CA_FILE` trusted).
pub fn fetch(url: &str, sha256: &str) -> Result<Local, String> {
    let sha256 = sha256.to_ascii_lowercase();
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("its sha256 {sha256:?} is not 64 hex digits"));
    }
    let dir = dir()?;
    let path = dir.join(&sha256);
    if path.is_file() {
        match Local::of(&path) {
            Ok(l) if l.sha256 == sha256 => return Ok(l),
            _ => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca = std::env::var_os("KWINCTL_CA_FILE").filter(|c| !c.is_empty());
    let client = crate::checksums::http::Client::new(ca.as_deref().map(Path::new))?;
    let part = dir.join(format!("{sha256}.part"));
    let got = client.download(url, &part, DOWNLOAD);
    let (_, got) = got.inspect_err(|_| {
        let _ = std::fs::remove_file(&part);
    })?;
    if got != sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(format!(
            "the download's SHA-256 is {got}, the inventory says {sha256}: nothing was kept"
        ));
    }
    std::fs::rename(&part, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Local::of(&path).map_err(|e| format!("{}: {e}", path.display()))
}
