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
///
/// The kubelet's also allows `api_server_sources`
/// (`cluster.api_server_sources`): the API server opens connections to the
/// kubelet (port 10250: `logs`, `exec`, `port-forward`, metrics), and
/// behind a VIP, a load balancer, NAT or a konnectivity agent its source is
/// no node's address.
pub fn rules(
    node: &Node,
    exes: &[(&str, String)],
    nodeport_sources: &[ipnet::Ipv4Net],
    api_server_sources: &[ipnet::Ipv4Net],
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
        if *name == "kubelet" && !api_server_sources.is_empty() {
            from.extend(api_server_sources.iter().map(|n| n.to_string()));
            display.push_str(" and cluster.api_server_sources");
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
    use super::*;

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
        let narrow = rules(&node, &exes, &[], &[]);
        let wide = rules(&node, &exes, &["203.0.113.0/24".parse().unwrap()], &[]);
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

        // cluster.api_server_sources widens the kubelet's rule only
        let vip = rules(&node, &exes, &[], &["198.18.9.10/32".parse().unwrap()]);
        let kubelet = vip.iter().find(|r| r.name == "kwinctl-kubelet").unwrap();
        assert_eq!(
            kubelet.remote,
            ["198.18.1.2", "198.19.0.0/16", "198.18.9.10/32"]
        );
        assert!(kubelet.display.contains("cluster.api_server_sources"));
        for name in ["kwinctl-icmp4-echo", "kwinctl-kube-proxy"] {
            let r = |rs: &[FwRule]| rs.iter().find(|r| r.name == name).cloned().unwrap();
            assert_eq!(r(&narrow), r(&vip), "{name}");
        }
    }

    #[test]
    fn a_disputed_or_silent_peer_stays_in_the_firewall_scope() {
        let i = crate::inventory::Inventory::parse(
            std::path::Path::new("i.yaml"),
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: https://198.18.1.2:6443\nhosts:\n  - name: a\n    os: linux\n    \
             address: 198.18.1.2\n  - name: b\n    os: linux\n    address: 198.18.1.3\n  \
             - name: c\n    os: linux\n    address: 198.18.1.4\n",
        )
        .unwrap();
        let all: crate::alloc::Observed = Some(
            [
                ("a", "198.19.0.0/24"),
                ("b", "198.19.1.0/24"),
                ("c", "198.19.2.0/24"),
            ]
            .iter()
            .map(|(h, c)| {
                let rec = crate::alloc::NodeRecord {
                    pod_cidr: Some(c.parse().unwrap()),
                    cluster: Some(("t".into(), "x".into())),
                    ..Default::default()
                };
                (h.to_string(), rec)
            })
            .collect(),
        );
        let state = crate::state::State {
            cluster_id: Some("x".into()),
            ..crate::state::State::new("t")
        };
        let scope = |seen: &crate::alloc::Observed| {
            let a = crate::alloc::allocate(&i, &state, seen).unwrap();
            let n = crate::alloc::nodes(&i, &a);
            rules(&n[0], &[], &[], &[])[0].remote.clone()
        };
        let whole = scope(&all);
        assert_eq!(whole, ["198.18.1.3", "198.18.1.4", "198.19.0.0/16"]);
        // c's record is disputed (it claims b's block), then c does not answer
        let mut disputed = all.clone();
        disputed.as_mut().unwrap().get_mut("c").unwrap().pod_cidr =
            Some("198.19.1.0/24".parse().unwrap());
        assert_eq!(scope(&disputed), whole);
        let mut silent = all.clone();
        silent.as_mut().unwrap().remove("c");
        assert_eq!(scope(&silent), whole);
    }
}
