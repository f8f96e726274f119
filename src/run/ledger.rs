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
//! - `reset` forgets the removed hosts it reached ([`forget`]).

use std::path::Path;

use super::Target;
use crate::alloc::Allocation;
use crate::mode::Mode;
use crate::outcome::{HostReport, HostStatus};
use crate::state::State;

/// The removed hosts (lower-case names) that `reset` reached in this run:
/// their blocks are free.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reached(Vec<String>);

impl Reached {
    /// From the hosts' reports (`out`, one per target, in order).
    pub(super) fn of<'a>(
        targets: impl IntoIterator<Item = &'a Target>,
        out: &[Option<HostReport>],
    ) -> Reached {
        Reached(
            targets
                .into_iter()
                .zip(out)
                .filter(|(t, r)| {
                    t.removed
                        && r.as_ref().is_some_and(|r| {
                            matches!(r.status, HostStatus::Ok | HostStatus::Changed)
                        })
                })
                .map(|(t, _)| t.host.name.to_ascii_lowercase())
                .collect(),
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
/// allocation's, less the removed hosts that `reset` reached.
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

/// `reset` forgets the removed hosts it reached: the state file as read,
/// less them. Ok: the hosts forgotten (none for other commands).
pub(super) fn forget(
    mode: Mode,
    read: &State,
    path: &Path,
    reached: &Reached,
) -> Result<Vec<String>, String> {
    let gone: Vec<String> = reached
        .0
        .iter()
        .filter(|h| read.removed.contains_key(*h))
        .cloned()
        .collect();
    if mode != Mode::Reset || gone.is_empty() {
        return Ok(Vec::new());
    }
    let mut state = read.clone();
    for h in &gone {
        state.removed.remove(h);
        state.hosts.remove(h);
    }
    save(&state, path)?;
    Ok(gone)
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
                pod_cidr: "198.19.2.0/24".parse().unwrap(),
            },
        );
        s
    }

    #[test]
    fn only_reset_forgets_and_only_the_removed_hosts_it_reached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let read = removed_b();
        let reached = Reached(vec!["a".into(), "b".into()]);
        assert_eq!(forget(Mode::Up, &read, &path, &reached), Ok(vec![]));
        assert!(!path.exists(), "up writes nothing at the end");
        assert_eq!(
            forget(Mode::Reset, &read, &path, &Reached(vec!["a".into()])),
            Ok(vec![])
        );
        assert!(!path.exists(), "a was not removed: nothing to forget");
        assert_eq!(
            forget(Mode::Reset, &read, &path, &reached),
            Ok(vec!["b".to_string()])
        );
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(!saved.contains("198.19.2.0/24"), "{saved}");
    }

    #[test]
    fn a_state_file_that_cannot_be_written_is_said() {
        let read = removed_b();
        let path = Path::new("/nonexistent-kwinctl-dir/state.json");
        let e = forget(Mode::Reset, &read, path, &Reached(vec!["b".into()])).unwrap_err();
        assert!(e.contains("/nonexistent-kwinctl-dir"), "{e}");
    }
}
