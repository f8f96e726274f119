//! The cluster's identity: an id kwinctl makes once and every node records
//! beside its pod CIDR, so that two clusters of one name are told apart.

use std::collections::BTreeMap;

use super::{AllocError, Observed};
use crate::inventory::Inventory;
use crate::state::State;

/// A fresh cluster id: 16 hex digits from the clock and the process, enough
/// to tell two clusters of one name apart.
fn new_cluster_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The cluster's id: the state file's, else the one the nodes that answered
/// agree on, else a new one (only when every node answered: one that did
/// not may record this cluster's id already).
pub(super) fn cluster_id(
    inv: &Inventory,
    state: &State,
    observed: &Observed,
    notes: &mut Vec<String>,
) -> Result<String, AllocError> {
    let name = &inv.cluster.name;
    let record = |h: &crate::inventory::Host| {
        observed
            .as_ref()
            .and_then(|o| o.get(&h.name.to_ascii_lowercase()))
    };
    let mut ids: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for h in &inv.hosts {
        if let Some((n, id)) = record(h).and_then(|r| r.cluster.as_ref())
            && n == name
        {
            ids.entry(id.as_str()).or_default().push(&h.name);
        }
    }
    Ok(match (&state.cluster_id, ids.len()) {
        // The nodes that record this cluster's name all record another id:
        // the state file is the odd one out (a copy of another cluster's
        // of the same name), not the nodes.
        (Some(id), n) if n > 0 && !ids.contains_key(id.as_str()) => {
            let seen: Vec<String> = ids
                .iter()
                .map(|(other, hosts)| format!("{other} on {}", hosts.join(", ")))
                .collect();
            return Err(AllocError(format!(
                "the state file {} names cluster {name:?} with id {id}, but no node records that id: \
                 the nodes record {}. Either the state file is another cluster's of the same name, \
                 or the run that wrote it stopped before any node recorded its id and another run \
                 made the cluster since. Nothing was changed; leave the nodes alone: move the state \
                 file aside (kwinctl rebuilds it from the nodes' records) and run again",
                crate::state::Sidecars::of(&inv.path).state.display(),
                seen.join("; ")
            )));
        }
        (Some(id), _) => id.clone(),
        // Without asking any node (`check`, `render`) a cluster that has
        // none yet shows this; `up` makes a real one.
        (None, 0) if observed.is_none() => "new".to_string(),
        (None, 0) => {
            // A new id only when every node answered: one that did not may
            // record this cluster's id already.
            let silent: Vec<&str> = inv
                .hosts
                .iter()
                .filter(|h| record(h).is_none())
                .map(|h| h.name.as_str())
                .collect();
            if !silent.is_empty() {
                return Err(AllocError(format!(
                    "the cluster has no id yet (the state file has none and no node that answered records \
                     one), and {} did not answer: kwinctl will not make one up until every node answers (one \
                     that did not may record this cluster's id; `--limit` does not help, as the \
                     cluster's id is every node's). Nothing was changed: make them reachable, or \
                     remove them from the inventory for the first `up` and add them back after it",
                    silent.join(", ")
                )));
            }
            new_cluster_id()
        }
        (None, 1) => {
            let id = ids.keys().next().expect("one id").to_string();
            notes.push(format!(
                "the state file has no cluster id: adopted {id}, which the nodes record"
            ));
            id
        }
        (None, _) => {
            let seen: Vec<String> = ids
                .iter()
                .map(|(id, hosts)| format!("{id} on {}", hosts.join(", ")))
                .collect();
            return Err(AllocError(format!(
                "the nodes record two clusters named {name:?}: {}; kwinctl cannot tell which one this \
                 inventory is. Nothing was changed. Restore this cluster's state file (it names the id), \
                 or reset the nodes that belong to the other cluster",
                seen.join("; ")
            )));
        }
    })
}
