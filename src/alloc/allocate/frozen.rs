//! The last stage: what disputed hosts claim and where they are is frozen
//! (no route to it is added, replaced or removed); then the allocation is
//! written out, a disputed host keeping the state file's block.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Work, key};
use crate::alloc::{Allocation, Assignment, Dispute, gateway};
use crate::state::{Known, STATE_VERSION, State};

pub(super) fn freeze(w: &mut Work) {
    for (i, why) in &w.disputes {
        let h = &w.inv.hosts[*i];
        let why = format!("{} is disputed: {why}", h.name);
        w.frozen.vias.insert(h.address, why.clone());
        let claimed = w
            .record(h)
            .and_then(|r| r.pod_cidr)
            .into_iter()
            .chain(h.pod_cidr)
            .chain(w.state.pod_cidrs.get(&key(h)).copied());
        for net in claimed {
            w.frozen.dsts.insert(net.trunc(), why.clone());
        }
    }
    for (k, r) in &w.removed {
        w.notes.push(format!(
            "removed host {k} ({}{}) still awaits `kwinctl reset --limit {k}`; its block is not handed out until then",
            r.address.map(|a| format!("{a}, ")).unwrap_or_default(),
            r.pod_cidr
        ));
    }
}

/// The allocation the stages made: assignments and disputes in inventory
/// order, the state file and the registry to record.
pub(super) fn allocation(w: Work) -> Allocation {
    let (inv, state) = (w.inv, w.state);
    let mut assignments = Vec::new();
    let mut disputes = Vec::new();
    for (i, h) in inv.hosts.iter().enumerate() {
        if let Some(why) = w.disputes.get(&i) {
            disputes.push(Dispute {
                host: h.name.clone(),
                reason: why.clone(),
            });
        } else if let Some(c) = w.claims[i] {
            assignments.push(Assignment {
                host: h.name.clone(),
                os: h.os,
                address: h.address,
                pod_cidr: c.net,
                gateway: gateway(&c.net),
                source: c.source,
            });
        }
    }
    let mut pod_cidrs: BTreeMap<String, _> = assignments
        .iter()
        .map(|a| (a.host.to_ascii_lowercase(), a.pod_cidr))
        .collect();
    // A disputed host keeps what the state file had for it.
    for d in &disputes {
        let k = d.host.to_ascii_lowercase();
        if let Some(n) = state.pod_cidrs.get(&k) {
            pod_cidrs.insert(k, *n);
        }
    }
    // A host whose move is not proven stays where the cluster knew it.
    let unmoved: BTreeMap<String, _> = w
        .refused
        .iter()
        .map(|(i, a)| (key(&inv.hosts[*i]), *a))
        .collect();
    let mut hosts = state.hosts.clone();
    hosts.retain(|k, _| pod_cidrs.contains_key(k));
    for h in &inv.hosts {
        hosts.insert(
            key(h),
            Known {
                os: h.os,
                address: unmoved.get(&key(h)).copied().unwrap_or(h.address),
                node_name: (h.os == crate::inventory::Os::Windows).then(|| h.node_name()),
                // the trust the host entry carries, for a `reset` once it
                // is deleted from the inventory
                cert_sha256: match &h.connection {
                    crate::inventory::Connection::WinRm(w) => w.cert_sha256.clone(),
                    crate::inventory::Connection::Ssh(_) => None,
                },
            },
        );
    }
    hosts.retain(|k, _| pod_cidrs.contains_key(k));
    let registry = crate::alloc::registry::after(
        inv,
        w.registry,
        &assignments,
        &pod_cidrs,
        &w.removed,
        &unmoved,
    );
    Allocation {
        assignments,
        disputes,
        notes: w.notes,
        registry,
        frozen: Arc::new(w.frozen),
        unmoved,
        state: State {
            version: STATE_VERSION,
            cluster: inv.cluster.name.clone(),
            cluster_id: Some(w.cluster_id),
            cluster_cidr: Some(inv.cluster.cluster_cidr),
            pod_cidrs,
            hosts,
            removed: w.removed,
            ca_pin: state.ca_pin.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, net, records, state};
    use super::super::{Work, claims::claims};
    use super::*;

    #[test]
    fn a_disputed_host_is_frozen_and_keeps_the_state_file_s_block() {
        let i = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let s = state(&[
            ("a", "198.19.1.0/24", "198.18.1.2"),
            ("b", "198.19.2.0/24", "198.18.1.3"),
        ]);
        // b records an unsound block: disputed
        let seen = records(&[("a", "198.19.1.0/24"), ("b", "198.19.9.0/25")]);
        let mut w = Work::new(&i, &s, &seen).unwrap();
        claims(&mut w);
        freeze(&mut w);
        let why = w.frozen.route(&net("198.19.2.0/24"), None).unwrap();
        assert!(why.starts_with("b is disputed: "), "{why}");
        assert!(w.frozen.route(&net("198.19.9.0/24"), None).is_some());
        assert!(
            w.frozen
                .route(&net("198.19.1.0/24"), Some("198.18.1.3".parse().unwrap()))
                .is_some(),
            "routes via b's address"
        );
        assert!(w.frozen.route(&net("198.19.1.0/24"), None).is_none());
        let a = allocation(w);
        assert_eq!(a.assignments.len(), 1);
        assert_eq!(a.disputes[0].host, "b");
        assert_eq!(a.state.pod_cidrs["b"], net("198.19.2.0/24"));
        assert_eq!(
            a.registry.iter().map(|e| e.line()).collect::<Vec<_>>(),
            ["a 198.19.1.0/24 198.18.1.2", "b 198.19.2.0/24 198.18.1.3"]
        );
    }
}
