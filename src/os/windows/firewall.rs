//! Windows Firewall rules kwinctl adds (named `kwinctl-*`, removed by
//! reset): inbound ICMPv4 echo, so `verify`'s reachability pings to the
//! node and its pods' gateway mean something, and kubelet's and
//! kube-proxy's inbound connections; each scoped to the other nodes and
//! the cluster's pod network.
//!
//! Windows Server answers no inbound echo request by default (the
//! built-in "File and Printer Sharing (Echo Request - ICMPv4-In)" rule is
//! off: B) and blocks inbound connections to programs without a rule;
//! acs-engine turned the firewall off altogether ("Turn off Firewall to
//! enable pods to talk to service endpoints. (Kubelet should eventually do
//! this)", kuberneteswindowssetup.ps1; research/windows-fidelity.md defect
//! 10) — kwinctl opens only what it needs, to the cluster only.

use serde::Serialize;

use crate::alloc::Node;
use crate::hash::sha256_bytes;

/// One inbound allow rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FwRule {
    /// `kwinctl-…`
    pub name: String,
    pub display: String,
    /// `ICMPv4` (echo request) or `TCP` (for `program`).
    pub protocol: String,
    pub program: Option<String>,
    /// Remote addresses it allows: the other nodes and the pod network.
    pub remote: Vec<String>,
    /// What the probe compares (Windows rewrites addresses — a /16 comes
    /// back as `a.b.0.0/255.255.0.0` — so the rule carries a digest of
    /// what kwinctl asked for in its description).
    pub description: String,
}

/// The rules a node gets.
pub fn rules(node: &Node, exes: &[(&str, String)]) -> Vec<FwRule> {
    // every other member of the inventory: a peer whose block is disputed
    // or unknown in this run (it failed, or did not answer) stays allowed
    let mut remote: Vec<String> = node
        .cluster
        .members
        .iter()
        .filter(|a| **a != node.address)
        .map(|a| a.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    remote.push(node.cluster_cidr().to_string());
    let mut out = vec![rule(
        "kwinctl-icmp4-echo",
        "kwinctl: ICMPv4 echo from the cluster",
        "ICMPv4",
        None,
        &remote,
    )];
    for (name, exe) in exes {
        out.push(rule(
            &format!("kwinctl-{name}"),
            &format!("kwinctl: {name} from the cluster"),
            "TCP",
            Some(exe.clone()),
            &remote,
        ));
    }
    out
}

fn rule(
    name: &str,
    display: &str,
    protocol: &str,
    program: Option<String>,
    remote: &[String],
) -> FwRule {
    let digest = serde_json::to_vec(&(name, protocol, &program, remote)).expect("rule JSON");
    FwRule {
        name: name.into(),
        display: display.into(),
        protocol: protocol.into(),
        program,
        remote: remote.to_vec(),
        description: format!(
            "{display}, added by kwinctl [kwinctl {}]",
            &sha256_bytes(&digest)[..16]
        ),
    }
}

/// Rules for the examples the grammar and snapshot tests render.
#[doc(hidden)]
pub fn example() -> Vec<FwRule> {
    let remote = vec!["10.0.0.10".to_string(), "192.168.0.0/16".into()];
    vec![
        rule(
            "kwinctl-icmp4-echo",
            "kwinctl: ICMPv4 echo from the cluster",
            "ICMPv4",
            None,
            &remote,
        ),
        rule(
            "kwinctl-kubelet",
            "kwinctl: kubelet from the cluster",
            "TCP",
            Some(r"C:\k\kubelet.exe".into()),
            &remote,
        ),
    ]
}
