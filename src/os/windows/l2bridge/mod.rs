//! The l2bridge profile (Kubernetes 1.24+; docs/research/l2bridge-profile.md, the
//! keys in brackets are its sources): containerd as the runtime, an HNS
//! L2Bridge network on the node's pod CIDR that kwinctl creates itself
//! (win-bridge never creates it, docs/research/cni-plugins.md#c1), a host endpoint at P+2 that is every
//! pod's gateway (docs/research/flannel.md#f1, docs/research/cni-plugins.md#c1), the win-bridge CNI config, and routes to every
//! other pod CIDR via that node's address on the vSwitch's host vNIC (what
//! flannel's host-gw programs, docs/research/flannel.md#f1/F2). What does not depend on the node's
//! pod CIDR is decided here; the diff is in `l2diff.rs`.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::action::WinAction;
use super::files::{Archive, WinFile, inline};
use super::hns::{HnsNet, HostEp, nth};
use crate::alloc::Node;
use crate::inventory::ContainerdVersion;

pub mod desired;
pub mod diff;

/// The network's name when the inventory names none: flannel's (docs/research/flannel.md#f1), so
/// that switching to flanneld later reuses the objects.
pub const NETWORK: &str = "cbr0";
/// containerd's folder and its default pipe (docs/research/containerd.md#d3).
pub const CONTAINERD_DIR: &str = r"C:\Program Files\containerd";
pub const CONTAINERD_EXE: &str = r"C:\Program Files\containerd\containerd.exe";
pub const CONTAINERD_CONFIG: &str = r"C:\Program Files\containerd\config.toml";
pub const CONTAINERD_PIPE: &str = r"\\.\pipe\containerd-containerd";
/// sig-windows-tools' CNI folders (docs/research/sig-windows-tools.md#s2), written into containerd's config.
pub const CNI_BIN_DIR: &str = r"C:\opt\cni\bin";
pub const CNI_CONF_DIR: &str = r"C:\etc\cni\net.d";
/// containerd loads only the first file of the conf dir (max_conf_num=1,
/// docs/research/containerd.md#d2): kwinctl's must sort first.
pub const CNI_CONF: &str = r"C:\etc\cni\net.d\10-kwinctl.conf";
pub const CNI_CONF_NAME: &str = "10-kwinctl.conf";
/// crictl's config (docs/research/sig-windows-tools.md#s2 writes it to the user's profile; kwinctl keeps it
/// beside its other files). A crictl.exe in C:\k finds it without flags:
/// when `--config` / `CRI_CONFIG_FILE` is not given and the default file is
/// absent, crictl "searches the program's directory as well" (cri-tools
/// cmd/crictl/main.go, the --config flag); elsewhere pass
/// `--config C:\k\crictl.yaml` or set CRI_CONFIG_FILE.
pub const CRICTL_CONFIG: &str = r"C:\k\crictl.yaml";
/// kubelet's and kube-proxy's health endpoints (verify).
pub const KUBELET_HEALTHZ: u16 = 10248;
pub const KUBE_PROXY_HEALTHZ: u16 = 10256;

/// The profile's own desired state (no node in it).
#[derive(Debug, Clone, Serialize)]
pub struct L2Desired {
    pub containerd_version: ContainerdVersion,
    pub containerd: Option<Archive>,
    pub cni_plugins: Option<Archive>,
    /// containerd's config.toml and crictl's config.
    pub files: Vec<WinFile>,
    /// The files the profile needs, placed by kwinctl or not.
    pub required: Vec<String>,
    /// What the CNI config says of the cluster's networks.
    pub cni: CniCluster,
}

/// The cluster's side of a node's CNI config: the service network and the
/// cluster DNS (`cluster.dns_service_ip`, `cluster.dns_domain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CniCluster {
    pub service_cidr: Ipv4Net,
    pub dns_service_ip: Ipv4Addr,
    pub dns_domain: String,
}

/// The files of containerd's Windows tarball kwinctl uses (`bin/…`, docs/research/containerd.md#d4).
pub fn containerd_members() -> Vec<String> {
    ["containerd.exe", "containerd-shim-runhcs-v1.exe", "ctr.exe"]
        .iter()
        .map(|f| format!(r"{CONTAINERD_DIR}\{f}"))
        .collect()
}

/// The CNI plugins the profile uses (docs/research/cni-plugins.md#c6: the Windows archive holds
/// win-bridge.exe, win-overlay.exe and host-local.exe).
pub fn cni_members() -> Vec<String> {
    ["win-bridge.exe", "host-local.exe"]
        .iter()
        .map(|f| format!(r"{CNI_BIN_DIR}\{f}"))
        .collect()
}

/// The inventory entry of the archive a required file comes from.
pub fn archive_key(path: &str) -> Option<&'static str> {
    let low = path.to_ascii_lowercase();
    if low.starts_with(&CONTAINERD_DIR.to_ascii_lowercase()) {
        Some("windows.binaries.containerd (the containerd release archive)")
    } else if low.starts_with(&CNI_BIN_DIR.to_ascii_lowercase()) {
        Some("windows.binaries.cni-plugins (the CNI plugins archive)")
    } else {
        None
    }
}

/// containerd's config for its release line: the CNI folders and the pinned
/// sandbox (pause) image — the image pods actually use is containerd's, not
/// the kubelet's (docs/research/containerd.md#d2). 1.x reads `version = 2` (the CRI plugin's
/// `sandbox_image`, `cni.bin_dir`); 2.x reads `version = 3`, where the
/// sandbox is `pinned_images.sandbox` and 2.1+ takes `bin_dirs` (2.0:
/// `bin_dir`) (docs/research/containerd.md#d5).
pub fn containerd_config(cv: ContainerdVersion, pause: &str) -> String {
    let dir = |p: &str| p.replace('\\', "/");
    let (bin, conf) = (dir(CNI_BIN_DIR), dir(CNI_CONF_DIR));
    let head = "# containerd configuration written by kwinctl (l2bridge profile); changes are overwritten\n";
    if cv.major < 2 {
        format!(
            "{head}version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{pause}\"\n  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = \"{bin}\"\n    conf_dir = \"{conf}\"\n"
        )
    } else {
        let bins = if cv.minor >= 1 {
            format!("bin_dirs = [\"{bin}\"]")
        } else {
            format!("bin_dir = \"{bin}\"")
        };
        format!(
            "{head}version = 3\n\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"{pause}\"\n\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  {bins}\n  conf_dir = \"{conf}\"\n"
        )
    }
}

/// crictl's config: containerd's pipe (docs/research/sig-windows-tools.md#s2).
pub fn crictl_config() -> String {
    "runtime-endpoint: npipe:////./pipe/containerd-containerd\nimage-endpoint: npipe:////./pipe/containerd-containerd\n".into()
}

impl L2Desired {
    pub fn new(
        cv: ContainerdVersion,
        containerd: Option<Archive>,
        cni_plugins: Option<Archive>,
        pause: &str,
        cni: CniCluster,
    ) -> L2Desired {
        let mut required = containerd_members();
        required.extend(cni_members());
        L2Desired {
            containerd_version: cv,
            containerd,
            cni_plugins,
            files: vec![
                inline(CONTAINERD_CONFIG, containerd_config(cv, pause)),
                inline(CRICTL_CONFIG, crictl_config()),
            ],
            required,
            cni,
        }
    }
}

/// The win-bridge CNI config of a node (section 3 of the spec): HCN v2
/// (`apiVersion: 2`, required with containerd: docs/research/cni-plugins.md#c3, docs/research/containerd.md#d7), host-local IPAM from
/// P+3, OutBoundNAT exceptions for the cluster, service and node networks
/// (docs/research/microsoft-sdn.md#m1: kwinctl names the nodes' own addresses, /32 each, rather than a
/// node subnet it does not know), SDNRoute for the service CIDR and the node's own address (docs/research/microsoft-sdn.md#m1, docs/research/kubernetes.md#g1,
/// docs/research/cni-plugins.md#c5), DNS and port mappings from the runtime (docs/research/cni-plugins.md#c2).
pub fn cni_config(node: &Node, network: &str, cluster: &CniCluster) -> String {
    let service_cidr = cluster.service_cidr;
    let p = node.pod_cidr;
    // The inventory's addresses (a disputed host's too): a dispute changes
    // no other node.
    let mut nodes: Vec<Ipv4Addr> = node.member_addresses();
    nodes.push(node.address);
    nodes.sort();
    nodes.dedup();
    let mut exceptions = vec![node.cluster_cidr().to_string(), service_cidr.to_string()];
    exceptions.extend(nodes.iter().map(|a| format!("{a}/32")));
    let v = serde_json::json!({
        "cniVersion": "0.3.1",
        "name": network,
        "type": "win-bridge",
        "apiVersion": 2,
        "capabilities": { "portMappings": true, "dns": true },
        "ipam": {
            "type": "host-local",
            "subnet": p.to_string(),
            "rangeStart": nth(p, 3).to_string(),
            "rangeEnd": Ipv4Addr::from(u32::from(p.broadcast()) - 1).to_string(),
            "dataDir": "C:/var/lib/cni/networks",
        },
        // The fallback: the runtime's DNS (the kubelet's --cluster-dns and
        // search list, through the dns capability) wins over it
        // (docs/research/pods.md, GetDNS).
        "dns": {
            "Nameservers": [cluster.dns_service_ip.to_string()],
            "Search": [format!("svc.{}", cluster.dns_domain)],
        },
        "loopbackDSR": true,
        "policies": [
            { "name": "EndpointPolicy", "value": { "Type": "OutBoundNAT", "Settings": {
                "Exceptions": exceptions } } },
            { "name": "EndpointPolicy", "value": { "Type": "SDNRoute", "Settings": {
                "DestinationPrefix": service_cidr.to_string(), "NeedEncap": true } } },
            { "name": "EndpointPolicy", "value": { "Type": "SDNRoute", "Settings": {
                "DestinationPrefix": format!("{}/32", node.address), "NeedEncap": true } } },
        ],
    });
    serde_json::to_string_pretty(&v).expect("CNI JSON") + "\n"
}

/// The CNI config as a file to place.
pub fn cni_file(node: &Node, network: &str, cluster: &CniCluster) -> WinFile {
    inline(CNI_CONF, cni_config(node, network, cluster))
}

/// One of each l2bridge action, for the contract and grammar tests.
#[doc(hidden)]
pub fn examples() -> Vec<WinAction> {
    let node = crate::os::windows::example_node();
    let archive = Archive {
        name: "containerd".into(),
        archive: WinFile {
            path: r"C:\k\kwinctl\containerd.tar.gz".into(),
            sha256: "ef".repeat(32),
            source: crate::os::windows::FileSource::Url(
                "https://dl.example.invalid/containerd-1.7.20-windows-amd64.tar.gz".into(),
            ),
            version: Some("1.7.20".into()),
            version_regex: Some(r"^containerd \S+ v1\.7\.20(?:[-+ ]|$)".into()),
        },
        members: containerd_members(),
        version_binary: Some(CONTAINERD_EXE.into()),
        marker: r"C:\k\kwinctl\containerd.archive".into(),
    };
    vec![
        WinAction::InstallFeature {
            name: "Containers".into(),
        },
        WinAction::InstallArchive {
            archive: Box::new(archive),
        },
        WinAction::EnsureHnsNetwork {
            net: HnsNet::of(&node, "cbr0", "Ethernet"),
            replace: true,
        },
        WinAction::EnsureHostEndpoint {
            ep: HostEp::of(&node, "cbr0"),
        },
        WinAction::SetForwarding {
            addresses: vec![node.address, nth(node.pod_cidr, 2)],
        },
        WinAction::PullSandbox {
            image: "registry.k8s.io/pause:3.10.2".into(),
        },
        WinAction::RemoveHnsNetwork {
            name: "cbr0".into(),
        },
        WinAction::RestartService {
            name: "kube-proxy".into(),
            port: KUBE_PROXY_HEALTHZ,
        },
        WinAction::SetDynamicPorts {
            start: 34000,
            count: 31536,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Os;

    #[test]
    fn containerd_config_follows_the_release_line() {
        let one = containerd_config(
            ContainerdVersion::parse("1.7.20").unwrap(),
            "registry.k8s.io/pause:3.10.2",
        );
        assert!(one.contains("version = 2\n"));
        assert!(one.contains("sandbox_image = \"registry.k8s.io/pause:3.10.2\""));
        assert!(one.contains("bin_dir = \"C:/opt/cni/bin\""));
        let two0 = containerd_config(ContainerdVersion::parse("2.0.4").unwrap(), "p:1");
        assert!(two0.contains("version = 3\n") && two0.contains("bin_dir = \"C:/opt/cni/bin\""));
        assert!(two0.contains(
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"p:1\""
        ));
        let two1 = containerd_config(ContainerdVersion::parse("2.1.0").unwrap(), "p:1");
        assert!(two1.contains("bin_dirs = [\"C:/opt/cni/bin\"]"));
    }

    #[test]
    fn cni_config_reserves_the_gateway_and_the_host_endpoint() {
        let node = crate::alloc::test_node(
            "win01",
            Os::Windows,
            "192.168.1.23",
            "10.244.3.0/24",
            "10.244.0.0/16",
            &[("lin01", "192.168.1.10", "10.244.0.0/24")],
        );
        let cluster = CniCluster {
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            dns_service_ip: "10.96.0.53".parse().unwrap(),
            dns_domain: "corp.example".into(),
        };
        let text = cni_config(&node, "cbr0", &cluster);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["name"], "cbr0");
        assert_eq!(v["apiVersion"], 2);
        assert_eq!(v["ipam"]["rangeStart"], "10.244.3.3");
        assert_eq!(v["ipam"]["rangeEnd"], "10.244.3.254");
        assert_eq!(v["dns"]["Nameservers"], serde_json::json!(["10.96.0.53"]));
        assert_eq!(v["dns"]["Search"], serde_json::json!(["svc.corp.example"]));
        assert_eq!(
            v["policies"][0]["value"]["Settings"]["Exceptions"],
            serde_json::json!([
                "10.244.0.0/16",
                "10.96.0.0/12",
                "192.168.1.10/32",
                "192.168.1.23/32"
            ])
        );
        assert_eq!(
            v["policies"][2]["value"]["Settings"]["DestinationPrefix"],
            "192.168.1.23/32"
        );
        let p: Ipv4Net = "10.244.3.0/24".parse().unwrap();
        assert_eq!(nth(p, 1).to_string(), "10.244.3.1");
        assert_eq!(nth(p, 2).to_string(), "10.244.3.2");
    }

    /// A dispute between two other nodes changes neither this node's
    /// firewall rules nor its CNI file's NAT exceptions (both come from the
    /// inventory's addresses, issue 24 item 9).
    mod dispute {
        use std::path::Path;

        use super::super::CniCluster;
        use super::super::cni_config;
        use crate::alloc::{NodeRecord, Observed, allocate, nodes};
        use crate::inventory::Inventory;
        use crate::os::windows::firewall::{FwRule, rules};
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
            let cni = cni_config(
                win,
                "cbr0",
                &CniCluster {
                    service_cidr: "198.18.240.0/20".parse().unwrap(),
                    dns_service_ip: "198.18.240.10".parse().unwrap(),
                    dns_domain: "cluster.local".into(),
                },
            );
            (rules(win, &exes, &[], &[]), cni, a.disputes.len())
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
}
