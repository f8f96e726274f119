//! Stages 1-3 of the authority order: each host's claim, from its node's
//! record, its pin, or the state file (or the cluster's registry); a record
//! that cannot be a claim is a dispute.

use super::{Claim, Work, key};
use crate::alloc::Source;

pub(super) fn claims(w: &mut Work) {
    for i in 0..w.inv.hosts.len() {
        claim(w, i);
    }
}

fn claim(w: &mut Work, i: usize) {
    let (inv, state) = (w.inv, w.state);
    let h = &inv.hosts[i];
    let (cc, prefix, name) = (
        inv.cluster.cluster_cidr,
        inv.cluster.node_prefix,
        &inv.cluster.name,
    );
    let sound =
        |n: &ipnet::Ipv4Net| n.prefix_len() == prefix && cc.contains(n) && n.network() == n.addr();
    let rec = w.record(h);
    if let Some((n, id)) = rec.and_then(|r| r.cluster.as_ref())
        && (n != name || *id != w.cluster_id)
    {
        let cluster_id = &w.cluster_id;
        let why = format!(
            "the node belongs to cluster {n:?} (id {id}), not to {name:?} (id {cluster_id}): \
             nothing was changed on it; if it should join this cluster, run `kwinctl reset` \
             with the other cluster's inventory first"
        );
        w.disputes.insert(i, why);
        return;
    }
    let mut claim = |net, source| w.claims[i] = Some(Claim { net, source });
    match (rec.and_then(|r| r.pod_cidr), h.pod_cidr) {
        (Some(r), _) if !sound(&r) => {
            w.disputes.insert(
                i,
                format!(
                    "the node records pod CIDR {r}, which is not a /{prefix} block of the cluster \
                     CIDR {cc}: fix the node's record or reset the node (`kwinctl reset --limit {}`)",
                    h.name
                ),
            );
        }
        (Some(r), Some(pin)) if r != pin => {
            w.disputes.insert(
                i,
                format!(
                    "the node records pod CIDR {r} but the inventory pins {pin}: nothing was changed \
                     on it. To move the node, run `kwinctl reset --limit {}` first; to keep it, pin \
                     `pod_cidr: {r}`",
                    h.name
                ),
            );
        }
        (Some(r), Some(_)) => claim(r, Source::Pinned),
        (Some(r), None) => {
            claim(r, Source::Node);
            match state.pod_cidrs.get(&key(h)) {
                Some(s) if *s != r => w.notes.push(format!(
                    "{}: the node records {r}; the state file had {s}: the node's record is kept",
                    h.name
                )),
                None => w.notes.push(format!(
                    "{}: the node records {r}; the state file had none: adopted",
                    h.name
                )),
                _ => {}
            }
        }
        (None, Some(pin)) => claim(pin, Source::Pinned),
        (None, None) => match state
            .pod_cidrs
            .get(&key(h))
            .or_else(|| w.registry.get(&key(h)).map(|e| &e.pod_cidr))
            .copied()
        {
            Some(s) if sound(&s) => claim(s, Source::State),
            Some(s) => w.notes.push(format!(
                "{}: the state file's {s} no longer fits cluster CIDR {cc} /{prefix}: a new block is assigned",
                h.name
            )),
            None if w.observed.is_some() && rec.is_none() => w.unknown.push(i),
            None => {}
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, records, state};
    use super::*;

    fn claimed(w: &Work) -> Vec<Option<(String, Source)>> {
        w.claims
            .iter()
            .map(|c| c.map(|c| (c.net.to_string(), c.source)))
            .collect()
    }

    #[test]
    fn a_record_beats_the_state_file_a_pin_beats_nothing_and_silence_is_unknown() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.9.0/24")),
            ("c", "198.18.1.4", None),
            ("d", "198.18.1.5", None),
            ("e", "198.18.1.6", None),
        ]);
        let s = state(&[
            ("a", "198.19.1.0/24", "198.18.1.2"),
            ("c", "198.19.3.0/24", "198.18.1.4"),
        ]);
        // a records another block than the state file; b and c did not
        // answer; d answered with no block; e did not answer and nothing
        // names its block
        let seen = records(&[("a", "198.19.5.0/24"), ("d", "")]);
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        assert_eq!(
            claimed(&w),
            [
                Some(("198.19.5.0/24".into(), Source::Node)),
                Some(("198.19.9.0/24".into(), Source::Pinned)),
                Some(("198.19.3.0/24".into(), Source::State)),
                None,
                None,
            ]
        );
        assert_eq!(w.unknown, [4]);
        assert!(w.disputes.is_empty());
        assert_eq!(
            w.notes,
            [
                "a: the node records 198.19.5.0/24; the state file had 198.19.1.0/24: the node's record is kept"
            ]
        );
    }

    #[test]
    fn unsound_records_contradicted_pins_and_other_clusters_are_disputes() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.9.0/24")),
            ("c", "198.18.1.4", None),
        ]);
        let mut seen = records(&[
            ("a", "198.19.1.0/25"),
            ("b", "198.19.2.0/24"),
            ("c", "198.19.3.0/24"),
        ]);
        seen.as_mut().unwrap().get_mut("c").unwrap().cluster =
            Some(("other".into(), "fedcba9876543210".into()));
        let s = state(&[]);
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        assert_eq!(claimed(&w), [None, None, None]);
        assert!(
            w.disputes[&0].contains("not a /24 block"),
            "{:?}",
            w.disputes
        );
        assert!(w.disputes[&1].contains("the inventory pins 198.19.9.0/24"));
        assert!(w.disputes[&2].contains("belongs to cluster \"other\""));
    }
}
