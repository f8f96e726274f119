//! Stage 4 of the authority order: new blocks, lowest first, in inventory
//! order, only when every block somebody may hold is known.

use std::collections::BTreeSet;

use ipnet::Ipv4Net;

use super::{Claim, Work};
use crate::alloc::registry::registry_complete;
use crate::alloc::{AllocError, Source};

pub(super) fn assign(w: &mut Work) -> Result<(), AllocError> {
    let (inv, cc, prefix) = (w.inv, w.inv.cluster.cluster_cidr, w.inv.cluster.node_prefix);
    let mut taken = taken(w);
    let odd: Vec<Ipv4Net> = w.reserved.iter().map(|(n, _)| *n).collect();
    let mut candidates = cc
        .subnets(prefix)
        .map_err(|e| AllocError(format!("cannot split {cc} into /{prefix}: {e}")))?;
    let unknown_names: Vec<&str> = w
        .unknown
        .iter()
        .map(|i| inv.hosts[*i].name.as_str())
        .collect();
    let proven_empty = proven_empty(w, &unknown_names);
    for (i, h) in inv.hosts.iter().enumerate() {
        if w.claims[i].is_some() || w.disputes.contains_key(&i) || w.unknown.contains(&i) {
            continue;
        }
        if !w.unknown.is_empty() && !proven_empty {
            w.disputes.insert(
                i,
                format!(
                    "needs a new block, but the blocks of {} are unknown (not reachable, and not in the \
                     state file): kwinctl will not guess. Run again when they answer, or pin `pod_cidr` \
                     for {}",
                    unknown_names.join(", "),
                    h.name
                ),
            );
            continue;
        }
        let block = loop {
            match candidates.next() {
                Some(c) if taken.contains(&c) => continue,
                Some(c) if odd.iter().any(|r| crate::inventory::nets_overlap(r, &c)) => continue,
                Some(c) if c.contains(&h.address) => continue,
                Some(c) => break c,
                None => {
                    return Err(AllocError(format!(
                        "cluster CIDR {cc} has no free /{prefix} block left for host {}: use a larger cluster_cidr",
                        h.name
                    )));
                }
            }
        };
        taken.insert(block);
        w.claims[i] = Some(Claim {
            net: block,
            source: Source::New,
        });
    }
    for i in &w.unknown {
        w.disputes.entry(*i).or_insert_with(|| {
            "not reachable, and not in the state file: its block is unknown".to_string()
        });
    }
    Ok(())
}

/// Every block claimed, and every block a node or the state file names,
/// whoever's and however disputed.
fn taken(w: &Work) -> BTreeSet<Ipv4Net> {
    let mut taken: BTreeSet<Ipv4Net> = w.claims.iter().flatten().map(|c| c.net).collect();
    for h in &w.inv.hosts {
        taken.extend(w.record(h).and_then(|r| r.pod_cidr).map(|n| n.trunc()));
        taken.extend(h.pod_cidr);
    }
    taken.extend(w.state.pod_cidrs.values().map(|n| n.trunc()));
    taken
}

/// Hosts that did not answer and are in neither the state file nor the
/// registry hold no block when the lock host answered for this cluster
/// (or for none yet: a fresh bring-up): every run registers a block there
/// before any node records it. Then they hold nobody up (a note says so).
fn proven_empty(w: &mut Work, unknown_names: &[&str]) -> bool {
    let n = w.unknown.len();
    let proven = n > 0
        && registry_complete(
            w.inv,
            w.state,
            w.observed,
            &w.inv.cluster.name,
            &w.cluster_id,
        );
    if proven {
        w.notes.push(format!(
            "{} did not answer and {} no block: the cluster's registry on the lock host lists none \
             for {}, and the state file neither; the other new hosts get theirs",
            unknown_names.join(", "),
            if n == 1 { "holds" } else { "hold" },
            if n == 1 { "it" } else { "them" },
        ));
    }
    proven
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, records, state};
    use super::super::{Work, claims::claims};
    use super::*;

    fn blocks(w: &Work) -> Vec<Option<String>> {
        w.claims
            .iter()
            .map(|c| c.map(|c| c.net.to_string()))
            .collect()
    }

    #[test]
    fn new_blocks_are_the_lowest_neither_taken_nor_reserved() {
        // 198.19.1.0/24 is a's, .2 is reserved
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let s = state(&[("a", "198.19.1.0/24", "198.18.1.2")]);
        let mut w = Work::new(&i, &s, &None).unwrap();
        claims(&mut w);
        w.reserved
            .push(("198.19.2.0/24".parse().unwrap(), "x".into()));
        assign(&mut w).unwrap();
        assert_eq!(
            blocks(&w),
            [
                Some("198.19.1.0/24".into()),
                Some("198.19.0.0/24".into()),
                Some("198.19.3.0/24".into())
            ]
        );
        assert!(w.disputes.is_empty());
    }

    #[test]
    fn an_unknown_block_holds_new_hosts_back_and_a_full_cidr_is_an_error() {
        // c did not answer and nothing names its block; the lock host (none:
        // no control plane here) cannot prove it holds none
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let s = state(&[("a", "198.19.1.0/24", "198.18.1.2")]);
        let seen = records(&[("a", "198.19.1.0/24"), ("b", "")]);
        let mut w = Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        assign(&mut w).unwrap();
        assert_eq!(blocks(&w), [Some("198.19.1.0/24".into()), None, None]);
        assert!(w.disputes[&1].starts_with("needs a new block, but the blocks of c are unknown"));
        assert!(w.disputes[&2].starts_with("not reachable"));

        let mut small = i.clone();
        small.cluster.cluster_cidr = "198.19.0.0/23".parse().unwrap();
        let mut w = Work::new(&small, &s, &None).unwrap();
        claims(&mut w);
        let e = assign(&mut w).unwrap_err();
        assert!(e.0.contains("no free /24 block left for host c"), "{e}");
    }
}
