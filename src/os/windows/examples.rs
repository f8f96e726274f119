//! One of every Windows action, for the contract, grammar and snapshot
//! tests: the actions both profiles share and the transparent profile's,
//! then the l2bridge profile's.

use super::POD_CIDR_FILE;
use super::action::WinAction;
use super::files::{FileSource, WinFile};

/// One of every action, for the contract and grammar tests (and a compile
/// error in `every_kind_has_an_example` when a variant is added without one).
#[doc(hidden)]
pub fn examples() -> Vec<WinAction> {
    let svc = crate::os::windows::service::example_service();
    vec![
        WinAction::RecordPodCidr {
            pod_cidr: "192.168.1.0/24".parse().unwrap(),
            cluster: "demo".into(),
            cluster_id: "0123456789abcdef".into(),
            lock_host: "cp".into(),
        },
        WinAction::EnableRouting,
        WinAction::CreateSwitch,
        WinAction::CreateNetwork {
            name: "kwinctl".into(),
            subnet: "192.168.1.0/24".parse().unwrap(),
            gateway: "192.168.1.1".parse().unwrap(),
            interface: "Ethernet 2".into(),
            replace: true,
        },
        WinAction::SetGatewayAddress {
            adapter: "vEthernet (HNSTransparent)".into(),
            gateway: "192.168.1.1".parse().unwrap(),
            prefix: 24,
            node_address: "10.0.0.11".parse().unwrap(),
        },
        WinAction::AddRoute {
            dst: "192.168.0.0/24".parse().unwrap(),
            via: "10.0.0.10".parse().unwrap(),
            replace: false,
        },
        WinAction::AddRoute {
            dst: "192.168.2.0/24".parse().unwrap(),
            via: "10.0.0.12".parse().unwrap(),
            replace: true,
        },
        WinAction::DelRoute {
            dst: "192.168.9.0/24".parse().unwrap(),
            via: None,
        },
        WinAction::PullImage {
            image: "mcr.microsoft.com/k8s/core/pause:1.2.0".into(),
        },
        WinAction::PlaceFile {
            file: WinFile {
                path: r"C:\k\kubelet.exe".into(),
                sha256: "ab".repeat(32),
                source: FileSource::Url("https://dl.example.invalid/v1.16/kubelet.exe".into()),
                version: Some("1.16.15".into()),
                version_regex: Some(r"^Kubernetes v1\.16\.15(?:[-+]\S*)?$".into()),
            },
        },
        WinAction::PlaceFile {
            file: WinFile {
                path: r"C:\k\kube-proxy.exe".into(),
                sha256: "ef".repeat(32),
                source: FileSource::Push(crate::os::windows::files::Pushed::of(
                    std::sync::Arc::new(crate::transfer::Local {
                        path: "kube-proxy.exe".into(),
                        size: 150 << 20,
                        sha256: "ef".repeat(32),
                    }),
                )),
                version: Some("1.16.15".into()),
                version_regex: Some(r"^Kubernetes v1\.16\.15(?:[-+]\S*)?$".into()),
            },
        },
        WinAction::PlaceFile {
            file: WinFile {
                path: r"C:\k\config".into(),
                sha256: "cd".repeat(32),
                source: FileSource::Inline(b"apiVersion: v1\nkind: Config\n".to_vec().into()),
                version: None,
                version_regex: None,
            },
        },
        WinAction::InstallService {
            service: svc.clone(),
            exists: false,
        },
        WinAction::InstallService {
            service: svc.clone(),
            exists: true,
        },
        WinAction::StartService {
            name: "kube-proxy".into(),
        },
        WinAction::InstallTask {
            service: crate::os::windows::service::example_task(),
            exists: true,
        },
        WinAction::StartTask {
            name: "kubelet".into(),
        },
        WinAction::InstallBootTask {
            boot: crate::os::windows::boot::example(),
        },
        WinAction::RemoveService {
            name: "kube-proxy".into(),
        },
        WinAction::RemoveTask {
            name: "kubelet".into(),
        },
        WinAction::SetFirewall {
            rules: crate::os::windows::firewall::example(),
        },
        WinAction::RemoveFirewall,
        WinAction::RemoveNetwork {
            name: "kwinctl".into(),
        },
        WinAction::RemoveSwitch,
        WinAction::RemoveFile {
            path: POD_CIDR_FILE.into(),
        },
        WinAction::RemoveFolder {
            path: crate::transfer::windows::DIR.into(),
        },
        WinAction::FinishJoin {
            cert: crate::identity::cert::CURRENT.into(),
            bootstrap: crate::os::windows::BOOTSTRAP_CONF.into(),
            stale: vec![crate::os::windows::KUBECONFIG.into()],
            seconds: 300,
        },
        WinAction::RestorePrevious {
            paths: vec![r"C:\k\kubelet.exe".into(), r"C:\k\kube-proxy.exe".into()],
            version: "1.30.4".into(),
            version_regex: r"^Kubernetes v1\.30\.4(?:[-+]\S*)?$".into(),
        },
    ]
    .into_iter()
    .chain(super::profile_examples())
    .collect()
}

/// The Windows node of the examples the grammar and contract tests render
/// (win01 at 10.0.0.11 with 192.168.1.0/24, beside lin01).
#[doc(hidden)]
pub fn example_node() -> crate::os::Node {
    crate::alloc::test_node(
        "win01",
        crate::inventory::Os::Windows,
        "10.0.0.11",
        "192.168.1.0/24",
        "192.168.0.0/16",
        &[("lin01", "10.0.0.10", "192.168.0.0/24")],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding a variant breaks this match: add it to [`examples`] too.
    #[test]
    fn every_kind_has_an_example() {
        let kinds: std::collections::BTreeSet<&str> = examples()
            .iter()
            .map(|a| match a {
                WinAction::RecordPodCidr { .. } => "record_pod_cidr",
                WinAction::EnableRouting => "enable_routing",
                WinAction::CreateSwitch => "create_switch",
                WinAction::CreateNetwork { .. } => "create_network",
                WinAction::SetGatewayAddress { .. } => "set_gateway_address",
                WinAction::AddRoute { .. } => "add_route",
                WinAction::DelRoute { .. } => "del_route",
                WinAction::PullImage { .. } => "pull_image",
                WinAction::PlaceFile { .. } => "place_file",
                WinAction::InstallService { .. } => "install_service",
                WinAction::StartService { .. } => "start_service",
                WinAction::InstallTask { .. } => "install_task",
                WinAction::StartTask { .. } => "start_task",
                WinAction::InstallBootTask { .. } => "install_boot_task",
                WinAction::RemoveService { .. } => "remove_service",
                WinAction::RemoveTask { .. } => "remove_task",
                WinAction::SetFirewall { .. } => "set_firewall",
                WinAction::RemoveFirewall => "remove_firewall",
                WinAction::RemoveNetwork { .. } => "remove_network",
                WinAction::RemoveSwitch => "remove_switch",
                WinAction::RemoveFile { .. } => "remove_file",
                WinAction::RemoveFolder { .. } => "remove_folder",
                WinAction::RestorePrevious { .. } => "restore_previous",
                WinAction::InstallFeature { .. } => "install_feature",
                WinAction::InstallArchive { .. } => "install_archive",
                WinAction::EnsureHnsNetwork { .. } => "ensure_hns_network",
                WinAction::EnsureHostEndpoint { .. } => "ensure_host_endpoint",
                WinAction::SetForwarding { .. } => "set_forwarding",
                WinAction::PullSandbox { .. } => "pull_sandbox",
                WinAction::RemoveHnsNetwork { .. } => "remove_hns_network",
                WinAction::RestartService { .. } => "restart_service",
                WinAction::SetDynamicPorts { .. } => "set_dynamic_ports",
                WinAction::FinishJoin { .. } => "finish_join",
            })
            .collect();
        assert_eq!(kinds.len(), 33);
        for a in examples() {
            assert!(kinds.contains(crate::render::kind_of(&a).as_str()));
        }
    }
}
