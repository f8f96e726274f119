//! The state file (pod CIDR assignments kept beside the inventory) and the
//! names of every file kwinctl keeps beside an inventory.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// The files kwinctl keeps beside `<dir>/<stem>.yaml`: all named
/// `<stem>.kwinctl-*`.
#[derive(Debug, Clone)]
pub struct Sidecars {
    /// `<stem>.kwinctl-state.json`: pod CIDR assignments.
    pub state: PathBuf,
    /// `<stem>.kwinctl.lock`: one operator at a time.
    pub lock: PathBuf,
    /// `<stem>.kwinctl-runs/`: run records.
    pub runs: PathBuf,
    /// `<stem>.kwinctl-last-run.json`: what `--only-failed` reruns.
    pub last_run: PathBuf,
}

impl Sidecars {
    pub fn of(inventory: &Path) -> Sidecars {
        let stem = inventory
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "inventory".into());
        let beside = |suffix: &str| inventory.with_file_name(format!("{stem}{suffix}"));
        Sidecars {
            state: beside(".kwinctl-state.json"),
            lock: beside(".kwinctl.lock"),
            runs: beside(".kwinctl-runs"),
            last_run: beside(".kwinctl-last-run.json"),
        }
    }
}

/// The state file kept beside the inventory.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    pub version: u32,
    pub cluster: String,
    pub cluster_cidr: Option<Ipv4Net>,
    /// host name (lower case) → pod CIDR
    pub pod_cidrs: BTreeMap<String, Ipv4Net>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "state file {path} is not valid ({msg}); restore it from a backup or move it away to start over (pins in the inventory keep CIDRs stable)"
    )]
    Invalid { path: PathBuf, msg: String },
    #[error("cannot read state file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write state file {path}: {msg}")]
    Write { path: PathBuf, msg: String },
}

impl State {
    pub fn load(path: &Path) -> Result<State, StateError> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| StateError::Invalid {
                path: path.to_path_buf(),
                msg: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State {
                version: 1,
                ..State::default()
            }),
            Err(source) => Err(StateError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Write atomically (temp file in the same folder, fsync, rename) with
    /// owner-only permissions.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let fail = |msg: String| StateError::Write {
            path: path.to_path_buf(),
            msg,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".kwinctl-state")
            .tempfile_in(dir)
            .map_err(|e| {
                fail(format!(
                    "cannot create a temp file in {}: {e}",
                    dir.display()
                ))
            })?;
        let text = serde_json::to_string_pretty(self).expect("state JSON") + "\n";
        tmp.write_all(text.as_bytes())
            .and_then(|_| tmp.as_file().sync_all())
            .map_err(|e| fail(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| fail(e.to_string()))?;
        }
        tmp.persist(path).map_err(|e| fail(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_sit_beside_the_inventory() {
        let s = Sidecars::of(Path::new("/x/c.yaml"));
        assert_eq!(s.state, Path::new("/x/c.kwinctl-state.json"));
        assert_eq!(s.lock, Path::new("/x/c.kwinctl.lock"));
        assert_eq!(s.runs, Path::new("/x/c.kwinctl-runs"));
        assert_eq!(s.last_run, Path::new("/x/c.kwinctl-last-run.json"));
    }

    #[test]
    fn state_file_round_trip_is_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.kwinctl-state.json");
        let state = State {
            version: 1,
            cluster: "t".into(),
            cluster_cidr: Some("198.19.0.0/16".parse().unwrap()),
            pod_cidrs: [("a".to_string(), "198.19.1.0/24".parse().unwrap())].into(),
        };
        state.save(&p).unwrap();
        assert_eq!(State::load(&p).unwrap(), state);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
        std::fs::write(&p, "{").unwrap();
        let e = State::load(&p).unwrap_err().to_string();
        assert!(e.contains("is not valid"), "{e}");
    }
}
