//! Blocks nobody may be given: removed hosts', those kwinctl routes
//! somewhere via an address no host of this inventory has, and those the
//! cluster's registry gives a host this inventory does not have. And hosts
//! of this inventory that moved: a kwinctl route via the address the state
//! file (or the registry) had for one, to the block it still claims, is its
//! own, and moves with it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use super::{Work, key};

pub(super) fn reserve(w: &mut Work) {
    w.reserved = w
        .removed
        .iter()
        .map(|(k, r)| {
            (
                r.pod_cidr,
                format!(
                    "removed host {k} may still hold it until `kwinctl reset --limit {k}` reaches it"
                ),
            )
        })
        .collect();
    let known: BTreeSet<Ipv4Addr> = w
        .inv
        .hosts
        .iter()
        .map(|h| h.address)
        .chain(w.removed.values().filter_map(|r| r.address))
        .collect();
    routes(w, &known);
    for (j, old) in &w.moved {
        let h = &w.inv.hosts[*j];
        w.notes.push(format!(
            "{} moved from {old} to {}: it keeps {} (its record and the state file name it); every \
             peer's route to it moves to the new address, and the route via {old} goes",
            h.name,
            h.address,
            w.claims[*j].map(|c| c.net.to_string()).unwrap_or_default()
        ));
    }
    others_registered(w);
}

/// The address the state file (or the registry) had for a host of this
/// inventory, that no host has any more: that host's, by index.
fn former(w: &Work, known: &BTreeSet<Ipv4Addr>) -> BTreeMap<Ipv4Addr, usize> {
    let mut former = BTreeMap::new();
    for (i, h) in w.inv.hosts.iter().enumerate() {
        let old = w
            .state
            .hosts
            .get(&key(h))
            .map(|k| k.address)
            .into_iter()
            .chain(w.registry.get(&key(h)).map(|e| e.address));
        for a in old {
            if !known.contains(&a) {
                former.insert(a, i);
            }
        }
    }
    former
}

/// The nodes' kwinctl routes: via a moved host's former address to its
/// block (it moved), or via an address nobody has (left alone, reserved).
fn routes(w: &mut Work, known: &BTreeSet<Ipv4Addr>) {
    let former = former(w, known);
    let cc = w.inv.cluster.cluster_cidr;
    for h in &w.inv.hosts {
        for (dst, via) in w.record(h).map(|r| r.routes.as_slice()).unwrap_or(&[]) {
            if let Some(v) = via
                && let Some(&j) = former.get(v)
                && w.claims[j].is_some_and(|c| c.net == *dst)
            {
                w.moved.insert(j, *v);
                continue;
            }
            if let Some(v) = via
                && !known.contains(v)
                && cc.contains(dst)
            {
                let why = format!(
                    "{} routes it via {v} (a kwinctl route), an address no host of this inventory has: \
                     another operator's node, or a removed one; left alone",
                    h.name
                );
                if !w.frozen.vias.contains_key(v) {
                    w.notes.push(format!("{dst} via {v}: {why}"));
                }
                w.frozen.vias.insert(*v, why.clone());
                w.frozen.dsts.insert(*dst, why.clone());
                w.reserved.push((*dst, why));
            }
        }
    }
}

/// What the registry gives a host this inventory does not have (and did
/// not remove): another operator's, left alone.
fn others_registered(w: &mut Work) {
    for e in w.registry.values() {
        if w.inv.host(&e.host).is_some() || w.removed.contains_key(&e.host) {
            continue;
        }
        let why = format!(
            "the cluster's registry (on the lock host) gives it to {} ({}), a host this inventory does \
             not have: another operator's; left alone",
            e.host, e.address
        );
        w.notes.push(format!("{}: {why}", e.pod_cidr));
        w.frozen
            .vias
            .entry(e.address)
            .or_insert_with(|| why.clone());
        w.frozen
            .dsts
            .entry(e.pod_cidr)
            .or_insert_with(|| why.clone());
        w.reserved.push((e.pod_cidr, why));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, net, records, state};
    use super::super::{claims::claims, removed::removed};
    use super::*;
    use crate::alloc::Registered;

    #[test]
    fn a_moved_host_keeps_its_routes_and_strangers_blocks_are_reserved() {
        // a moved from .9 to .2; b routes a's block via .9, and another
        // block via .7, an address nobody here has; the registry gives a
        // third block to z, a host of another operator
        let i = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let s = state(&[
            ("a", "198.19.1.0/24", "198.18.1.9"),
            ("b", "198.19.2.0/24", "198.18.1.3"),
        ]);
        let mut seen = records(&[("a", "198.19.1.0/24"), ("b", "198.19.2.0/24")]);
        let b = seen.as_mut().unwrap().get_mut("b").unwrap();
        b.routes = vec![
            (net("198.19.1.0/24"), Some("198.18.1.9".parse().unwrap())),
            (net("198.19.7.0/24"), Some("198.18.1.7".parse().unwrap())),
        ];
        b.registry = vec![Registered {
            host: "z".into(),
            pod_cidr: net("198.19.8.0/24"),
            address: "198.18.1.8".parse().unwrap(),
        }];
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        removed(&mut w);
        claims(&mut w);
        reserve(&mut w);
        assert_eq!(
            w.moved.into_iter().collect::<Vec<_>>(),
            [(0, "198.18.1.9".parse().unwrap())]
        );
        let reserved: Vec<String> = w.reserved.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(reserved, ["198.19.7.0/24", "198.19.8.0/24"]);
        assert!(w.frozen.vias.contains_key(&"198.18.1.7".parse().unwrap()));
        assert!(w.frozen.vias.contains_key(&"198.18.1.8".parse().unwrap()));
        assert!(!w.frozen.vias.contains_key(&"198.18.1.9".parse().unwrap()));
        assert!(
            w.notes
                .iter()
                .any(|n| n.starts_with("a moved from 198.18.1.9 to 198.18.1.2"))
        );
    }
}
