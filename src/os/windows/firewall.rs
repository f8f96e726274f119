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
//! this)", kuberneteswindowssetup.ps1;
//! docs/research/windows-transparent.md#defect-10) — kwinctl opens only what it needs, to the cluster only.

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

/// The rules a node gets; kube-proxy's also allows `nodeport_sources`
/// (`windows.nodeport_sources`): on the transparent profile the userspace
/// proxy listens for NodePorts in the host (kube-proxy.exe's own sockets,
/// docs/research/windows-transparent.md#defect-10), so clients outside the
/// cluster reach a NodePort only through this rule.
pub fn rules(
    node: &Node,
    exes: &[(&str, String)],
    nodeport_sources: &[ipnet::Ipv4Net],
) -> Vec<FwRule> {
    // The inventory's addresses, not the allocation's peers: a host whose
    // block is disputed is still a node (maybe the API server's), and a
    // dispute must change no other node.
    let mut remote: Vec<String> = node
        .member_addresses()
        .iter()
        .map(|a| a.to_string())
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
        let mut from = remote.clone();
        let mut display = format!("kwinctl: {name} from the cluster");
        if *name == "kube-proxy" && !nodeport_sources.is_empty() {
            from.extend(nodeport_sources.iter().map(|n| n.to_string()));
            display.push_str(" and windows.nodeport_sources");
        }
        out.push(rule(
            &format!("kwinctl-{name}"),
            &display,
            "TCP",
            Some(exe.clone()),
            &from,
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::alloc::{NodeRecord, Observed, allocate, nodes};
    use crate::inventory::Inventory;
    use crate::state::State;

    const INV: &str = "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\nhosts:\n  - name: cp\n    os: linux\n    address: 198.18.1.2\n  - name: w2\n    os: linux\n    address: 198.18.1.3\n  - name: win\n    os: linux\n    address: 198.18.1.4\n";

    /// What the nodes record: (host, pod CIDR).
    fn seen(list: &[(&str, &str)]) -> Observed {
        Some(
            list.iter()
                .map(|(h, c)| {
                    let rec = NodeRecord {
                        pod_cidr: Some(c.parse().unwrap()),
                        cluster: Some(("t".into(), "x".into())),
                        ..NodeRecord::default()
                    };
                    (h.to_string(), rec)
                })
                .collect(),
        )
    }

    /// The rules and the l2bridge CNI file of host `win`.
    fn win_view(records: &[(&str, &str)]) -> (Vec<FwRule>, String, usize) {
        let inv = Inventory::parse(Path::new("i.yaml"), INV).unwrap();
        let state = State {
            cluster_id: Some("x".into()),
            ..State::new("t")
        };
        let a = allocate(&inv, &state, &seen(records)).unwrap();
        let n = nodes(&inv, &a);
        let win = n.iter().find(|n| n.name == "win").unwrap();
        let exes = [("kubelet", r"C:\k\kubelet.exe".to_string())];
        let cni = crate::os::windows::l2bridge::cni_config(
            win,
            "cbr0",
            &crate::os::windows::l2bridge::CniCluster {
                service_cidr: "198.18.240.0/20".parse().unwrap(),
                dns_service_ip: "198.18.240.10".parse().unwrap(),
                dns_domain: "cluster.local".into(),
            },
        );
        (rules(win, &exes, &[]), cni, a.disputes.len())
    }

    /// windows.nodeport_sources widens kube-proxy.exe's rule only (the
    /// transparent profile's NodePorts), and changes its digest so a host
    /// with the narrower rule gets it replaced.
    #[test]
    fn nodeport_sources_widen_kube_proxy_s_rule_only() {
        let node = crate::alloc::test_node(
            "win",
            crate::inventory::Os::Windows,
            "198.18.1.4",
            "198.19.2.0/24",
            "198.19.0.0/16",
            &[("cp", "198.18.1.2", "198.19.0.0/24")],
        );
        let exes = [
            ("kubelet", r"C:\k\kubelet.exe".to_string()),
            ("kube-proxy", r"C:\k\kube-proxy.exe".to_string()),
        ];
        let narrow = rules(&node, &exes, &[]);
        let wide = rules(&node, &exes, &["203.0.113.0/24".parse().unwrap()]);
        let proxy = |rs: &[FwRule]| {
            rs.iter()
                .find(|r| r.name == "kwinctl-kube-proxy")
                .cloned()
                .unwrap()
        };
        assert_eq!(proxy(&narrow).remote, ["198.18.1.2", "198.19.0.0/16"]);
        assert_eq!(
            proxy(&wide).remote,
            ["198.18.1.2", "198.19.0.0/16", "203.0.113.0/24"]
        );
        assert_ne!(proxy(&narrow).description, proxy(&wide).description);
        for name in ["kwinctl-icmp4-echo", "kwinctl-kubelet"] {
            let r = |rs: &[FwRule]| rs.iter().find(|r| r.name == name).cloned().unwrap();
            assert_eq!(r(&narrow), r(&wide), "{name}");
        }
    }

    #[test]
    fn a_dispute_changes_no_other_node_s_rules() {
        let calm = win_view(&[
            ("cp", "198.19.0.0/24"),
            ("w2", "198.19.1.0/24"),
            ("win", "198.19.2.0/24"),
        ]);
        assert_eq!(calm.2, 0);
        // The worker claims the control plane's block: both are disputed.
        let torn = win_view(&[
            ("cp", "198.19.0.0/24"),
            ("w2", "198.19.0.0/24"),
            ("win", "198.19.2.0/24"),
        ]);
        assert_eq!(torn.2, 2, "cp and w2 disputed");
        for r in &torn.0 {
            assert!(
                r.remote.iter().any(|a| a == "198.18.1.2"),
                "{}: the API server's address is kept: {:?}",
                r.name,
                r.remote
            );
            assert!(r.remote.iter().any(|a| a == "198.18.1.3"), "{:?}", r.remote);
            assert!(!r.remote.iter().any(|a| a == "198.18.1.4"), "not itself");
        }
        assert_eq!(calm.0, torn.0, "firewall rules unchanged by the dispute");
        assert_eq!(calm.1, torn.1, "CNI exceptions unchanged by the dispute");
    }
}
