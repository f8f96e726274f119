//! Pod CIDR allocation, reconciled with what the nodes record, and what each
//! node should be as seen by the others.
//!
//! The nodes are the authority: each records its pod CIDR and its cluster
//! (`/etc/kwinctl/pod-cidr`, `C:\k\kwinctl\pod-cidr.txt`, and the cluster
//! file beside it), and every run probes every node before changing any.
//! The state file beside the inventory is a cache: it fills in for nodes
//! that cannot be probed (and for `check`, which contacts nothing), and it
//! remembers hosts removed from the inventory until `reset` reaches them.
//!
//! For each host, in order of authority:
//! 1. the node's own record, when it is a sound block of this cluster;
//! 2. the inventory's pin;
//! 3. the state file's entry;
//! 4. a new block: the lowest one nobody holds or may hold.
//!
//! What cannot be decided is disputed, never guessed: two nodes recording
//! one block, a record that is not a block of this cluster, a record that
//! contradicts a pin, a node of another cluster. A disputed host fails, and
//! no peer route to its address or its block is added, replaced or removed
//! (those are *frozen*). So are kwinctl's routes via an address no host of
//! this inventory has: another operator's node, or a host removed before
//! the state remembered removals; their blocks are never handed out.
//!
//! A block moves only with proof. A node recording a block that the
//! registry (or the state file) gives another host that did not answer is
//! disputed, not followed. A node carrying a kwinctl route to another
//! node's recorded block via an address nobody has is disputed, not the
//! node it wrongs. A host of this inventory at a new address moved only
//! when the node there records the block the cluster knew it by and this
//! cluster's id: then a kwinctl route via its former address, to that
//! block, is its own, and moves with it to the new next hop (a note says
//! so); otherwise it is disputed and keeps its former address for every
//! other node.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::inventory::{Host, Inventory, Os};
use crate::state::State;

mod allocate;
mod identity;
mod registry;

pub use allocate::{allocate, validate};

/// Where a host's pod CIDR came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The node's own record.
    Node,
    /// The inventory's `pod_cidr`.
    Pinned,
    /// The state file (the node could not be asked, or has no record yet).
    State,
    New,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Node => "node",
            Source::Pinned => "pinned",
            Source::State => "state",
            Source::New => "new",
        })
    }
}

/// What a node says about itself: the probe's part that allocation reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeRecord {
    /// The pod CIDR the node records (as written: it may be unsound).
    pub pod_cidr: Option<Ipv4Net>,
    /// The cluster the node says it belongs to: (name, id).
    pub cluster: Option<(String, String)>,
    /// kwinctl's routes on the node: destination and next hop.
    pub routes: Vec<(Ipv4Net, Option<Ipv4Addr>)>,
    /// How many changing runs the cluster lock on this node has seen (the
    /// lock host's matters).
    pub generation: u64,
    /// The cluster's registry kept beside the lock (on the lock host): every
    /// block any operator's run handed out, and to whom.
    pub registry: Vec<Registered>,
    /// The host the node records as keeping the cluster's lock and
    /// registry (lower case; `None`: none recorded).
    pub lock_host: Option<String>,
}

/// A block the cluster's registry says a run handed out. The registry lives
/// on the lock host, so that an operator whose inventory lacks a host
/// another operator added still never hands out its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub host: String,
    pub pod_cidr: Ipv4Net,
    pub address: Ipv4Addr,
}

impl Registered {
    /// One line of the registry file: `name cidr address`.
    pub fn line(&self) -> String {
        format!("{} {} {}", self.host, self.pod_cidr, self.address)
    }

    /// Read a registry line (`None` if it is not one).
    pub fn parse(line: &str) -> Option<Registered> {
        let mut it = line.split_whitespace();
        let (host, net, addr) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() || !crate::inventory::valid_name(host) {
            return None;
        }
        Some(Registered {
            host: host.to_ascii_lowercase(),
            pod_cidr: net.parse().ok()?,
            address: addr.parse().ok()?,
        })
    }
}

/// What the nodes answered, by lower-case host name. `None` for an
/// allocation made without asking any (`check`): then the state file and
/// the pins are all there is.
pub type Observed = Option<BTreeMap<String, NodeRecord>>;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Assignment {
    pub host: String,
    pub os: Os,
    pub address: Ipv4Addr,
    #[schemars(with = "String")]
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub source: Source,
}

/// A host whose block cannot be decided: it fails and nothing depends on it.
#[derive(Debug, Clone, Serialize)]
pub struct Dispute {
    pub host: String,
    pub reason: String,
}

/// Routes no node may add, replace or remove in this run, with why.
#[derive(Debug, Clone, Default)]
pub struct Frozen {
    pub dsts: BTreeMap<Ipv4Net, String>,
    pub vias: BTreeMap<Ipv4Addr, String>,
}

impl Frozen {
    /// Why a route to `dst` via `via` must be left alone, if it must.
    pub fn route(&self, dst: &Ipv4Net, via: Option<Ipv4Addr>) -> Option<&str> {
        self.dsts
            .iter()
            .find(|(d, _)| crate::inventory::nets_overlap(d, dst))
            .map(|(_, w)| w.as_str())
            .or_else(|| via.and_then(|v| self.vias.get(&v)).map(String::as_str))
    }
}

#[derive(Debug, Clone)]
pub struct Allocation {
    /// Hosts with a block, in inventory order.
    pub assignments: Vec<Assignment>,
    pub disputes: Vec<Dispute>,
    /// Things the operator should know (a block adopted from a node, a
    /// removed host awaiting reset, …).
    pub notes: Vec<String>,
    pub frozen: Arc<Frozen>,
    /// Hosts whose new inventory address is not proven theirs (by lower-case
    /// name): the address the cluster knows them at, which every other node
    /// keeps for them (firewall scope, NAT exceptions), as the state file
    /// and the registry do.
    pub unmoved: BTreeMap<String, Ipv4Addr>,
    /// The state to record after this allocation.
    pub state: State,
    /// The cluster's registry after this allocation (written on the lock
    /// host by the run that changes the cluster).
    pub registry: Vec<Registered>,
}

impl Allocation {
    pub fn assignment(&self, host: &str) -> Option<&Assignment> {
        self.assignments
            .iter()
            .find(|a| a.host.eq_ignore_ascii_case(host))
    }
    pub fn dispute(&self, host: &str) -> Option<&Dispute> {
        self.disputes
            .iter()
            .find(|d| d.host.eq_ignore_ascii_case(host))
    }
}

/// The allocation cannot be made at all (the nodes disagree about which
/// cluster this is, or the cluster CIDR is full).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AllocError(pub String);

/// The first usable address of a block: the pod network's gateway.
pub fn gateway(net: &Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

/// Another node, as seen from one node.
#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub name: String,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
}

/// The cluster a node belongs to: what it records beside its pod CIDR.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterId {
    pub name: String,
    pub id: String,
    pub cidr: Ipv4Net,
    /// The host that keeps the cluster's lock and registry, as every node
    /// records it (lower case; empty: the inventory names none).
    pub lock_host: String,
}

/// The inventory's lock host: the Linux control-plane host with the lowest
/// address (so that every operator's inventory, in whatever order, picks
/// the same one), lower case; empty when there is none.
pub fn lock_host_name(inv: &Inventory) -> String {
    inv.hosts
        .iter()
        .filter(|h| h.keeps_lock())
        .min_by_key(|h| h.address)
        .map(|h| h.name.to_ascii_lowercase())
        .unwrap_or_default()
}

/// What one node should look like, and who its peers are.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub cluster: Arc<ClusterId>,
    /// Every node of the cluster with a block, this one included (shared:
    /// one list for the whole cluster, not one per node).
    nodes: Arc<[Peer]>,
    /// Every host of the inventory, this one included, by (lower-case name,
    /// address), whether or not its block is decided in this run: what a
    /// node's firewall scope and NAT exceptions name, so that a dispute
    /// about one host's block changes no other node.
    members: Arc<[(String, Ipv4Addr)]>,
    /// Routes no node may touch in this run.
    pub frozen: Arc<Frozen>,
}

impl Node {
    /// The other nodes.
    pub fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.nodes.iter().filter(move |p| p.name != self.name)
    }
    /// Desired routes: every other node's pod CIDR via that node's address.
    pub fn routes(&self) -> BTreeMap<Ipv4Net, Ipv4Addr> {
        self.peers().map(|p| (p.pod_cidr, p.address)).collect()
    }
    pub fn cluster_cidr(&self) -> Ipv4Net {
        self.cluster.cidr
    }
    /// The inventory addresses of the other hosts, sorted, without
    /// duplicates, whatever the allocation says about their blocks.
    pub fn member_addresses(&self) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = self
            .members
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case(&self.name))
            .map(|(_, a)| *a)
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

fn members(inv: &Inventory, unmoved: &BTreeMap<String, Ipv4Addr>) -> Arc<[(String, Ipv4Addr)]> {
    inv.hosts
        .iter()
        .map(|h| {
            let k = h.name.to_ascii_lowercase();
            let a = unmoved.get(&k).copied().unwrap_or(h.address);
            (k, a)
        })
        .collect()
}

/// Every assigned host's node, in inventory order (linear in hosts: the
/// peer list is shared).
pub fn nodes(inv: &Inventory, alloc: &Allocation) -> Vec<Node> {
    let all: Arc<[Peer]> = alloc
        .assignments
        .iter()
        .map(|a| Peer {
            name: a.host.clone(),
            address: a.address,
            pod_cidr: a.pod_cidr,
            gateway: a.gateway,
        })
        .collect();
    let cluster = Arc::new(ClusterId {
        name: inv.cluster.name.clone(),
        id: alloc.state.cluster_id.clone().unwrap_or_default(),
        cidr: inv.cluster.cluster_cidr,
        lock_host: lock_host_name(inv),
    });
    let members = members(inv, &alloc.unmoved);
    alloc
        .assignments
        .iter()
        .map(|a| Node {
            name: a.host.clone(),
            os: a.os,
            address: a.address,
            pod_cidr: a.pod_cidr,
            gateway: a.gateway,
            cluster: cluster.clone(),
            nodes: all.clone(),
            members: members.clone(),
            frozen: alloc.frozen.clone(),
        })
        .collect()
}

/// A node on its own (no peers, nothing frozen): what `reset` works with on
/// a host whose block this run does not decide (disputed, or removed from
/// the inventory).
pub fn lone_node(inv: &Inventory, host: &Host, pod_cidr: Ipv4Net, cluster_id: &str) -> Node {
    let me = Peer {
        name: host.name.clone(),
        address: host.address,
        pod_cidr,
        gateway: gateway(&pod_cidr),
    };
    Node {
        name: host.name.clone(),
        os: host.os,
        address: host.address,
        pod_cidr,
        gateway: gateway(&pod_cidr),
        cluster: Arc::new(ClusterId {
            name: inv.cluster.name.clone(),
            id: cluster_id.to_string(),
            cidr: inv.cluster.cluster_cidr,
            lock_host: lock_host_name(inv),
        }),
        nodes: Arc::from(vec![me]),
        members: members(inv, &BTreeMap::new()),
        frozen: Arc::default(),
    }
}

/// A node for tests and examples: `peers` are (name, address, pod CIDR).
#[doc(hidden)]
pub fn test_node(
    name: &str,
    os: Os,
    address: &str,
    pod_cidr: &str,
    cluster_cidr: &str,
    peers: &[(&str, &str, &str)],
) -> Node {
    let pod_cidr: Ipv4Net = pod_cidr.parse().unwrap();
    let me = Peer {
        name: name.into(),
        address: address.parse().unwrap(),
        pod_cidr,
        gateway: gateway(&pod_cidr),
    };
    let nodes: Arc<[Peer]> = std::iter::once(me)
        .chain(peers.iter().map(|(n, a, c)| {
            let c: Ipv4Net = c.parse().unwrap();
            Peer {
                name: n.to_string(),
                address: a.parse().unwrap(),
                pod_cidr: c,
                gateway: gateway(&c),
            }
        }))
        .collect();
    let members: Arc<[(String, Ipv4Addr)]> =
        nodes.iter().map(|p| (p.name.clone(), p.address)).collect();
    Node {
        name: name.into(),
        os,
        address: address.parse().unwrap(),
        pod_cidr,
        gateway: gateway(&pod_cidr),
        cluster: Arc::new(ClusterId {
            name: "t".into(),
            id: "0123456789abcdef".into(),
            cidr: cluster_cidr.parse().unwrap(),
            // the fixtures' control plane (tests/fixtures/windows/*.yaml)
            lock_host: "lin01".into(),
        }),
        nodes,
        members,
        frozen: Arc::default(),
    }
}

#[cfg(test)]
mod tests;
