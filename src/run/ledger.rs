//! The cluster's ledger: the state file beside the inventory (the
//! allocation as last recorded, and the removed hosts `reset` has not
//! reached) and the cluster's registry on the lock host (every block any
//! operator's run handed out, written by the lock and unlock scripts).
//! This module is the only writer of the state file, and the only maker of
//! the registry's lines:
//! - `up` records the allocation before any host changes ([`record`]);
//! - the cluster lock takes the allocation's registry with it, and leaves
//!   it, less the removed hosts `reset` reached, when it is released
//!   ([`registry`]);
//! - `reset` forgets the hosts it reached, and, when it reached every one,
//!   the whole cluster: the state file goes, and the lock host's registry,
//!   generation and lock with it ([`forget`], [`leftover`]).

use std::path::Path;

use super::Target;
use crate::alloc::Allocation;
use crate::mode::Mode;
use crate::outcome::{HostReport, HostStatus};
use crate::state::State;

/// The hosts (lower-case names) that `reset` reached in this run, in the
/// inventory or removed from it: their nodes hold nothing of kwinctl's any
/// more, so the registry and the state file forget their blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reached(Vec<String>, Vec<String>);

impl Reached {
    /// From the hosts' reports (`out`, one per target, in order): the
    /// selected hosts a `reset` left clean (none for other commands).
    pub(super) fn of<'a>(
        mode: Mode,
        targets: impl IntoIterator<Item = &'a Target>,
        out: &[Option<HostReport>],
    ) -> Reached {
        if mode != Mode::Reset {
            return Reached::default();
        }
        let reached: Vec<&Target> = targets
            .into_iter()
            .zip(out)
            .filter(|(t, r)| {
                t.selected
                    && r.as_ref()
                        .is_some_and(|r| matches!(r.status, HostStatus::Ok | HostStatus::Changed))
            })
            .map(|(t, _)| t)
            .collect();
        let name = |t: &&Target| t.host.name.to_ascii_lowercase();
        Reached(
            reached.iter().map(name).collect(),
            reached.iter().filter(|t| t.removed).map(name).collect(),
        )
    }

    /// The hosts a `reset` selects, before it runs: what the registry
    /// would be left as if it reaches them all.
    pub(super) fn planned(names: impl IntoIterator<Item = String>) -> Reached {
        Reached(
            names.into_iter().map(|n| n.to_ascii_lowercase()).collect(),
            Vec::new(),
        )
    }

    fn contains(&self, host: &str) -> bool {
        self.0.iter().any(|h| h == host)
    }
}

/// `up` records the allocation before any host changes (when it differs
/// from the state file as read). Err: why it could not.
pub(super) fn record(
    mode: Mode,
    read: &State,
    path: &Path,
    allocation: &Allocation,
) -> Result<(), String> {
    if mode == Mode::Up && allocation.state != *read {
        save(&allocation.state, path)?;
    }
    Ok(())
}

/// The registry's lines as the run leaves them on the lock host: the
/// allocation's, less the hosts that `reset` reached. None left: the lock
/// host's cluster files are removed when the lock is released.
pub(super) fn registry(allocation: Option<&Allocation>, reached: &Reached) -> Vec<String> {
    allocation
        .map(|a| {
            a.registry
                .iter()
                .filter(|e| !reached.contains(&e.host))
                .map(|e| e.line())
                .collect()
        })
        .unwrap_or_default()
}

/// What a `reset` made the ledger forget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// The hosts removed from the inventory it reached: their blocks are no
    /// longer reserved.
    pub removed: Vec<String>,
    /// It reached every host with a block, and the registry it leaves is
    /// empty: the state file is gone (the next `up` is a first bring-up).
    pub cluster: bool,
}

/// `reset` forgets the hosts it reached: the state file as read, less
/// them (their block, where they are, their removal). When the registry it
/// leaves (`registry`, from [`registry`]) is empty and no host is left in
/// the state file, the cluster is gone: the state file is removed.
pub(super) fn forget(
    mode: Mode,
    read: &State,
    path: &Path,
    reached: &Reached,
    registry: &[String],
) -> Result<Forgotten, String> {
    if mode != Mode::Reset || reached.0.is_empty() {
        return Ok(Forgotten::default());
    }
    let mut state = read.clone();
    let mut out = Forgotten::default();
    for h in &reached.0 {
        if state.removed.remove(h).is_some() || reached.1.contains(h) {
            out.removed.push(h.clone());
        }
        state.hosts.remove(h);
        state.pod_cidrs.remove(h);
    }
    let empty = state.pod_cidrs.is_empty() && state.hosts.is_empty() && state.removed.is_empty();
    if empty && registry.is_empty() {
        out.cluster = true;
        return match std::fs::remove_file(path) {
            Ok(()) => Ok(out),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(out),
            Err(e) => Err(format!("cannot remove state file {}: {e}", path.display())),
        };
    }
    if state != *read {
        save(&state, path)?;
    }
    Ok(out)
}

/// `reset`: whether the lock host keeps cluster files that this reset
/// changes even when no node has anything to remove (a registry that still
/// lists the hosts it resets, or, when it resets them all, a generation
/// left by earlier runs): then it takes the cluster lock, to leave them as
/// [`registry`] says.
pub(super) fn leftover(
    mode: Mode,
    allocation: Option<&Allocation>,
    resets: &Reached,
    lock_host: Option<&crate::alloc::NodeRecord>,
) -> bool {
    let (Mode::Reset, Some(rec)) = (mode, lock_host) else {
        return false;
    };
    let after = registry(allocation, resets);
    let now: std::collections::BTreeSet<String> = rec.registry.iter().map(|e| e.line()).collect();
    let later: std::collections::BTreeSet<String> = after.iter().cloned().collect();
    now != later || (after.is_empty() && rec.generation > 0)
}

fn save(state: &State, path: &Path) -> Result<(), String> {
    state.save(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Removed;

    fn removed_b() -> State {
        let mut s = State::default();
        s.removed.insert(
            "b".into(),
            Removed {
                os: None,
                address: None,
                cert_sha256: None,
                pod_cidr: "198.19.2.0/24".parse().unwrap(),
            },
        );
        s
    }

    #[test]
    fn only_reset_forgets_and_only_the_hosts_it_reached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut read = removed_b();
        read.pod_cidrs
            .insert("a".into(), "198.19.1.0/24".parse().unwrap());
        read.pod_cidrs
            .insert("c".into(), "198.19.3.0/24".parse().unwrap());
        let reached = Reached(vec!["a".into(), "b".into()], vec![]);
        let kept = ["c 198.19.3.0/24 198.18.1.4".to_string()];
        assert_eq!(
            forget(Mode::Up, &read, &path, &reached, &kept),
            Ok(Forgotten::default())
        );
        assert!(!path.exists(), "up writes nothing at the end");
        let f = forget(Mode::Reset, &read, &path, &reached, &kept).unwrap();
        assert_eq!(f.removed, ["b"]);
        assert!(!f.cluster);
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(!saved.contains("198.19.2.0/24"), "{saved}");
        assert!(!saved.contains("198.19.1.0/24"), "a was reset: {saved}");
        assert!(saved.contains("198.19.3.0/24"), "c was not: {saved}");
    }

    #[test]
    fn a_reset_of_every_host_removes_the_state_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut read = removed_b();
        read.pod_cidrs
            .insert("a".into(), "198.19.1.0/24".parse().unwrap());
        read.save(&path).unwrap();
        let all = Reached(vec!["a".into(), "b".into()], vec![]);
        // another operator's host still registered: the cluster stays
        let other = ["z 198.19.9.0/24 198.18.1.9".to_string()];
        let f = forget(Mode::Reset, &read, &path, &all, &other).unwrap();
        assert!(!f.cluster && path.exists());
        read.save(&path).unwrap();
        let f = forget(Mode::Reset, &read, &path, &all, &[]).unwrap();
        assert!(f.cluster);
        assert!(!path.exists());
    }

    #[test]
    fn a_state_file_that_cannot_be_written_is_said() {
        let mut read = removed_b();
        read.pod_cidrs
            .insert("c".into(), "198.19.3.0/24".parse().unwrap());
        let path = Path::new("/nonexistent-kwinctl-dir/state.json");
        let e = forget(
            Mode::Reset,
            &read,
            path,
            &Reached(vec!["b".into()], vec![]),
            &["c".into()],
        )
        .unwrap_err();
        assert!(e.contains("/nonexistent-kwinctl-dir"), "{e}");
    }
}
