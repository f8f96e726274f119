//! Read-only health checks: a host passes when `diff` finds nothing to do on
//! it and it can reach every other node's routable address.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::alloc::Node;
use crate::diff::{Conflict, Describe, Diff};
use crate::probe::Reach;

/// How long the verify probe waits for each ping (seconds).
pub const PING_WAIT_SECS: u32 = 2;

/// A node as `kubectl get nodes` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sNode {
    pub name: String,
    pub ready: bool,
    pub os: String,
    /// `node.kubernetes.io/windows-build` (`None`: not read).
    pub windows_build: Option<String>,
    /// `.spec.podCIDR` (`None`: not read).
    pub pod_cidr: Option<String>,
    /// `.status.nodeInfo.kubeletVersion`, e.g. `v1.30.4` (`None`: not read).
    pub kubelet_version: Option<String>,
}

impl K8sNode {
    /// Whether the node's kubelet is release `want` (`1.30.4`); a node whose
    /// version was not read, or is empty, passes.
    pub fn at_version(&self, want: &str) -> bool {
        match self.kubelet_version.as_deref() {
            None | Some("") => true,
            Some(v) => v
                .strip_prefix('v')
                .unwrap_or(v)
                .strip_prefix(want)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())),
        }
    }
}

/// What the control plane's kubectl said about the nodes.
#[derive(Debug, Clone, Default)]
pub enum K8sView {
    #[default]
    NotAsked,
    NoKubectl,
    KubectlFailed,
    Nodes(Vec<K8sNode>),
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// Checks for any OS: one per desired item (passing when nothing is to be
/// done), plus reachability of every other node.
pub fn checks<A: Describe>(
    node: &Node,
    diff: &Result<Diff<A>, Conflict>,
    reach: &BTreeMap<Ipv4Addr, Reach>,
    probed: &[Pinged],
) -> Vec<Check> {
    let mut checks = Vec::new();
    match diff {
        Err(c) => checks.push(Check {
            name: c.check_name().into(),
            pass: false,
            detail: c.to_string(),
        }),
        Ok(d) => {
            for item in &d.items {
                checks.push(Check {
                    name: item.key.clone(),
                    pass: item.action.is_none(),
                    detail: item
                        .action
                        .as_ref()
                        .map(|a| a.finding())
                        .unwrap_or_default(),
                });
            }
        }
    }
    for p in probed {
        checks.push(reach_check(&node.name, p, reach));
    }
    checks
}

/// The check that `from` reaches `p`, from its probe's ping results.
pub fn reach_check(from: &str, p: &Pinged, reach: &BTreeMap<Ipv4Addr, Reach>) -> Check {
    let (pass, detail) = match reach.get(&p.address) {
        Some(Reach::Ok) => (true, String::new()),
        Some(Reach::NoPing) => (
            false,
            format!("cannot test: {from} has no `ping` (install iputils-ping)"),
        ),
        Some(Reach::NoAnswer) => (
            false,
            format!("no answer to ping from {from} within {PING_WAIT_SECS} s"),
        ),
        None => (false, "not probed".to_string()),
    };
    Check {
        name: format!("reach {} {}", p.name, p.address),
        pass,
        detail,
    }
}

/// Which peers each node pings in `verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachMode {
    /// Every other node (the full mesh).
    All,
    None,
    /// The `k` peers that follow the node in address order, wrapping around:
    /// every node then pings `k` others and is pinged by `k` others.
    Ring(usize),
    /// The full mesh up to 16 peers, 4 ring neighbours beyond (each ping is
    /// a process on the host: the full mesh costs N² of them).
    Auto,
}

/// A host another one pings: its name and address (known from the
/// inventory before any pod CIDR is decided, so the first probe can carry
/// the pings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinged {
    pub name: String,
    pub address: Ipv4Addr,
}

fn ring(me: Ipv4Addr, mut others: Vec<Pinged>, k: usize) -> Vec<Pinged> {
    others.sort_by_key(|p| p.address);
    let start = others.partition_point(|p| p.address < me);
    (0..k.min(others.len()))
        .map(|i| others[(start + i) % others.len()].clone())
        .collect()
}

/// The hosts `me` pings, among `others` (every other host of the
/// inventory).
pub fn reach_peers(me: Ipv4Addr, others: Vec<Pinged>, mode: ReachMode) -> Vec<Pinged> {
    match mode {
        ReachMode::None => Vec::new(),
        ReachMode::All => others,
        ReachMode::Auto if others.len() <= 16 => others,
        ReachMode::Auto => ring(me, others, 4),
        ReachMode::Ring(k) => ring(me, others, k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Os;

    fn others(i: u8, n: u8) -> (Ipv4Addr, Vec<Pinged>) {
        let me: Ipv4Addr = format!("10.0.0.{i}").parse().unwrap();
        let others = (1..=n)
            .filter(|j| *j != i)
            .map(|j| Pinged {
                name: format!("n{j}"),
                address: format!("10.0.0.{j}").parse().unwrap(),
            })
            .collect();
        (me, others)
    }

    fn peers(i: u8, n: u8, mode: ReachMode) -> Vec<Pinged> {
        let (me, o) = others(i, n);
        reach_peers(me, o, mode)
    }

    fn node(i: u8, n: u8) -> Node {
        let peers: Vec<(String, String, String)> = (1..=n)
            .filter(|j| *j != i)
            .map(|j| {
                (
                    format!("n{j}"),
                    format!("10.0.0.{j}"),
                    format!("198.19.{j}.0/24"),
                )
            })
            .collect();
        let refs: Vec<(&str, &str, &str)> = peers
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect();
        crate::alloc::test_node(
            &format!("n{i}"),
            Os::Linux,
            &format!("10.0.0.{i}"),
            &format!("198.19.{i}.0/24"),
            "198.19.0.0/16",
            &refs,
        )
    }

    #[test]
    fn a_conflict_is_one_check_named_by_its_cause() {
        let n = node(1, 3);
        for (c, name) in [
            (
                Conflict::Preflight(vec!["Docker is not installed".into()]),
                "preflight",
            ),
            (
                Conflict::PodCidr {
                    node: "n1".into(),
                    record: "/etc/kwinctl/pod-cidr",
                    recorded: "198.19.7.0/24".parse().unwrap(),
                    assigned: "198.19.1.0/24".parse().unwrap(),
                },
                "pod-cidr",
            ),
        ] {
            struct A;
            impl Describe for A {
                fn describe(&self) -> String {
                    "act".into()
                }
            }
            let d: Result<Diff<A>, Conflict> = Err(c);
            let checks = checks(&n, &d, &BTreeMap::new(), &[]);
            assert_eq!(checks.len(), 1);
            assert_eq!(checks[0].name, name);
            assert!(!checks[0].pass);
        }
    }

    #[test]
    fn full_mesh_when_small_ring_beyond() {
        assert_eq!(peers(1, 10, ReachMode::Auto).len(), 9);
        let n = 40;
        let mut pinged_by = vec![0; n as usize + 1];
        for i in 1..=n {
            let (me, _) = others(i, n);
            let ps = peers(i, n, ReachMode::Auto);
            assert_eq!(ps.len(), 4);
            assert!(ps.iter().all(|p| p.address != me));
            for p in ps {
                pinged_by[p.address.octets()[3] as usize] += 1;
            }
        }
        // every node is pinged by exactly 4 others
        assert!(pinged_by[1..].iter().all(|c| *c == 4), "{pinged_by:?}");
        assert_eq!(peers(3, 40, ReachMode::All).len(), 39);
        assert_eq!(peers(3, 40, ReachMode::None).len(), 0);
        assert_eq!(peers(3, 40, ReachMode::Ring(3)).len(), 3);
    }
}
