//! Collisions. Two node records, or a record and another host's pin, are
//! disputes; so is a record of a block the state file or the registry gives
//! another host that did not answer (a block moves only with proof); a
//! record or a pin beats the state file otherwise; nothing may take a
//! reserved block that a node records.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use super::{Claim, Work, key};
use crate::alloc::Source;
use crate::inventory::{Host, nets_overlap};

pub(super) fn settle(w: &mut Work) {
    silent(w);
    shared(w);
    reserved(w);
}

/// A node's record of a block that the registry (or the state file, when
/// the registry does not give the block to that node) gives another host of
/// this inventory that did not answer: the node that records it is
/// disputed, and the silent host keeps its claim. Only an answer settles
/// whose it is.
fn silent(w: &mut Work) {
    let (inv, state) = (w.inv, w.state);
    let Some(seen) = w.observed else { return };
    // the hosts that did not answer, with their keys: made once (each
    // node's record is held against every one of them)
    let unseen: Vec<(&Host, String)> = inv
        .hosts
        .iter()
        .map(|o| (o, key(o)))
        .filter(|(_, k)| !seen.contains_key(k))
        .collect();
    if unseen.is_empty() {
        return;
    }
    for i in 0..inv.hosts.len() {
        let Some(c) = w.claims[i] else { continue };
        let me = key(&inv.hosts[i]);
        if c.source != Source::Node || w.disputes.contains_key(&i) {
            continue;
        }
        let registered_mine = w.registry.get(&me).is_some_and(|e| e.pod_cidr == c.net);
        let given = unseen.iter().find_map(|(o, k)| {
            let by_registry = w
                .registry
                .get(k)
                .is_some_and(|e| nets_overlap(&e.pod_cidr, &c.net));
            let by_state = !registered_mine
                && state
                    .pod_cidrs
                    .get(k)
                    .is_some_and(|n| nets_overlap(n, &c.net));
            match (by_registry, by_state) {
                (true, _) => Some((o, "the cluster's registry (on the lock host)")),
                (false, true) => Some((o, "the state file")),
                _ => None,
            }
        });
        let Some((other, by)) = given else { continue };
        let (who, victim, net) = (&inv.hosts[i].name, &other.name, c.net);
        w.disputes.insert(
            i,
            format!(
                "{who} records {net}, but {by} gives {net} to {victim}, which did not answer: a block \
                 moves only with proof, so every route to {net} is left as it is and nothing was \
                 changed on {who}. Run again when {victim} answers; if {who} should not have \
                 {net}, reset it (`kwinctl reset --limit {who}`)"
            ),
        );
        w.claims[i] = None;
    }
}

/// Blocks two hosts claim.
fn shared(w: &mut Work) {
    let inv = w.inv;
    let mut by_net: BTreeMap<Ipv4Net, Vec<usize>> = BTreeMap::new();
    for (i, c) in w.claims.iter().enumerate() {
        if let Some(c) = c {
            by_net.entry(c.net).or_default().push(i);
        }
    }
    let strong = |c: &Claim| matches!(c.source, Source::Node | Source::Pinned);
    for (net, holders) in &by_net {
        let strong_ones: Vec<usize> = holders
            .iter()
            .copied()
            .filter(|i| w.claims[*i].as_ref().is_some_and(strong))
            .collect();
        if strong_ones.len() > 1 {
            let names: Vec<&str> = strong_ones
                .iter()
                .map(|i| inv.hosts[*i].name.as_str())
                .collect();
            for i in &strong_ones {
                w.disputes.insert(
                    *i,
                    format!(
                        "{} claim {net} (the nodes' records and the inventory's pins): two nodes cannot \
                         share a block. Nothing depending on it was changed; reset the node that should \
                         not have it (`kwinctl reset --limit NAME`), or fix its pin",
                        names.join(" and ")
                    ),
                );
            }
            continue;
        }
        for i in holders {
            if strong_ones.contains(i) || strong_ones.is_empty() && holders.len() == 1 {
                continue;
            }
            let h = &inv.hosts[*i];
            w.notes.push(format!(
                "{}: the state file's {net} is {}: a new block is assigned",
                h.name,
                if strong_ones.is_empty() {
                    "recorded for another host too".to_string()
                } else {
                    format!("held by {}", inv.hosts[strong_ones[0]].name)
                }
            ));
            w.claims[*i] = None;
        }
    }
}

/// Claims on a reserved block: a record's or a pin's is a dispute, the
/// state file's is given up.
fn reserved(w: &mut Work) {
    for (i, c) in w.claims.iter_mut().enumerate() {
        let Some(claim) = c else { continue };
        if w.disputes.contains_key(&i) {
            continue;
        }
        if let Some((_, why)) = w
            .reserved
            .iter()
            .find(|(r, _)| crate::inventory::nets_overlap(r, &claim.net))
        {
            match claim.source {
                Source::Node | Source::Pinned => {
                    w.disputes.insert(
                        i,
                        format!(
                            "{} is {} it, but {why}",
                            claim.net,
                            if claim.source == Source::Node {
                                "the node's record of"
                            } else {
                                "pinned for"
                            }
                        ),
                    );
                }
                _ => *c = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, net, records, state};
    use super::super::{Work, claims::claims};
    use super::*;

    #[test]
    fn two_records_are_disputed_a_state_entry_yields_and_a_reserved_block_is_refused() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
            ("d", "198.18.1.5", None),
            ("e", "198.18.1.6", None),
        ]);
        // a and b record one block; d's state entry is c's record (d
        // answered, recording none); e's record is a reserved block
        let s = state(&[("d", "198.19.3.0/24", "198.18.1.5")]);
        let seen = records(&[
            ("a", "198.19.1.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.3.0/24"),
            ("d", ""),
            ("e", "198.19.5.0/24"),
        ]);
        let mut w = Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        w.reserved
            .push((net("198.19.5.0/24"), "another operator's".into()));
        settle(&mut w);
        assert_eq!(w.disputes.keys().copied().collect::<Vec<_>>(), [0, 1, 4]);
        assert!(w.disputes[&0].starts_with("a and b claim 198.19.1.0/24"));
        assert_eq!(
            w.disputes[&4],
            "198.19.5.0/24 is the node's record of it, but another operator's"
        );
        assert!(w.claims[2].is_some() && w.claims[3].is_none());
        assert_eq!(
            w.notes.last().unwrap(),
            "d: the state file's 198.19.3.0/24 is held by c: a new block is assigned"
        );
    }

    #[test]
    fn a_record_of_a_block_given_to_a_silent_host_is_the_recorder_s_dispute() {
        use crate::alloc::Registered;
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
            ("d", "198.18.1.5", None),
        ]);
        // b is silent: the state file gives it .2; a records .2 (a
        // compromised node taking a silent one's block)
        let s = state(&[
            ("a", "198.19.1.0/24", "198.18.1.2"),
            ("b", "198.19.2.0/24", "198.18.1.3"),
            ("c", "198.19.3.0/24", "198.18.1.4"),
        ]);
        let seen = records(&[("a", "198.19.2.0/24"), ("c", "198.19.3.0/24"), ("d", "")]);
        let mut w = Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        settle(&mut w);
        assert_eq!(w.disputes.keys().copied().collect::<Vec<_>>(), [0]);
        assert!(
            w.disputes[&0].starts_with(
                "a records 198.19.2.0/24, but the state file gives 198.19.2.0/24 to b, which did not answer"
            ),
            "{}",
            w.disputes[&0]
        );
        assert!(w.claims[0].is_none());
        let b = w.claims[1].unwrap();
        assert_eq!((b.net, b.source), (net("198.19.2.0/24"), Source::State));

        // the registry giving the block to the recorder settles it: the
        // state file is stale; the registry giving it to the silent host
        // does not, whatever the state file says
        let reg = |host: &str, n: &str, a: &str| Registered {
            host: host.into(),
            pod_cidr: net(n),
            address: a.parse().unwrap(),
        };
        let mut seen2 = seen.clone();
        seen2.as_mut().unwrap().get_mut("c").unwrap().registry =
            vec![reg("a", "198.19.2.0/24", "198.18.1.2")];
        let mut w = Work::new(&i, &s, &seen2).unwrap();
        claims(&mut w);
        settle(&mut w);
        assert!(w.disputes.is_empty(), "{:?}", w.disputes);
        assert_eq!(w.claims[0].unwrap().source, Source::Node);

        let s2 = state(&[("a", "198.19.1.0/24", "198.18.1.2")]);
        seen2.as_mut().unwrap().get_mut("c").unwrap().registry =
            vec![reg("b", "198.19.2.0/24", "198.18.1.3")];
        let mut w = Work::new(&i, &s2, &seen2).unwrap();
        claims(&mut w);
        settle(&mut w);
        assert!(
            w.disputes[&0]
                .contains("the cluster's registry (on the lock host) gives 198.19.2.0/24 to b"),
            "{:?}",
            w.disputes
        );
    }
}
