//! The state file (pod CIDR assignments kept beside the inventory) and the
//! names of every file kwinctl keeps beside an inventory.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::inventory::Os;

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
    stem: PathBuf,
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
            stem: beside(""),
        }
    }

    /// `<stem>.kwinctl-last-<command>.json`: what the last `up` or `reset`
    /// left to do (what `--only-failed` reruns).
    pub fn last_run(&self, command: &str) -> PathBuf {
        let mut s = self.stem.clone().into_os_string();
        s.push(format!(".kwinctl-last-{command}.json"));
        PathBuf::from(s)
    }
}

/// The version of the state file this kwinctl writes.
pub const STATE_VERSION: u32 = 3;

/// The state file kept beside the inventory: a cache of the pod CIDRs the
/// nodes record (each node's own record is the authority), the cluster's
/// identity, and the hosts removed from the inventory that may still hold
/// their block (until `kwinctl reset` reaches them).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub version: u32,
    pub cluster: String,
    /// Written on every node beside its pod CIDR, so a node of another
    /// cluster with the same name is told apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    pub cluster_cidr: Option<Ipv4Net>,
    /// host name (lower case) → pod CIDR
    pub pod_cidrs: BTreeMap<String, Ipv4Net>,
    /// host name (lower case) → where it is, so that a host later removed
    /// from the inventory can still be reached by `reset`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, Known>,
    /// host name (lower case) → what a removed host may still hold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub removed: BTreeMap<String, Removed>,
    /// The cluster CA's pin, as kubeadm's discovery pins it, from the first
    /// run that joined a node (src/join/ca.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pin: Option<crate::join::ca::Pin>,
}

/// Where a host is, and the trust kwinctl had in it that the inventory's
/// defaults may not carry: its WinRM certificate pin (version 3). A host
/// deleted from the inventory is reached by `reset` with it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Known {
    pub os: Os,
    pub address: Ipv4Addr,
    /// A Windows node's Kubernetes name (absent: recorded before kwinctl
    /// recorded names, when the node registered as its address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
}

/// A host removed from the inventory whose node may still hold its block.
/// Where it is is unknown when a version 1 state file remembered only its
/// block.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Removed {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<Os>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Ipv4Addr>,
    /// Its WinRM certificate pin, as its host entry had it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
    pub pod_cidr: Ipv4Net,
}

impl Removed {
    pub fn at(&self) -> Option<Known> {
        Some(Known {
            os: self.os?,
            address: self.address?,
            node_name: None,
            cert_sha256: self.cert_sha256.clone(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}:{line}:{column}: {message}\n    fix: {hint}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: String,
    },
    #[error("cannot read state file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write state file {path}: {msg}")]
    Write { path: PathBuf, msg: String },
}

/// Line and column (1-based) of the first `needle` at or after `from`.
fn position(text: &str, needle: &str, from: usize) -> (usize, usize) {
    let at = text[from.min(text.len())..]
        .find(needle)
        .map(|i| i + from)
        .unwrap_or(0);
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

/// What the fix for a bad state file is: it is only a cache.
const CACHE_HINT: &str = "the state file is a cache of what the nodes record: fix the value, or remove \
                          the entry (or the file) and `kwinctl plan` shows what the nodes say";

impl State {
    /// A new state for a cluster.
    pub fn new(cluster: &str) -> State {
        State {
            version: STATE_VERSION,
            cluster: cluster.to_string(),
            ..State::default()
        }
    }

    /// The hosts removed from the inventory (those `in_inventory` does not
    /// know) that may still hold their block: those a run already noted as
    /// removed, and those the state file still gives a block (deleted from
    /// the inventory since the last `up`), with where they were.
    pub fn removed_from(&self, in_inventory: impl Fn(&str) -> bool) -> BTreeMap<String, Removed> {
        let mut removed = self.removed.clone();
        for (k, net) in &self.pod_cidrs {
            if !in_inventory(k) && !removed.contains_key(k) {
                let at = self.hosts.get(k);
                removed.insert(
                    k.clone(),
                    Removed {
                        os: at.map(|h| h.os),
                        address: at.map(|h| h.address),
                        cert_sha256: at.and_then(|h| h.cert_sha256.clone()),
                        pod_cidr: *net,
                    },
                );
            }
        }
        removed.retain(|k, _| !in_inventory(k));
        removed
    }

    /// Read and check the state file of the cluster named `cluster`; a
    /// missing file is an empty state.
    pub fn load(path: &Path, cluster: &str) -> Result<State, StateError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => {
                // owner-only, also when it was made looser before
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
                }
                t
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::new(cluster)),
            Err(source) => {
                return Err(StateError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let invalid =
            |(line, column): (usize, usize), message: String, hint: &str| StateError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message,
                hint: hint.to_string(),
            };
        let mut state: State = serde_json::from_str(&text).map_err(|e| {
            invalid(
                (e.line(), e.column()),
                format!("not a kwinctl state file: {e}"),
                CACHE_HINT,
            )
        })?;
        if !(1..=STATE_VERSION).contains(&state.version) {
            return Err(invalid(
                position(&text, "\"version\"", 0),
                format!(
                    "version {} is not one this kwinctl knows (1 to {STATE_VERSION})",
                    state.version
                ),
                "a newer kwinctl wrote it: use that one",
            ));
        }
        if !state.cluster.is_empty() && state.cluster != cluster {
            return Err(invalid(
                position(&text, "\"cluster\"", 0),
                format!(
                    "this state file is cluster {:?}'s, but the inventory describes cluster {cluster:?}",
                    state.cluster
                ),
                "point -i at that cluster's inventory; if the file was copied here by mistake, \
                 remove it: the nodes' own records are the authority and `kwinctl plan` shows them",
            ));
        }
        let cidrs = text.find("\"pod_cidrs\"").unwrap_or(0);
        for (host, net) in &state.pod_cidrs {
            let at = || position(&text, &format!("\"{host}\""), cidrs);
            if *host != host.to_ascii_lowercase() {
                return Err(invalid(
                    at(),
                    format!("host name {host:?} is not in lower case, as kwinctl writes them"),
                    CACHE_HINT,
                ));
            }
            if net.network() != net.addr() {
                return Err(invalid(
                    at(),
                    format!("{host}'s pod CIDR {net} has host bits set"),
                    &format!("write {}; {CACHE_HINT}", net.trunc()),
                ));
            }
        }
        state.version = STATE_VERSION;
        state.cluster = cluster.to_string();
        Ok(state)
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
        assert_eq!(s.last_run("up"), Path::new("/x/c.kwinctl-last-up.json"));
    }

    #[test]
    fn state_file_round_trip_is_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.kwinctl-state.json");
        let state = State {
            cluster_cidr: Some("198.19.0.0/16".parse().unwrap()),
            pod_cidrs: [("a".to_string(), "198.19.1.0/24".parse().unwrap())].into(),
            ..State::new("t")
        };
        state.save(&p).unwrap();
        assert_eq!(State::load(&p, "t").unwrap(), state);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
    }

    /// A state file that is not kwinctl's, not this cluster's or not
    /// sound is refused at its position, with how to fix it.
    #[test]
    fn bad_state_files_are_refused_at_their_position() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.kwinctl-state.json");
        let good = "{\n  \"version\": 1,\n  \"cluster\": \"lab\",\n  \"cluster_cidr\": \"198.19.0.0/16\",\n  \"pod_cidrs\": {\n    \"h1\": \"198.19.0.0/24\",\n    \"h3\": \"198.19.2.0/24\"\n  }\n}\n";
        std::fs::write(&p, good).unwrap();
        let s = State::load(&p, "lab").unwrap();
        assert_eq!(s.version, STATE_VERSION, "version 1 is read and upgraded");
        for (from, to, want) in [
            (
                "\"198.19.2.0/24\"",
                "\"198.19.2.1/24\"",
                ":7:5: h3's pod CIDR 198.19.2.1/24 has host bits set",
            ),
            (
                "\"cluster\": \"lab\"",
                "\"cluster\": \"prod-east\"",
                ":3:3: this state file is cluster \"prod-east\"'s",
            ),
            ("\"version\": 1", "\"version\": 99", ":2:3: version 99"),
            ("\"h3\"", "\"H3\"", ":7:5: host name \"H3\""),
            ("\"pod_cidrs\"", "\"colour\": 1, \"pod_cidrs\"", ":5:"),
            ("}\n}", "}\n", ":"),
        ] {
            std::fs::write(&p, good.replacen(from, to, 1)).unwrap();
            let e = State::load(&p, "lab").unwrap_err().to_string();
            assert!(
                e.contains(&format!("x.kwinctl-state.json{want}")),
                "{want}: {e}"
            );
            assert!(e.contains("fix:"), "{e}");
            assert!(!e.contains("move it away"), "{e}");
        }
    }
}
