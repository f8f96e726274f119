//! Pod CIDR allocation and what each node should be, as seen by the others.
//!
//! Allocation is a pure function of (inventory, recorded state): pins win,
//! recorded assignments are kept, new hosts get the lowest free block in
//! inventory order. So a host keeps its block when hosts are reordered, added
//! or removed, and `check`/`plan` show exactly what `up` will record.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::inventory::{Host, Inventory, Os, nets_overlap};
use crate::state::State;

/// Where a host's pod CIDR came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Pinned,
    Recorded,
    New,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Pinned => "pinned",
            Source::Recorded => "recorded",
            Source::New => "new",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Assignment {
    pub host: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub source: Source,
}

#[derive(Debug, Clone)]
pub struct Allocation {
    pub assignments: Vec<Assignment>,
    /// Things the operator should know (a pin overriding a recorded block, …).
    pub notes: Vec<String>,
    /// The state to record after this allocation.
    pub state: State,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AllocError(pub String);

/// The first usable address of a block: the pod network's gateway.
pub fn gateway(net: &Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

pub fn allocate(inv: &Inventory, state: &State) -> Result<Allocation, AllocError> {
    let cc = inv.cluster.cluster_cidr;
    let prefix = inv.cluster.node_prefix;
    let mut notes = Vec::new();
    let mut taken: BTreeSet<Ipv4Net> = BTreeSet::new();
    let mut chosen: Vec<Option<(Ipv4Net, Source)>> = vec![None; inv.hosts.len()];
    let usable = |n: &Ipv4Net| n.prefix_len() == prefix && cc.contains(n);

    // 1. pins
    for (i, h) in inv.hosts.iter().enumerate() {
        if let Some(pin) = h.pod_cidr {
            if let Some(rec) = state.pod_cidrs.get(&key(h))
                && *rec != pin
            {
                notes.push(format!(
                    "{}: pinned to {pin}; the state file had {rec}: its routes will move",
                    h.name
                ));
            }
            taken.insert(pin);
            chosen[i] = Some((pin, Source::Pinned));
        }
    }
    // 2. recorded assignments that still fit
    for (i, h) in inv.hosts.iter().enumerate() {
        if chosen[i].is_some() {
            continue;
        }
        if let Some(rec) = state.pod_cidrs.get(&key(h)) {
            if !usable(rec) {
                notes.push(format!(
                    "{}: recorded {rec} no longer fits cluster CIDR {cc} /{prefix}: a new block is assigned",
                    h.name
                ));
            } else if taken.iter().any(|t| nets_overlap(t, rec)) {
                notes.push(format!(
                    "{}: recorded {rec} is now pinned by another host: a new block is assigned",
                    h.name
                ));
            } else {
                taken.insert(*rec);
                chosen[i] = Some((*rec, Source::Recorded));
            }
        }
    }
    // 3. new hosts: lowest free block, in inventory order
    let mut candidates = cc
        .subnets(prefix)
        .map_err(|e| AllocError(format!("cannot split {cc} into /{prefix}: {e}")))?;
    for (i, h) in inv.hosts.iter().enumerate() {
        if chosen[i].is_some() {
            continue;
        }
        let block = loop {
            match candidates.next() {
                Some(c) if taken.iter().any(|t| nets_overlap(t, &c)) => continue,
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
        chosen[i] = Some((block, Source::New));
    }
    let assignments: Vec<Assignment> = inv
        .hosts
        .iter()
        .zip(chosen)
        .map(|(h, c)| {
            let (net, source) = c.expect("every host allocated");
            Assignment {
                host: h.name.clone(),
                os: h.os,
                address: h.address,
                pod_cidr: net,
                gateway: gateway(&net),
                source,
            }
        })
        .collect();
    let state = State {
        version: 1,
        cluster: inv.cluster.name.clone(),
        cluster_cidr: Some(cc),
        pod_cidrs: inv
            .hosts
            .iter()
            .zip(&assignments)
            .map(|(h, a)| (key(h), a.pod_cidr))
            .collect(),
    };
    Ok(Allocation {
        assignments,
        notes,
        state,
    })
}

fn key(h: &Host) -> String {
    h.name.to_ascii_lowercase()
}

/// Another node, as seen from one node.
#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub name: String,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
}

/// What one node should look like, and who its peers are.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub name: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub cluster_name: String,
    pub cluster_cidr: Ipv4Net,
    pub peers: Vec<Peer>,
}

impl Node {
    /// Desired routes: every other node's pod CIDR via that node's address.
    pub fn routes(&self) -> BTreeMap<Ipv4Net, Ipv4Addr> {
        self.peers.iter().map(|p| (p.pod_cidr, p.address)).collect()
    }
}

pub fn nodes(inv: &Inventory, alloc: &Allocation) -> Vec<Node> {
    alloc
        .assignments
        .iter()
        .map(|a| Node {
            name: a.host.clone(),
            os: a.os,
            address: a.address,
            pod_cidr: a.pod_cidr,
            gateway: a.gateway,
            cluster_name: inv.cluster.name.clone(),
            cluster_cidr: inv.cluster.cluster_cidr,
            peers: alloc
                .assignments
                .iter()
                .filter(|p| p.host != a.host)
                .map(|p| Peer {
                    name: p.host.clone(),
                    address: p.address,
                    pod_cidr: p.pod_cidr,
                    gateway: p.gateway,
                })
                .collect(),
        })
        .collect()
}

/// A node plan for unit tests: `peers` are (name, address, pod CIDR).
#[cfg(test)]
pub(crate) fn test_node(
    name: &str,
    os: Os,
    address: &str,
    pod_cidr: &str,
    cluster_cidr: &str,
    peers: &[(&str, &str, &str)],
) -> Node {
    let pod_cidr: Ipv4Net = pod_cidr.parse().unwrap();
    Node {
        name: name.into(),
        os,
        address: address.parse().unwrap(),
        pod_cidr,
        gateway: gateway(&pod_cidr),
        cluster_name: "t".into(),
        cluster_cidr: cluster_cidr.parse().unwrap(),
        peers: peers
            .iter()
            .map(|(n, a, c)| {
                let c: Ipv4Net = c.parse().unwrap();
                Peer {
                    name: n.to_string(),
                    address: a.parse().unwrap(),
                    pod_cidr: c,
                    gateway: gateway(&c),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn inv(hosts: &[(&str, &str, Option<&str>)]) -> Inventory {
        let mut s = String::from(
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\nhosts:\n",
        );
        for (n, a, pin) in hosts {
            s += &format!("  - name: {n}\n    os: linux\n    address: {a}\n");
            if let Some(p) = pin {
                s += &format!("    pod_cidr: {p}\n");
            }
        }
        Inventory::parse(Path::new("i.yaml"), &s).unwrap()
    }

    fn cidrs(a: &Allocation) -> Vec<String> {
        a.assignments
            .iter()
            .map(|x| x.pod_cidr.to_string())
            .collect()
    }

    #[test]
    fn fresh_allocation_in_order_and_pins_win() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.0.0/24")),
            ("c", "198.18.1.4", None),
        ]);
        let a = allocate(&i, &State::default()).unwrap();
        assert_eq!(
            cidrs(&a),
            ["198.19.1.0/24", "198.19.0.0/24", "198.19.2.0/24"]
        );
        assert_eq!(a.assignments[0].gateway.to_string(), "198.19.1.1");
    }

    #[test]
    fn stable_under_reorder_add_remove() {
        let i1 = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let a1 = allocate(&i1, &State::default()).unwrap();
        // reorder, remove b, add d
        let i2 = inv(&[
            ("d", "198.18.1.5", None),
            ("c", "198.18.1.4", None),
            ("a", "198.18.1.2", None),
        ]);
        let a2 = allocate(&i2, &a1.state).unwrap();
        assert_eq!(
            cidrs(&a2),
            ["198.19.1.0/24", "198.19.2.0/24", "198.19.0.0/24"]
        );
        assert_eq!(a2.assignments[0].source, Source::New);
        assert_eq!(a2.assignments[1].source, Source::Recorded);
        assert!(!a2.state.pod_cidrs.contains_key("b"));
    }

    #[test]
    fn pin_taking_a_recorded_block_moves_the_other_host() {
        let i1 = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let a1 = allocate(&i1, &State::default()).unwrap();
        let i2 = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.0.0/24")),
        ]);
        let a2 = allocate(&i2, &a1.state).unwrap();
        // b left 198.19.1.0/24 for its pin, so a gets that block.
        assert_eq!(cidrs(&a2), ["198.19.1.0/24", "198.19.0.0/24"]);
        assert_eq!(a2.notes.len(), 2, "{:?}", a2.notes);
    }

    #[test]
    fn peers_and_routes() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let a = allocate(&i, &State::default()).unwrap();
        let plans = nodes(&i, &a);
        let r = plans[0].routes();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[&"198.19.1.0/24".parse().unwrap()].to_string(),
            "198.18.1.3"
        );
    }
}
