//! Collisions. Two node records, or a record and another host's pin, are
//! disputes; a record or a pin beats the state file; nothing may take a
//! reserved block that a node records.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use super::{Claim, Work};
use crate::alloc::Source;

pub(super) fn settle(w: &mut Work) {
    shared(w);
    reserved(w);
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
        // a and b record one block; d's state entry is c's record; e's
        // record is a reserved block
        let s = state(&[("d", "198.19.3.0/24", "198.18.1.5")]);
        let seen = records(&[
            ("a", "198.19.1.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.3.0/24"),
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
}
