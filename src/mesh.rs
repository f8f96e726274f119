//! The whole mesh, from the nodes' own tables: `verify` checks that every
//! node routes every other node's recorded block via that node's address,
//! and routes no block that nobody holds.
//!
//! Each host's own checks come from its diff, which follows the allocation
//! and leaves alone what the allocation froze (a block the registry gives
//! to a host of another inventory, say). This check follows only what the
//! nodes record — their pod CIDR, their cluster, and kwinctl's routes — so
//! a route the allocation left alone is still missed when it is missing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::alloc::NodeRecord;
use crate::verify::Check;

/// A node that answered, as the mesh check sees it.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    pub name: &'a str,
    pub address: Ipv4Addr,
    pub record: &'a NodeRecord,
}

/// The failed mesh checks, by lower-case host name: each names the node
/// lacking a route (or holding a stray one) and the node whose block it is.
/// `cluster`: (name, id) of this cluster; a node recording another cluster,
/// or no block, holds none here. `held`: blocks that hosts not asked in
/// this run hold (the registry's other hosts, removed hosts): a route to
/// one of them is not stray.
pub fn failures(
    members: &[Member],
    cluster: (&str, &str),
    held: &[Ipv4Net],
) -> BTreeMap<String, Vec<Check>> {
    let holders: Vec<(&Member, Ipv4Net)> = members
        .iter()
        .filter(|m| {
            m.record
                .cluster
                .as_ref()
                .is_some_and(|(n, i)| n == cluster.0 && i == cluster.1)
        })
        .filter_map(|m| Some((m, m.record.pod_cidr?.trunc())))
        .collect();
    let mut out: BTreeMap<String, Vec<Check>> = BTreeMap::new();
    for a in members {
        let mut checks = Vec::new();
        for (b, block) in &holders {
            if b.name.eq_ignore_ascii_case(a.name) {
                continue;
            }
            let has = a
                .record
                .routes
                .iter()
                .any(|(dst, via)| dst == block && *via == Some(b.address));
            if !has {
                let now = a
                    .record
                    .routes
                    .iter()
                    .find(|(dst, _)| dst == block)
                    .map(|(_, via)| match via {
                        Some(v) => format!(" (it routes it via {v})"),
                        None => " (it routes it on a local interface)".into(),
                    })
                    .unwrap_or_default();
                checks.push(Check {
                    name: format!("route {block}"),
                    pass: false,
                    detail: format!(
                        "{} has no route to {}'s block {block} via {}{now}, so its pods cannot \
                         reach {}'s: `kwinctl up` adds it",
                        a.name, b.name, b.address, b.name
                    ),
                });
            }
        }
        let own = a.record.pod_cidr.map(|n| n.trunc());
        for (dst, via) in &a.record.routes {
            let Some(via) = via else { continue };
            if Some(*dst) == own
                || holders.iter().any(|(_, n)| n == dst)
                || held.iter().any(|n| crate::inventory::nets_overlap(n, dst))
            {
                continue;
            }
            checks.push(Check {
                name: format!("stale route {dst}"),
                pass: false,
                detail: format!(
                    "{} routes {dst} via {via}, a block no node holds (no node that answered \
                     records it, and the cluster's registry gives it to nobody): `kwinctl up` \
                     removes it",
                    a.name
                ),
            });
        }
        if !checks.is_empty() {
            out.insert(a.name.to_ascii_lowercase(), checks);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cidr: &str, routes: &[(&str, &str)]) -> NodeRecord {
        NodeRecord {
            pod_cidr: Some(cidr.parse().unwrap()),
            cluster: Some(("t".into(), "id".into())),
            routes: routes
                .iter()
                .map(|(d, v)| (d.parse().unwrap(), Some(v.parse().unwrap())))
                .collect(),
            ..NodeRecord::default()
        }
    }

    #[test]
    fn a_missing_route_names_both_nodes_and_a_full_mesh_passes() {
        let cp = rec("198.19.4.0/24", &[("198.19.6.0/24", "198.18.1.4")]);
        let lin = rec(
            "198.19.6.0/24",
            &[
                ("198.19.4.0/24", "198.18.1.2"),
                ("198.19.5.0/24", "198.18.1.5"),
            ],
        );
        let win = rec(
            "198.19.5.0/24",
            &[
                ("198.19.4.0/24", "198.18.1.2"),
                ("198.19.6.0/24", "198.18.1.4"),
            ],
        );
        let members = [
            Member {
                name: "k8s-cp01",
                address: "198.18.1.2".parse().unwrap(),
                record: &cp,
            },
            Member {
                name: "lin",
                address: "198.18.1.4".parse().unwrap(),
                record: &lin,
            },
            Member {
                name: "win-node01",
                address: "198.18.1.5".parse().unwrap(),
                record: &win,
            },
        ];
        let f = failures(&members, ("t", "id"), &[]);
        assert_eq!(f.keys().collect::<Vec<_>>(), ["k8s-cp01"]);
        let c = &f["k8s-cp01"][0];
        assert_eq!(c.name, "route 198.19.5.0/24");
        assert!(
            c.detail.starts_with(
                "k8s-cp01 has no route to win-node01's block 198.19.5.0/24 via 198.18.1.5"
            ),
            "{}",
            c.detail
        );

        let cp = rec(
            "198.19.4.0/24",
            &[
                ("198.19.6.0/24", "198.18.1.4"),
                ("198.19.5.0/24", "198.18.1.5"),
            ],
        );
        let mut full = members.clone();
        full[0].record = &cp;
        assert!(failures(&full, ("t", "id"), &[]).is_empty());
        // a node of another cluster holds no block of this one: no route
        // to it is missing (the routes to its block are stray instead)
        let other = failures(&members, ("t", "other"), &[]);
        assert!(
            other
                .values()
                .flatten()
                .all(|c| c.name.starts_with("stale route ")),
            "{other:?}"
        );
    }

    #[test]
    fn a_route_to_a_block_nobody_holds_is_stray_unless_held_elsewhere() {
        let a = rec(
            "198.19.1.0/24",
            &[
                ("198.19.2.0/24", "198.18.1.3"),
                ("198.19.9.0/24", "198.18.1.9"),
            ],
        );
        let b = rec("198.19.2.0/24", &[("198.19.1.0/24", "198.18.1.2")]);
        let members = [
            Member {
                name: "a",
                address: "198.18.1.2".parse().unwrap(),
                record: &a,
            },
            Member {
                name: "b",
                address: "198.18.1.3".parse().unwrap(),
                record: &b,
            },
        ];
        let f = failures(&members, ("t", "id"), &[]);
        assert_eq!(f["a"].len(), 1);
        assert_eq!(f["a"][0].name, "stale route 198.19.9.0/24");
        assert!(f["a"][0].detail.contains("via 198.18.1.9"), "{:?}", f["a"]);
        let held: Ipv4Net = "198.19.9.0/24".parse().unwrap();
        assert!(failures(&members, ("t", "id"), &[held]).is_empty());
    }
}
