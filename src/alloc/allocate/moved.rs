//! Blocks nobody may be given: removed hosts', and those the cluster's
//! registry gives a host this inventory does not have. Hosts of this
//! inventory at a new address: a move only with proof, the node at the new
//! address recording the block the cluster knew the host by, and this
//! cluster's id; then a kwinctl route via the former address to that block
//! is its own, and moves with it. Without proof the host is disputed and
//! keeps its former address for every other node. And kwinctl routes via an
//! address no host of this inventory has (nor the registry): to a block a
//! node of this inventory records (or is pinned), the node carrying it is at
//! fault; to any other block, another operator's node (reserved, left
//! alone).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::{Work, key};
use crate::alloc::Source;
use crate::inventory::{Host, nets_overlap};

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
    addresses(w);
    routes(w, &known);
    for (j, old) in &w.moved {
        let h = &w.inv.hosts[*j];
        let block = w.claims[*j].map(|c| c.net.to_string()).unwrap_or_default();
        w.notes.push(format!(
            "{} moved from {old} to {}: it keeps {block} (the host at {} records it and this \
             cluster's id); every peer's route to it moves to the new address, and the route via \
             {old} goes",
            h.name, h.address, h.address,
        ));
    }
    others_registered(w);
}

/// Where the cluster knows a host of this inventory, and its block there:
/// the state file's, else the registry's. `None` when either already has
/// the inventory's address (or neither knows the host).
fn known_at(w: &Work, h: &Host) -> Option<(Ipv4Addr, Ipv4Net)> {
    let k = key(h);
    let state = w
        .state
        .hosts
        .get(&k)
        .zip(w.state.pod_cidrs.get(&k))
        .map(|(known, net)| (known.address, *net));
    let registry = w.registry.get(&k).map(|e| (e.address, e.pod_cidr));
    if [state, registry]
        .iter()
        .flatten()
        .any(|(a, _)| *a == h.address)
    {
        return None;
    }
    state.or(registry)
}

/// Hosts at another address than the cluster knows them at: moved when the
/// node at the new address proves it, disputed otherwise (only when the
/// nodes were asked: `check` asks none and judges no move).
fn addresses(w: &mut Work) {
    if w.observed.is_none() {
        return;
    }
    let (name, id) = (&w.inv.cluster.name, &w.cluster_id);
    for (i, h) in w.inv.hosts.iter().enumerate() {
        if w.disputes.contains_key(&i) {
            continue;
        }
        let Some((old, block)) = known_at(w, h) else {
            continue;
        };
        let new = h.address;
        let saw = match w.record(h) {
            None => format!("the host at {new} did not answer"),
            Some(r) => match (r.pod_cidr, &r.cluster) {
                (None, _) => format!("the host at {new} records no pod CIDR"),
                (Some(n), _) if n != block => format!("the host at {new} records {n}"),
                (Some(_), None) => format!("the host at {new} records {block} but no cluster"),
                (Some(_), Some((n, i))) if n != name || i != id => {
                    format!("the host at {new} records cluster {n:?} (id {i})")
                }
                (Some(_), Some(_)) => {
                    w.moved.insert(i, old);
                    continue;
                }
            },
        };
        let who = &h.name;
        w.disputes.insert(
            i,
            format!(
                "the inventory puts {who} at {new}, but the cluster knows {who} at {old} with \
                 {block}, and {saw}: no proof that {who} moved, so nothing was changed for it (no \
                 route, record or firewall rule). If {new} is a typo, put back {old}; if {who} was \
                 rebuilt at {new} without its record, remove it from the inventory and run \
                 `kwinctl reset --limit {who}` before adding it again"
            ),
        );
        w.refused.insert(i, old);
        w.claims[i] = None;
    }
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

/// The nodes' kwinctl routes: via a host's former address (its own when it
/// moved; left to its dispute when the move is refused), to a block a host
/// of this inventory claims via an address nobody has (the node carrying
/// it is disputed), or to another block via an address nobody has (left
/// alone, reserved).
fn routes(w: &mut Work, known: &BTreeSet<Ipv4Addr>) {
    let former = former(w, known);
    let cc = w.inv.cluster.cluster_cidr;
    for (i, h) in w.inv.hosts.iter().enumerate() {
        for (dst, via) in w.record(h).map(|r| r.routes.as_slice()).unwrap_or(&[]) {
            let Some(v) = via else { continue };
            if let Some(&j) = former.get(v) {
                if w.refused.contains_key(&j) {
                    continue;
                }
                if w.claims[j].is_some_and(|c| c.net == *dst) {
                    w.moved.entry(j).or_insert(*v);
                    continue;
                }
            }
            if known.contains(v) || !cc.contains(dst) {
                continue;
            }
            let registered = w.registry.values().any(|e| e.address == *v);
            if let Some(j) = owner(w, i, dst).filter(|_| !registered) {
                let why = format!(
                    "the node carries a kwinctl route to {dst}, {}'s block, via {v}, an address no host \
                     of this inventory has: a node routes a peer's block only via that peer. Nothing \
                     was changed on {}; delete that route on it, or reset it (`kwinctl reset --limit \
                     {}`)",
                    w.inv.hosts[j].name, h.name, h.name
                );
                w.disputes.entry(i).or_insert(why);
                w.claims[i] = None;
                continue;
            }
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

/// Another host of this inventory (not `i`) whose node records a block
/// `dst` overlaps, or whose pin it overlaps: a block that is its own, not
/// one the state file only plans for it.
fn owner(w: &Work, i: usize, dst: &Ipv4Net) -> Option<usize> {
    (0..w.inv.hosts.len()).find(|&j| {
        j != i
            && !w.disputes.contains_key(&j)
            && w.claims[j].is_some_and(|c| {
                matches!(c.source, Source::Node | Source::Pinned) && nets_overlap(&c.net, dst)
            })
    })
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

    fn members(a: &crate::alloc::Allocation, i: &crate::inventory::Inventory) -> Vec<Ipv4Addr> {
        crate::alloc::nodes(i, a)[0].member_addresses()
    }

    #[test]
    fn a_new_address_is_a_move_only_when_the_node_there_proves_it() {
        use crate::alloc::allocate;
        // b was at 198.18.1.3 with 198.19.1.0/24; the inventory now says .50
        let s = state(&[
            ("a", "198.19.0.0/24", "198.18.1.2"),
            ("b", "198.19.1.0/24", "198.18.1.3"),
            ("c", "198.19.2.0/24", "198.18.1.4"),
        ]);
        let moved = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.50", None),
            ("c", "198.18.1.4", None),
        ]);
        let old: Ipv4Addr = "198.18.1.3".parse().unwrap();
        let seen = |b: Option<&str>| {
            let mut list = vec![("a", "198.19.0.0/24"), ("c", "198.19.2.0/24")];
            list.extend(b.map(|b| ("b", b)));
            let mut seen = records(&list);
            for h in ["a", "c"] {
                seen.as_mut().unwrap().get_mut(h).unwrap().routes =
                    vec![(net("198.19.1.0/24"), Some(old))];
            }
            seen
        };
        let mut no_cluster = seen(Some("198.19.1.0/24"));
        no_cluster.as_mut().unwrap().get_mut("b").unwrap().cluster = None;
        let cases = [
            (seen(None), "the host at 198.18.1.50 did not answer"),
            (
                seen(Some("")),
                "the host at 198.18.1.50 records no pod CIDR",
            ),
            (
                seen(Some("198.19.7.0/24")),
                "the host at 198.18.1.50 records 198.19.7.0/24",
            ),
            (
                no_cluster,
                "the host at 198.18.1.50 records 198.19.1.0/24 but no cluster",
            ),
        ];
        for (seen, saw) in cases {
            let a = allocate(&moved, &s, &seen).unwrap();
            let why = &a.dispute("b").expect("b is disputed").reason;
            assert!(
                why.starts_with(&format!(
                    "the inventory puts b at 198.18.1.50, but the cluster knows b at 198.18.1.3 \
                     with 198.19.1.0/24, and {saw}: "
                )),
                "{why}"
            );
            assert_eq!(a.disputes.len(), 1, "{:?}", a.disputes);
            assert!(
                !a.notes.iter().any(|n| n.contains("moved from")),
                "{:?}",
                a.notes
            );
            // nothing moves: the routes via the old address are frozen,
            // every other node keeps b's old address, as the state file and
            // the registry do
            assert!(a.frozen.route(&net("198.19.1.0/24"), Some(old)).is_some());
            assert_eq!(a.state.hosts["b"].address, old);
            assert_eq!(a.state.pod_cidrs["b"], net("198.19.1.0/24"));
            let b = a.registry.iter().find(|e| e.host == "b").unwrap();
            assert_eq!((b.address, b.pod_cidr), (old, net("198.19.1.0/24")));
            let m = members(&a, &moved);
            assert!(
                m.contains(&old) && !m.contains(&"198.18.1.50".parse().unwrap()),
                "{m:?}"
            );
        }
        // the node at the new address records b's block and the cluster
        let a = allocate(&moved, &s, &seen(Some("198.19.1.0/24"))).unwrap();
        assert!(a.disputes.is_empty(), "{:?}", a.disputes);
        assert!(
            a.notes.iter().any(|n| n.starts_with(
                "b moved from 198.18.1.3 to 198.18.1.50: it keeps 198.19.1.0/24 (the host at \
                 198.18.1.50 records it and this cluster's id)"
            )),
            "{:?}",
            a.notes
        );
        assert!(members(&a, &moved).contains(&"198.18.1.50".parse().unwrap()));
        // without asking the nodes (`check`) no move is judged
        assert!(allocate(&moved, &s, &None).unwrap().disputes.is_empty());
    }

    #[test]
    fn a_node_routing_a_peer_s_block_elsewhere_is_the_one_disputed() {
        use crate::alloc::allocate;
        // c carries a kwinctl route to b's block via 198.18.1.99, an address
        // no host has: c is at fault; b keeps its block and its peers' routes
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let mut seen = records(&[
            ("a", "198.19.0.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.2.0/24"),
        ]);
        let fake: Ipv4Addr = "198.18.1.99".parse().unwrap();
        seen.as_mut().unwrap().get_mut("c").unwrap().routes =
            vec![(net("198.19.1.0/24"), Some(fake))];
        let a = allocate(&i, &state(&[]), &seen).unwrap();
        let disputed: Vec<&str> = a.disputes.iter().map(|d| d.host.as_str()).collect();
        assert_eq!(disputed, ["c"]);
        assert!(
            a.disputes[0].reason.starts_with(
                "the node carries a kwinctl route to 198.19.1.0/24, b's block, via 198.18.1.99"
            ),
            "{}",
            a.disputes[0].reason
        );
        let b = a.assignment("b").unwrap();
        assert_eq!(b.pod_cidr, net("198.19.1.0/24"));
        let b_addr: Ipv4Addr = "198.18.1.3".parse().unwrap();
        assert!(a.frozen.route(&b.pod_cidr, Some(b_addr)).is_none());
        assert_eq!(crate::alloc::nodes(&i, &a)[0].routes()[&b.pod_cidr], b_addr);
        // a route via an address the registry has (another operator's node)
        // is no fault of the node carrying it: that block is reserved
        seen.as_mut().unwrap().get_mut("a").unwrap().registry = vec![Registered {
            host: "z".into(),
            pod_cidr: net("198.19.1.0/24"),
            address: fake,
        }];
        let a = allocate(&i, &state(&[]), &seen).unwrap();
        assert!(a.dispute("c").is_none(), "{:?}", a.disputes);
    }
}
