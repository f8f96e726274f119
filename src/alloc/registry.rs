//! The cluster's registry, kept on the lock host beside the cluster lock:
//! every block any operator's run handed out, and to whom. An operator whose
//! inventory lacks a host another operator added reads it there, and never
//! hands out that host's block.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use super::{Assignment, Observed, Registered};
use crate::inventory::Inventory;
use crate::state::Removed;

/// The registry as the nodes report it (only the lock host keeps one; a
/// stale copy elsewhere only adds reservations).
pub(super) fn read(inv: &Inventory, observed: &Observed) -> BTreeMap<String, Registered> {
    let mut registry = BTreeMap::new();
    for h in &inv.hosts {
        let rec = observed
            .as_ref()
            .and_then(|o| o.get(&h.name.to_ascii_lowercase()));
        for e in rec.map(|r| r.registry.as_slice()).unwrap_or(&[]) {
            registry.entry(e.host.clone()).or_insert_with(|| e.clone());
        }
    }
    registry
}

/// The registry after this run: this inventory's hosts as allocated (a
/// disputed one as the state had it, one whose move is not proven at its
/// former address), removed hosts, and what other operators registered.
pub(super) fn after(
    inv: &Inventory,
    registry: BTreeMap<String, Registered>,
    assignments: &[Assignment],
    pod_cidrs: &BTreeMap<String, Ipv4Net>,
    removed: &BTreeMap<String, Removed>,
    unmoved: &BTreeMap<String, std::net::Ipv4Addr>,
) -> Vec<Registered> {
    let mut out_registry: BTreeMap<String, Registered> = registry
        .iter()
        .filter(|(k, _)| inv.host(k).is_none() && !removed.contains_key(*k))
        .map(|(k, e)| (k.clone(), e.clone()))
        .collect();
    for a in assignments {
        let k = a.host.to_ascii_lowercase();
        out_registry.insert(
            k.clone(),
            Registered {
                host: k,
                pod_cidr: a.pod_cidr,
                address: a.address,
            },
        );
    }
    for h in &inv.hosts {
        let k = h.name.to_ascii_lowercase();
        if out_registry.contains_key(&k) {
            continue;
        }
        if let Some(n) = pod_cidrs.get(&k) {
            out_registry.insert(
                k.clone(),
                Registered {
                    pod_cidr: *n,
                    address: unmoved.get(&k).copied().unwrap_or(h.address),
                    host: k,
                },
            );
        } else if let Some(e) = registry.get(&k) {
            // Given no block this run (disputed, say, with no state file):
            // the block the registry gave it stays registered, since the
            // node may hold it. Only `reset` frees a registered block.
            out_registry.insert(k, e.clone());
        }
    }
    for (k, r) in removed {
        // A removed host's block that the registry gives another host was
        // never handed to it under the lock (an allocation of a run that
        // could not take the lock, kept in the state file): one block,
        // one owner in the registry. The state file still reserves it.
        let taken = out_registry
            .values()
            .any(|e| e.host != *k && crate::inventory::nets_overlap(&e.pod_cidr, &r.pod_cidr));
        if taken {
            continue;
        }
        if let Some(address) = r.address {
            out_registry.insert(
                k.clone(),
                Registered {
                    host: k.clone(),
                    pod_cidr: r.pod_cidr,
                    address,
                },
            );
        }
    }
    out_registry.into_values().collect()
}

/// Whether the registry the nodes reported lists every block handed out
/// in this cluster: the lock host (the Linux control plane with the lowest
/// address) answered, recording this cluster, or the cluster is new (no
/// node that answered records a cluster, and the state file has no block).
pub(super) fn registry_complete(
    inv: &Inventory,
    state: &crate::state::State,
    observed: &Observed,
    name: &str,
    id: &str,
) -> bool {
    let Some(o) = observed else { return false };
    let fresh = state.pod_cidrs.is_empty() && o.values().all(|r| r.cluster.is_none());
    inv.hosts
        .iter()
        .filter(|h| h.keeps_lock())
        .min_by_key(|h| h.address)
        .and_then(|h| o.get(&h.name.to_ascii_lowercase()))
        .is_some_and(|r| match &r.cluster {
            None => fresh,
            Some((n, i)) => n == name && i == id,
        })
}
