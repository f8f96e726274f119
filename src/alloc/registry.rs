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

/// Every node that records the cluster's lock host names this inventory's
/// (`super::lock_host_name`). An inventory that picks another (a copy that
/// marks another host `role: control-plane`) would take another lock and
/// read another registry: its runs and the cluster's would never exclude
/// each other, and it could hand out a block the real registry lists. It
/// is refused before anything changes, with both names.
pub(super) fn same_lock_host(inv: &Inventory, observed: &Observed) -> Result<(), String> {
    let Some(o) = observed else { return Ok(()) };
    let ours = super::lock_host_name(inv);
    let mut theirs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for h in &inv.hosts {
        if let Some(l) = o
            .get(&h.name.to_ascii_lowercase())
            .and_then(|r| r.lock_host.as_deref())
            .filter(|l| *l != ours)
        {
            theirs.entry(l).or_default().push(&h.name);
        }
    }
    let Some((other, nodes)) = theirs.into_iter().next() else {
        return Ok(());
    };
    let ours = if ours.is_empty() {
        "none (it has no Linux `role: control-plane` host)".to_string()
    } else {
        format!("{ours} (its Linux `role: control-plane` host with the lowest address)")
    };
    Err(format!(
        "{} record{} {other} as the host that keeps the cluster's lock and registry, but this \
         inventory's lock host is {ours}: two inventories of one cluster must pick one lock host, \
         or their runs never exclude each other and one can hand out a block the other's registry \
         lists. Nothing was changed. Make {other} this inventory's Linux `role: control-plane` \
         host with the lowest address (if the lock host really moved, see docs/locks.md)",
        nodes.join(", "),
        if nodes.len() == 1 { "s" } else { "" },
    ))
}

/// Whether the registry the nodes reported lists every block handed out
/// in this cluster: the lock host (the Linux control plane with the lowest
/// address) answered, recording this cluster and keeping a registry (a
/// lock host of an existing cluster without one is incomplete, never
/// empty), or the cluster is new (no node that answered records a
/// cluster, and the state file has no block).
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
            Some((n, i)) => n == name && i == id && !r.registry.is_empty(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::NodeRecord;

    /// h1 (the lock host) and h2, both Linux control planes when `both`.
    fn inv(both: bool) -> Inventory {
        let role = if both {
            "    role: control-plane\n"
        } else {
            ""
        };
        let s = format!(
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: https://198.18.1.2:6443\nhosts:\n  - name: h1\n    os: linux\n    \
             role: control-plane\n    address: 198.18.1.2\n  - name: h2\n    os: linux\n{role}    \
             address: 198.18.1.3\n"
        );
        Inventory::parse(std::path::Path::new("i.yaml"), &s).unwrap()
    }

    fn rec(lock_host: Option<&str>, registry: &[&str]) -> NodeRecord {
        NodeRecord {
            pod_cidr: Some("198.19.0.0/24".parse().unwrap()),
            cluster: Some(("t".into(), "x".into())),
            lock_host: lock_host.map(str::to_string),
            registry: registry
                .iter()
                .filter_map(|l| super::super::Registered::parse(l))
                .collect(),
            ..NodeRecord::default()
        }
    }

    #[test]
    fn an_inventory_that_picks_another_lock_host_is_refused_with_both_names() {
        // the nodes record h2 as the lock host; this inventory's is h1
        let o: Observed = Some(BTreeMap::from([
            ("h1".to_string(), rec(Some("h2"), &[])),
            ("h2".to_string(), rec(Some("h2"), &[])),
        ]));
        let e = same_lock_host(&inv(true), &o).unwrap_err();
        assert!(
            e.starts_with("h1, h2 record h2 as the host that keeps"),
            "{e}"
        );
        assert!(e.contains("this inventory's lock host is h1"), "{e}");
        // the same lock host, or none recorded (an older kwinctl's record)
        let o: Observed = Some(BTreeMap::from([
            ("h1".to_string(), rec(Some("h1"), &[])),
            ("h2".to_string(), rec(None, &[])),
        ]));
        assert_eq!(same_lock_host(&inv(false), &o), Ok(()));
        assert_eq!(same_lock_host(&inv(false), &None), Ok(()));
    }

    #[test]
    fn a_lock_host_without_a_registry_is_incomplete_not_empty() {
        let state = crate::state::State::default();
        let with = |registry: &[&str]| -> Observed {
            Some(BTreeMap::from([(
                "h1".to_string(),
                rec(Some("h1"), registry),
            )]))
        };
        assert!(!registry_complete(
            &inv(false),
            &state,
            &with(&[]),
            "t",
            "x"
        ));
        let listed = with(&["h1 198.19.0.0/24 198.18.1.2"]);
        assert!(registry_complete(&inv(false), &state, &listed, "t", "x"));
    }
}
