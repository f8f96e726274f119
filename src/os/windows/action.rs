//! What kwinctl does on a Windows host, one action at a time, following the
//! seeds step by step. The serde `kind` of an action is the name of its
//! template (`templates/<kind>.ps1.j2`) and of the simulator's handler
//! (`act_<kind>` in `winsim/winsim.py`), and its serde form is the header the
//! simulator reads: see `crate::wire`.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::desired::{FileSource, WinFile, WinService};
use super::{HNS_ADAPTER, KUBE_PROXY_SWITCH, POD_CIDR_FILE};
use crate::diff::Describe;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WinAction {
    /// The node's own record of its pod CIDR and its cluster.
    RecordPodCidr {
        pod_cidr: Ipv4Net,
        cluster: String,
        cluster_id: String,
    },
    /// The Routing role service, and forwarding on the routable adapter.
    EnableRouting,
    CreateSwitch,
    /// `docker network create -d transparent`; `replace` removes a network
    /// of the same name with the wrong subnet first.
    CreateNetwork {
        name: String,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
        replace: bool,
    },
    SetGatewayAddress {
        gateway: Ipv4Addr,
        prefix: u8,
    },
    AddRoute {
        dst: Ipv4Net,
        via: Ipv4Addr,
        replace: bool,
    },
    DelRoute {
        dst: Ipv4Net,
        via: Option<Ipv4Addr>,
    },
    PullImage {
        image: String,
    },
    PlaceFile {
        file: WinFile,
    },
    /// Create or reconfigure a service; a reconfigured running service is
    /// restarted.
    InstallService {
        service: WinService,
        exists: bool,
    },
    StartService {
        name: String,
    },
    /// A release without `--windows-service`: write the start script and
    /// register the boot-time scheduled task that runs it (re-registering
    /// an existing one), start it, and check the binary stays up.
    InstallTask {
        service: WinService,
        exists: bool,
    },
    /// Start a registered task whose binary is not running.
    StartTask {
        name: String,
    },
    /// Stop and delete a service (`reset`, or a release change that moves
    /// it to a scheduled task).
    RemoveService {
        name: String,
    },
    /// Stop and unregister kwinctl's task and its start script (`reset`, or
    /// a release change that makes the binary a native service).
    RemoveTask {
        name: String,
    },
    /// `reset`: remove the transparent network (and with it the HNS adapter).
    RemoveNetwork {
        name: String,
    },
    RemoveSwitch,
    RemoveFile {
        path: String,
    },
}

impl Describe for WinAction {
    fn describe(&self) -> String {
        match self {
            WinAction::RecordPodCidr { pod_cidr, .. } => {
                format!("record pod CIDR {pod_cidr} in {POD_CIDR_FILE}")
            }
            WinAction::EnableRouting => {
                "enable routing (Routing role, forwarding on the routable adapter)".into()
            }
            WinAction::CreateSwitch => {
                format!("create internal Hyper-V switch {KUBE_PROXY_SWITCH}")
            }
            WinAction::CreateNetwork {
                name,
                subnet,
                gateway,
                replace,
            } => format!(
                "{} transparent docker network {name} on {subnet} (gateway {gateway})",
                if *replace { "re-create" } else { "create" }
            ),
            WinAction::SetGatewayAddress { gateway, prefix } => {
                format!("give {HNS_ADAPTER} the gateway address {gateway}/{prefix}")
            }
            WinAction::AddRoute { dst, via, replace } => format!(
                "{} persistent route {dst} via {via}",
                if *replace { "replace" } else { "add" }
            ),
            WinAction::DelRoute { dst, via } => match via {
                Some(v) => format!("remove stale route {dst} via {v}"),
                None => format!("remove stale route {dst}"),
            },
            WinAction::PullImage { image } => format!("pull image {image}"),
            WinAction::PlaceFile { file } => match &file.source {
                FileSource::Url(u) => format!("download {} from {u}", file.path),
                FileSource::Inline(b) => format!("upload {} ({} bytes)", file.path, b.len()),
            },
            WinAction::InstallService { service, exists } => format!(
                "{} service {}",
                if *exists {
                    "reconfigure and restart"
                } else {
                    "install"
                },
                service.name
            ),
            WinAction::StartService { name } => format!("start service {name}"),
            WinAction::InstallTask { service, exists } => format!(
                "{} {} as a boot-time scheduled task (start script; it has no --windows-service)",
                if *exists {
                    "reconfigure and restart"
                } else {
                    "run"
                },
                service.name
            ),
            WinAction::StartTask { name } => format!("start scheduled task {name}"),
            WinAction::RemoveService { name } => format!("stop and delete service {name}"),
            WinAction::RemoveTask { name } => {
                format!("stop and delete scheduled task {name} and its start script")
            }
            WinAction::RemoveNetwork { name } => format!("remove docker network {name}"),
            WinAction::RemoveSwitch => format!("remove Hyper-V switch {KUBE_PROXY_SWITCH}"),
            WinAction::RemoveFile { path } => format!("remove {path}"),
        }
    }

    fn finding(&self) -> String {
        match self {
            WinAction::RecordPodCidr { .. } => "no pod CIDR or cluster recorded on the host".into(),
            WinAction::EnableRouting => {
                "the Routing role is missing or forwarding is off on the routable adapter".into()
            }
            WinAction::CreateSwitch => format!("no internal switch {KUBE_PROXY_SWITCH}"),
            WinAction::CreateNetwork { replace: false, .. } => "missing".into(),
            WinAction::CreateNetwork { subnet, .. } => {
                format!("exists with the wrong subnet or gateway (expected {subnet})")
            }
            WinAction::SetGatewayAddress { gateway, .. } => {
                format!("{HNS_ADAPTER} does not have {gateway}")
            }
            WinAction::AddRoute {
                via,
                replace: false,
                ..
            } => format!("missing (expected via {via})"),
            WinAction::AddRoute { via, .. } => {
                format!("wrong next hop or not persistent (expected via {via})")
            }
            WinAction::DelRoute { .. } => "a route to a block no node in the inventory has".into(),
            WinAction::PullImage { .. } => "image not present".into(),
            WinAction::PlaceFile { .. } => "missing or its SHA-256 differs".into(),
            WinAction::InstallService { exists: false, .. } => "service not installed".into(),
            WinAction::InstallService { .. } => "service configuration differs (command line, environment, dependencies, start mode or recovery)".into(),
            WinAction::StartService { .. } => "service not running".into(),
            WinAction::InstallTask { exists: false, .. } => "no scheduled task".into(),
            WinAction::InstallTask { .. } => {
                "the scheduled task runs another command line, environment or start script".into()
            }
            WinAction::StartTask { name } => format!("{name} is not running"),
            WinAction::RemoveService { .. } => {
                "a native service of that name, but this release runs it as a scheduled task"
                    .into()
            }
            WinAction::RemoveTask { .. } => {
                "a scheduled task of that name, but this release runs it as a native service".into()
            }
            other => format!("not as desired: would {}", other.describe()),
        }
    }
}

/// One of every action, for the contract and grammar tests (and a compile
/// error in `every_kind_has_an_example` when a variant is added without one).
#[doc(hidden)]
pub fn examples() -> Vec<WinAction> {
    let svc = crate::os::windows::desired::example_service();
    vec![
        WinAction::RecordPodCidr {
            pod_cidr: "192.168.1.0/24".parse().unwrap(),
            cluster: "demo".into(),
            cluster_id: "0123456789abcdef".into(),
        },
        WinAction::EnableRouting,
        WinAction::CreateSwitch,
        WinAction::CreateNetwork {
            name: "kwinctl".into(),
            subnet: "192.168.1.0/24".parse().unwrap(),
            gateway: "192.168.1.1".parse().unwrap(),
            replace: true,
        },
        WinAction::SetGatewayAddress {
            gateway: "192.168.1.1".parse().unwrap(),
            prefix: 24,
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
            service: crate::os::windows::desired::example_task(),
            exists: true,
        },
        WinAction::StartTask {
            name: "kubelet".into(),
        },
        WinAction::RemoveService {
            name: "kube-proxy".into(),
        },
        WinAction::RemoveTask {
            name: "kubelet".into(),
        },
        WinAction::RemoveNetwork {
            name: "kwinctl".into(),
        },
        WinAction::RemoveSwitch,
        WinAction::RemoveFile {
            path: POD_CIDR_FILE.into(),
        },
    ]
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
                WinAction::RemoveService { .. } => "remove_service",
                WinAction::RemoveTask { .. } => "remove_task",
                WinAction::RemoveNetwork { .. } => "remove_network",
                WinAction::RemoveSwitch => "remove_switch",
                WinAction::RemoveFile { .. } => "remove_file",
            })
            .collect();
        assert_eq!(kinds.len(), 18);
        for a in examples() {
            assert!(kinds.contains(crate::render::kind_of(&a).as_str()));
        }
    }
}
