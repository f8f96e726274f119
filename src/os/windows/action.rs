//! What kwinctl does on a Windows host, one action at a time, following the
//! seeds step by step. The serde `kind` of an action is the name of its
//! template (`templates/<kind>.ps1.j2`) and of the simulator's handler
//! (`act_<kind>` in `winsim/winsim.py`), and its serde form is the header the
//! simulator reads: see `crate::wire`.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::boot::{BOOT_TASK, BootSpec};
use super::files::Archive;
use super::files::{FileSource, WinFile};
use super::firewall::FwRule;
use super::hns::{HnsNet, HostEp};
use super::service::WinService;
use super::{KUBE_PROXY_SWITCH, POD_CIDR_FILE};
use crate::diff::Describe;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WinAction {
    /// The node's own record of its pod CIDR and its cluster.
    RecordPodCidr {
        pod_cidr: Ipv4Net,
        cluster: String,
        cluster_id: String,
        /// The host that keeps the cluster's lock (the cluster file's
        /// second line).
        lock_host: String,
    },
    /// The Routing role service, and forwarding on the routable adapter.
    EnableRouting,
    CreateSwitch,
    /// `docker network create -d transparent` on the network card
    /// `interface` (never the routable one: see `nic.rs`); `replace`
    /// removes a network of the same name with the wrong subnet, gateway or
    /// card first.
    CreateNetwork {
        name: String,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
        interface: String,
        replace: bool,
    },
    /// The pods' gateway address on the network's virtual adapter
    /// (`adapter`, named by build), DHCP off and forwarding on there; the
    /// script refuses if that adapter holds the node's address.
    SetGatewayAddress {
        adapter: String,
        gateway: Ipv4Addr,
        prefix: u8,
        node_address: Ipv4Addr,
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
    /// register the scheduled task that runs it (re-registering an existing
    /// one; the boot task starts it at boot), start it, and check the
    /// binary stays up.
    InstallTask {
        service: WinService,
        exists: bool,
    },
    /// Write the boot script and register the startup task that runs it
    /// (`boot.rs`); it is not run now (the other actions did its work).
    InstallBootTask {
        boot: BootSpec,
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
    /// Replace kwinctl's firewall rules (`kwinctl-*`) with `rules`.
    SetFirewall {
        rules: Vec<FwRule>,
    },
    /// `reset`: remove kwinctl's firewall rules.
    RemoveFirewall,
    /// `reset`: remove the transparent network (and with it the HNS adapter).
    RemoveNetwork {
        name: String,
    },
    RemoveSwitch,
    RemoveFile {
        path: String,
    },
    /// `reset`: a folder of kwinctl's own and everything in it (the pushed
    /// copies, the detached task's scripts and results: `leftovers.rs`).
    RemoveFolder {
        path: String,
    },
    /// An upgrade's rollback: put back the copies `place_file` kept of
    /// these binaries (`<path>.previous`) when they are of `version` (their
    /// `--version` matches `version_regex`; a binary already of it stays),
    /// the services running them stopped for the swap and started again.
    RestorePrevious {
        paths: Vec<String>,
        version: String,
        version_regex: String,
    },
    /// l2bridge: a Windows feature (Containers: HNS and containerd need it
    /// and a restart, docs/research/sig-windows-tools.md#s2, docs/research/kubernetes.md#g1).
    InstallFeature {
        name: String,
    },
    /// l2bridge: place a release archive and unpack the files kwinctl uses.
    InstallArchive {
        #[serde(flatten)]
        archive: Box<Archive>,
    },
    /// l2bridge: the placeholder network, then the node's L2Bridge network
    /// (`replace`: one of that name with another subnet or card first).
    EnsureHnsNetwork {
        #[serde(flatten)]
        net: HnsNet,
        replace: bool,
    },
    /// l2bridge: the host endpoint at P+2, attached to the host compartment.
    EnsureHostEndpoint {
        #[serde(flatten)]
        ep: HostEp,
    },
    /// l2bridge: forwarding on the interfaces holding these addresses.
    SetForwarding {
        addresses: Vec<Ipv4Addr>,
    },
    /// l2bridge: pull the sandbox image into containerd for this build.
    PullSandbox {
        image: String,
    },
    /// `reset` (l2bridge): remove the node's HNS network and its endpoints.
    RemoveHnsNetwork {
        name: String,
    },
    /// l2bridge: a running service whose health endpoint does not answer
    /// is restarted.
    RestartService {
        name: String,
        port: u16,
    },
    /// A joining node (issue 35): its kubelet started anew when `cert` is
    /// missing (the services depending on it started again), a wait of at
    /// most `seconds` for `cert`, then `bootstrap` (the token's file) and
    /// `stale` (a shared kubeconfig of before) removed
    /// (docs/research/bootstrap.md#bt-join).
    FinishJoin {
        cert: String,
        bootstrap: String,
        stale: Vec<String>,
        seconds: u32,
    },
    /// l2bridge: the TCP dynamic port range set to `count` ports from
    /// `start` (docs/research/windows-dynamic-ports.md).
    SetDynamicPorts {
        start: u32,
        count: u32,
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
                interface,
                replace,
            } => format!(
                "{} transparent docker network {name} on {subnet} (gateway {gateway}) on network card {interface}",
                if *replace { "re-create" } else { "create" }
            ),
            WinAction::SetGatewayAddress {
                adapter,
                gateway,
                prefix,
                ..
            } => {
                format!(
                    "give {adapter} the gateway address {gateway}/{prefix} (DHCP off, forwarding on)"
                )
            }
            WinAction::AddRoute { dst, via, replace } => format!(
                "{} persistent route {dst} via {via}",
                if *replace { "replace" } else { "add" }
            ),
            WinAction::DelRoute { dst, via } => match via {
                Some(v) => format!("remove route {dst} via {v}"),
                None => format!("remove route {dst}"),
            },
            WinAction::PullImage { image } => format!("pull image {image}"),
            WinAction::PlaceFile { file } => match &file.source {
                FileSource::Url(u) => format!("download {} from {u}", file.path),
                FileSource::Inline(b) => format!("upload {} ({} bytes)", file.path, b.len()),
                FileSource::Push(p) => format!("push {} ({} bytes)", file.path, p.size),
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
                "{} {} as a scheduled task (start script; it has no --windows-service)",
                if *exists {
                    "reconfigure and restart"
                } else {
                    "run"
                },
                service.name
            ),
            WinAction::StartTask { name } => format!("start scheduled task {name}"),
            WinAction::InstallBootTask { boot } if boot.profile.l2().is_some() => format!(
                "install the startup task {BOOT_TASK} (puts the HNS network, host endpoint, forwarding and routes back, starts kubelet and kube-proxy, keeps them in place)"
            ),
            WinAction::InstallBootTask { .. } => format!(
                "install the startup task {BOOT_TASK} (puts the pods' network, gateway and forwarding back, then starts kubelet and kube-proxy)"
            ),
            WinAction::RemoveService { name } => format!("stop and delete service {name}"),
            WinAction::RemoveTask { name } => {
                format!("stop and delete scheduled task {name} and its start script")
            }
            WinAction::SetFirewall { rules } => format!(
                "allow {} from the cluster in Windows Firewall (rules {})",
                rules
                    .iter()
                    .map(|r| r
                        .display
                        .trim_start_matches("kwinctl: ")
                        .trim_end_matches(" from the cluster"))
                    .collect::<Vec<_>>()
                    .join(", "),
                rules
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            WinAction::RemoveFirewall => {
                "remove kwinctl's Windows Firewall rules (kwinctl-*)".into()
            }
            WinAction::RemoveNetwork { name } => format!("remove docker network {name}"),
            WinAction::RemoveSwitch => format!("remove Hyper-V switch {KUBE_PROXY_SWITCH}"),
            WinAction::RemoveFile { path } => format!("remove {path}"),
            WinAction::RemoveFolder { path } => format!("remove the folder {path} and all in it"),
            WinAction::RestorePrevious { paths, version, .. } => {
                format!("put back {} of release {version}", paths.join(" and "))
            }
            WinAction::InstallFeature { name } => {
                format!("install the Windows feature {name} (takes effect after a restart)")
            }
            WinAction::InstallArchive { archive } => format!(
                "{} {} and unpack {}{}",
                match &archive.archive.source {
                    FileSource::Url(_) => "download",
                    FileSource::Inline(_) => "upload",
                    FileSource::Push(_) => "push",
                },
                archive.name,
                archive
                    .members
                    .iter()
                    .map(|m| m.rsplit('\\').next().unwrap_or(m))
                    .collect::<Vec<_>>()
                    .join(", "),
                // the service the swap stops, and its dependents with it
                if archive
                    .members
                    .iter()
                    .any(|m| m.to_ascii_lowercase().ends_with("\\containerd.exe"))
                {
                    " (a running containerd restarts, and kubelet and kube-proxy with it)"
                } else {
                    ""
                }
            ),
            WinAction::EnsureHnsNetwork { net, replace } => format!(
                "{} HNS L2Bridge network {} on {} (gateway {}) on network card {}",
                if *replace { "re-create" } else { "create" },
                net.name,
                net.subnet,
                net.gateway,
                net.adapter
            ),
            WinAction::EnsureHostEndpoint { ep } => format!(
                "create host endpoint {} at {}/{} (the pods' gateway) and attach it to the host",
                ep.name, ep.ip, ep.prefix
            ),
            WinAction::SetForwarding { addresses } => format!(
                "forward on the interfaces holding {}",
                addresses
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            WinAction::PullSandbox { image } => {
                format!("pull sandbox image {image} into containerd")
            }
            WinAction::RemoveHnsNetwork { name } => {
                format!("remove HNS network {name} and its endpoints")
            }
            WinAction::RestartService { name, .. } => format!("restart service {name}"),
            WinAction::FinishJoin {
                cert, bootstrap, ..
            } => format!(
                "let the kubelet bootstrap its client certificate ({cert}), then remove {bootstrap}"
            ),
            WinAction::SetDynamicPorts { start, count } => format!(
                "widen the TCP dynamic port range to {start}-{} ({count} ports)",
                start + count - 1
            ),
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
            WinAction::CreateNetwork {
                subnet, interface, ..
            } => {
                format!(
                    "exists with the wrong subnet, gateway or network card (expected {subnet} on {interface})"
                )
            }
            WinAction::SetGatewayAddress {
                adapter, gateway, ..
            } => {
                format!("{adapter} does not have {gateway}, has DHCP on or does not forward")
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
            WinAction::RestartService { port, .. } => {
                format!("running, but http://127.0.0.1:{port}/healthz does not answer ok")
            }
            WinAction::InstallTask { exists: false, .. } => "no scheduled task".into(),
            WinAction::InstallTask { .. } => {
                "the scheduled task runs another command line, environment or start script".into()
            }
            WinAction::StartTask { name } => format!("{name} is not running"),
            WinAction::SetDynamicPorts { start, count } => format!(
                "the TCP dynamic port range does not cover {start}-{}",
                start + count - 1
            ),
            WinAction::SetFirewall { .. } => {
                "kwinctl's firewall rules are missing, disabled or for other nodes".into()
            }
            WinAction::InstallBootTask { .. } => {
                format!("no startup task {BOOT_TASK}, or one for another network or services")
            }
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

/// The time budget of an action that can take longer than a remote call
/// usually does; it runs in a call of its own with that budget (or
/// `--timeout`, if longer). The figures are kwinctl's (B): installing a
/// Windows role, pulling a Windows image (its base layers are hundreds of
/// MB to GBs) and moving a ~100 MB binary over a slow link.
pub fn budget(a: &WinAction) -> Option<std::time::Duration> {
    let minutes = match a {
        WinAction::EnableRouting => 20,
        WinAction::PullImage { .. } | WinAction::PullSandbox { .. } => 30,
        WinAction::InstallFeature { .. } => 20,
        WinAction::InstallArchive { archive } => match &archive.archive.source {
            FileSource::Url(_) | FileSource::Push(_) => 15,
            FileSource::Inline(b) if b.len() > 1 << 20 => 15,
            FileSource::Inline(_) => return None,
        },
        WinAction::PlaceFile { file } => match &file.source {
            // (the push itself runs before, in calls of its own)
            FileSource::Url(_) | FileSource::Push(_) => 15,
            // (a kubeconfig goes with the short actions)
            FileSource::Inline(b) if b.len() > 1 << 20 => 15,
            FileSource::Inline(_) => return None,
        },
        _ => return None,
    };
    Some(std::time::Duration::from_secs(minutes * 60))
}

/// The file an action pushes from the operator's machine, if any.
pub fn pushes(a: &WinAction) -> Option<std::sync::Arc<crate::transfer::Local>> {
    let source = match a {
        WinAction::PlaceFile { file } => &file.source,
        WinAction::InstallArchive { archive } => &archive.archive.source,
        _ => return None,
    };
    match source {
        super::files::FileSource::Push(p) => Some(p.local.clone()),
        _ => None,
    }
}
