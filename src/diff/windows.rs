//! Windows: desired × facts → actions, following the seeds step by step.
//!
//! Preflight failures (old build, no Hyper-V module, no Docker, no routable
//! or second adapter, missing binaries) fail the host before anything is
//! changed on it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use super::{Conflict, Describe, Diff, Item};
use crate::facts::windows::{WindowsFacts, parse_build};
use crate::plan::{
    FileSource, HNS_ADAPTER, KUBE_PROXY_SWITCH, NodePlan, WinFile, WinService, WindowsDesired,
};

/// Windows Server 2016 (the first build with Windows containers networking
/// the seeds rely on).
pub const MIN_BUILD: (u32, u32, u32) = (10, 0, 14393);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WinAction {
    RecordPodCidr {
        pod_cidr: Ipv4Net,
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
    /// `reset`: stop and delete a service.
    RemoveService {
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
            WinAction::RecordPodCidr { pod_cidr } => {
                format!(r"record pod CIDR {pod_cidr} in C:\k\kwinctl\pod-cidr.txt")
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
            WinAction::RemoveService { name } => format!("stop and delete service {name}"),
            WinAction::RemoveNetwork { name } => format!("remove docker network {name}"),
            WinAction::RemoveSwitch => format!("remove Hyper-V switch {KUBE_PROXY_SWITCH}"),
            WinAction::RemoveFile { path } => format!("remove {path}"),
        }
    }

    fn finding(&self) -> String {
        match self {
            WinAction::RecordPodCidr { .. } => "no pod CIDR recorded on the host".into(),
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
            other => format!("not as desired: would {}", other.describe()),
        }
    }
}

pub type WinDiff = Diff<WinAction>;

fn normalise_image(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    let last = s.rsplit('/').next().unwrap_or(&s);
    if last.contains(':') || last.contains('@') {
        s
    } else {
        format!("{s}:latest")
    }
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_ascii_lowercase()).collect()
}

/// Checks that fail a Windows host before anything is changed.
pub fn preflight(node: &NodePlan, d: &WindowsDesired, f: &WindowsFacts) -> Result<u32, Conflict> {
    let mut problems = Vec::new();
    match parse_build(&f.build) {
        Some(b) if b >= MIN_BUILD => {}
        _ => problems.push(format!(
            "Windows build {} is older than 10.0.14393 (Windows Server 2016)",
            f.build
        )),
    }
    if !f.hyperv_module {
        problems.push(
            "the Hyper-V PowerShell module is missing (Install-WindowsFeature Hyper-V-PowerShell)"
                .into(),
        );
    }
    if f.docker_version.is_empty() {
        problems.push("Docker is not installed".into());
    }
    let index = match routable_adapter(node, d, f) {
        Some(a) => Some(a.index),
        None => {
            problems.push(match &d.adapter {
                Some(n) => format!("no adapter named {n:?}"),
                None => format!(
                    "no adapter holds the node's address {} (name it with windows.adapter)",
                    node.address
                ),
            });
            None
        }
    };
    let hns_exists = f.adapters.iter().any(|a| a.name == HNS_ADAPTER);
    let second = f.adapters.iter().any(|a| {
        Some(a.index) != index
            && a.name != HNS_ADAPTER
            && !a
                .name
                .eq_ignore_ascii_case(&format!("vEthernet ({KUBE_PROXY_SWITCH})"))
    });
    if !hns_exists && !second {
        problems.push(
            "no second network adapter for the transparent network (the seeds need two NICs)"
                .into(),
        );
    }
    let placed: BTreeSet<&str> = d.files.iter().map(|f| f.path.as_str()).collect();
    for req in &d.required_files {
        if !placed.contains(req.as_str())
            && !f.files.iter().any(|x| x.path.eq_ignore_ascii_case(req))
        {
            problems.push(format!(
                "{req} is missing: add windows.binaries (url and sha256) to the inventory"
            ));
        }
    }
    match f.pod_cidr {
        Some(rec) if rec != node.pod_cidr => problems.push(format!(
            r"the host records pod CIDR {rec} (C:\k\kwinctl\pod-cidr.txt) but the state file assigns {}; if the state file is wrong, pin `pod_cidr: {rec}` for {} in the inventory",
            node.pod_cidr, node.name
        )),
        _ => {}
    }
    if problems.is_empty() {
        Ok(index.expect("routable adapter"))
    } else {
        Err(Conflict(format!(
            "preflight failed, nothing was changed: {}",
            problems.join("; ")
        )))
    }
}

pub fn diff_windows(
    node: &NodePlan,
    d: &WindowsDesired,
    f: &WindowsFacts,
) -> Result<WinDiff, Conflict> {
    let index = preflight(node, d, f)?;
    let mut items: Vec<Item<WinAction>> = Vec::new();
    let mut notes = vec![format!("Windows {}, Docker {}", f.build, f.docker_version)];
    let mut item = |key: String, action: Option<WinAction>| items.push(Item { key, action });

    item(
        format!("pod-cidr {}", node.pod_cidr),
        f.pod_cidr.is_none().then_some(WinAction::RecordPodCidr {
            pod_cidr: node.pod_cidr,
        }),
    );
    let forwarding = f
        .adapters
        .iter()
        .find(|a| a.index == index)
        .is_some_and(|a| a.forwarding);
    item(
        "routing".into(),
        (!(f.routing_installed && forwarding)).then_some(WinAction::EnableRouting),
    );
    let switch_ok = f
        .switches
        .iter()
        .any(|s| s.name == KUBE_PROXY_SWITCH && s.kind.eq_ignore_ascii_case("internal"));
    item(
        format!("switch {KUBE_PROXY_SWITCH}"),
        (!switch_ok).then_some(WinAction::CreateSwitch),
    );
    let net = f.networks.iter().find(|n| n.name == d.network);
    let net_ok = net.is_some_and(|n| {
        n.driver == "transparent"
            && n.subnet == Some(node.pod_cidr)
            && n.gateway == Some(node.gateway)
    });
    item(
        format!("network {}", d.network),
        (!net_ok).then(|| WinAction::CreateNetwork {
            name: d.network.clone(),
            subnet: node.pod_cidr,
            gateway: node.gateway,
            replace: net.is_some(),
        }),
    );
    let gw_ok = net_ok
        && f.adapters
            .iter()
            .any(|a| a.name == HNS_ADAPTER && a.ipv4.contains(&node.gateway));
    item(
        format!("gateway {}", node.gateway),
        (!gw_ok).then_some(WinAction::SetGatewayAddress {
            gateway: node.gateway,
            prefix: node.pod_cidr.prefix_len(),
        }),
    );

    let desired = node.routes();
    let mut have: BTreeMap<Ipv4Net, &crate::facts::windows::WinRoute> = BTreeMap::new();
    for r in f.routes.iter().filter(|r| r.index == index) {
        have.entry(r.dst).or_insert(r);
    }
    for r in f.routes.iter().filter(|r| r.index == index) {
        if desired.contains_key(&r.dst) {
            continue;
        }
        if node.cluster_cidr.contains(&r.dst) && r.dst != node.pod_cidr {
            item(
                format!("stale route {}", r.dst),
                Some(WinAction::DelRoute {
                    dst: r.dst,
                    via: r.via,
                }),
            );
        }
    }
    for (dst, via) in &desired {
        let action = match have.get(dst) {
            Some(r) if r.via == Some(*via) && r.persistent => None,
            Some(_) => Some(WinAction::AddRoute {
                dst: *dst,
                via: *via,
                replace: true,
            }),
            None => Some(WinAction::AddRoute {
                dst: *dst,
                via: *via,
                replace: false,
            }),
        };
        item(format!("route {dst}"), action);
    }

    let images: BTreeSet<String> = f.images.iter().map(|i| normalise_image(i)).collect();
    item(
        format!("image {}", d.pause_image),
        (!images.contains(&normalise_image(&d.pause_image))).then(|| WinAction::PullImage {
            image: d.pause_image.clone(),
        }),
    );
    for file in &d.files {
        let ok = f.files.iter().any(|x| {
            x.path.eq_ignore_ascii_case(&file.path) && x.sha256.eq_ignore_ascii_case(&file.sha256)
        });
        item(
            format!("file {}", file.path),
            (!ok).then(|| WinAction::PlaceFile { file: file.clone() }),
        );
    }
    let mut changed_services: BTreeSet<String> = BTreeSet::new();
    for s in &d.services {
        let have = f
            .services
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case(&s.name));
        let ok = have.is_some_and(|h| {
            h.binpath == s.binpath
                && set(&h.env) == set(&s.env)
                && set(&h.depends) == set(&s.depends)
                && h.start.eq_ignore_ascii_case("automatic")
                && h.restart
        });
        if !ok {
            changed_services.insert(s.name.clone());
        }
        item(
            format!("service {}", s.name),
            (!ok).then(|| WinAction::InstallService {
                service: s.clone(),
                exists: have.is_some(),
            }),
        );
    }
    for s in &d.services {
        // A service being (re)installed is (re)started by its own action.
        if changed_services.contains(&s.name) {
            continue;
        }
        let running = f.services.iter().any(|x| {
            x.name.eq_ignore_ascii_case(&s.name) && x.status.eq_ignore_ascii_case("running")
        });
        item(
            format!("running {}", s.name),
            (!running).then(|| WinAction::StartService {
                name: s.name.clone(),
            }),
        );
    }
    if f.routes
        .iter()
        .any(|r| r.index == index && !r.persistent && desired.contains_key(&r.dst))
    {
        notes.push(
            "some routes were not persistent: they are re-added (New-NetRoute writes the persistent store too)"
                .into(),
        );
    }
    Ok(Diff { items, notes })
}

/// The adapter that carries the node's routable address: the one the
/// inventory names (`windows.adapter`), else the one holding the address.
fn routable_adapter<'f>(
    node: &NodePlan,
    d: &WindowsDesired,
    f: &'f WindowsFacts,
) -> Option<&'f crate::facts::windows::Adapter> {
    match &d.adapter {
        Some(name) => f
            .adapters
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(name)),
        None => f.adapters.iter().find(|a| a.ipv4.contains(&node.address)),
    }
}

/// `reset`: undo what `up` created, in reverse order. The Routing role and
/// the pause image stay (other software may use them); so do routes outside
/// the cluster CIDR.
pub fn diff_reset_windows(node: &NodePlan, d: &WindowsDesired, f: &WindowsFacts) -> WinDiff {
    let mut items: Vec<Item<WinAction>> = Vec::new();
    for s in d.services.iter().rev() {
        let present = f
            .services
            .iter()
            .any(|x| x.name.eq_ignore_ascii_case(&s.name));
        items.push(Item {
            key: format!("service {}", s.name),
            action: present.then(|| WinAction::RemoveService {
                name: s.name.clone(),
            }),
        });
    }
    let index = routable_adapter(node, d, f).map(|a| a.index);
    for r in &f.routes {
        if Some(r.index) == index && node.cluster_cidr.contains(&r.dst) && r.dst != node.pod_cidr {
            items.push(Item {
                key: format!("route {}", r.dst),
                action: Some(WinAction::DelRoute {
                    dst: r.dst,
                    via: r.via,
                }),
            });
        }
    }
    let net = f.networks.iter().any(|n| n.name == d.network);
    items.push(Item {
        key: format!("network {}", d.network),
        action: net.then(|| WinAction::RemoveNetwork {
            name: d.network.clone(),
        }),
    });
    let switch = f.switches.iter().any(|s| s.name == KUBE_PROXY_SWITCH);
    items.push(Item {
        key: format!("switch {KUBE_PROXY_SWITCH}"),
        action: switch.then_some(WinAction::RemoveSwitch),
    });
    for file in &d.files {
        let present = f
            .files
            .iter()
            .any(|x| x.path.eq_ignore_ascii_case(&file.path));
        items.push(Item {
            key: format!("file {}", file.path),
            action: present.then(|| WinAction::RemoveFile {
                path: file.path.clone(),
            }),
        });
    }
    items.push(Item {
        key: "pod-cidr record".into(),
        action: f.pod_cidr.is_some().then(|| WinAction::RemoveFile {
            path: r"C:\k\kwinctl\pod-cidr.txt".into(),
        }),
    });
    Diff {
        items,
        notes: vec!["the Routing role and the pause image are left in place".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::windows::{Adapter, FileFact, Network, Service, Switch, WinRoute};
    use crate::inventory::Os;
    use crate::plan::WIN_DIR;

    fn node() -> NodePlan {
        crate::plan::test_node(
            "win01",
            Os::Windows,
            "10.0.0.11",
            "192.168.1.0/24",
            "192.168.0.0/16",
            &[
                ("lin01", "10.0.0.10", "192.168.0.0/24"),
                ("win02", "10.0.0.12", "192.168.2.0/24"),
            ],
        )
    }

    fn desired() -> WindowsDesired {
        let svc = |n: &str, dep: &str| WinService {
            name: n.into(),
            display: n.into(),
            binpath: format!(r"{WIN_DIR}\{n}.exe --windows-service"),
            env: vec!["CONTAINER_NETWORK=kwinctl".into()],
            depends: vec![dep.into()],
        };
        WindowsDesired {
            network: "kwinctl".into(),
            adapter: None,
            pause_image: "apprenda/pause".into(),
            files: vec![WinFile {
                path: format!(r"{WIN_DIR}\kubelet.exe"),
                sha256: "aa".into(),
                source: FileSource::Url("https://example.invalid/kubelet.exe".into()),
            }],
            required_files: vec![
                format!(r"{WIN_DIR}\kubelet.exe"),
                format!(r"{WIN_DIR}\kube-proxy.exe"),
            ],
            services: vec![svc("kubelet", "docker"), svc("kube-proxy", "kubelet")],
        }
    }

    fn converged() -> WindowsFacts {
        let d = desired();
        let mut f = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None);
        f.adapters[0].forwarding = true;
        f.adapters.push(Adapter {
            name: HNS_ADAPTER.into(),
            index: 9,
            ipv4: vec!["192.168.1.1".parse().unwrap()],
            forwarding: true,
        });
        f.routing_installed = true;
        f.switches = vec![Switch {
            name: KUBE_PROXY_SWITCH.into(),
            kind: "Internal".into(),
        }];
        f.networks = vec![Network {
            name: "kwinctl".into(),
            driver: "transparent".into(),
            subnet: Some("192.168.1.0/24".parse().unwrap()),
            gateway: Some("192.168.1.1".parse().unwrap()),
        }];
        f.routes = vec![
            WinRoute {
                dst: "192.168.0.0/24".parse().unwrap(),
                via: Some("10.0.0.10".parse().unwrap()),
                index: 4,
                persistent: true,
            },
            WinRoute {
                dst: "192.168.2.0/24".parse().unwrap(),
                via: Some("10.0.0.12".parse().unwrap()),
                index: 4,
                persistent: true,
            },
        ];
        f.images = vec!["apprenda/pause:latest".into()];
        f.files = vec![
            FileFact {
                path: format!(r"{WIN_DIR}\kubelet.exe"),
                sha256: "AA".into(),
            },
            FileFact {
                path: format!(r"{WIN_DIR}\kube-proxy.exe"),
                sha256: "bb".into(),
            },
        ];
        f.services = d
            .services
            .iter()
            .map(|s| Service {
                name: s.name.clone(),
                status: "Running".into(),
                start: "Automatic".into(),
                binpath: s.binpath.clone(),
                env: s.env.clone(),
                depends: s.depends.clone(),
                restart: true,
            })
            .collect();
        f.pod_cidr = Some("192.168.1.0/24".parse().unwrap());
        f
    }

    fn acts(r: &Result<WinDiff, Conflict>) -> Vec<String> {
        r.as_ref()
            .unwrap()
            .actions()
            .map(|a| a.describe())
            .collect()
    }

    #[test]
    fn fresh_node_gets_every_seed_step() {
        let mut f = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None);
        f.files.push(FileFact {
            path: format!(r"{WIN_DIR}\kube-proxy.exe"),
            sha256: "bb".into(),
        });
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert_eq!(
            a,
            [
                r"record pod CIDR 192.168.1.0/24 in C:\k\kwinctl\pod-cidr.txt",
                "enable routing (Routing role, forwarding on the routable adapter)",
                "create internal Hyper-V switch KubeProxySwitch",
                "create transparent docker network kwinctl on 192.168.1.0/24 (gateway 192.168.1.1)",
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24",
                "add persistent route 192.168.0.0/24 via 10.0.0.10",
                "add persistent route 192.168.2.0/24 via 10.0.0.12",
                "pull image apprenda/pause",
                r"download C:\k\kubelet.exe from https://example.invalid/kubelet.exe",
                "install service kubelet",
                "install service kube-proxy",
            ]
        );
    }

    #[test]
    fn converged_node_has_nothing_to_do() {
        let r = diff_windows(&node(), &desired(), &converged());
        assert_eq!(acts(&r), Vec::<String>::new());
    }

    #[test]
    fn lost_network_and_stopped_service_after_reboot() {
        let mut f = converged();
        f.networks.clear();
        f.adapters.retain(|a| a.name != HNS_ADAPTER);
        f.services[1].status = "Stopped".into();
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            [
                "create transparent docker network kwinctl on 192.168.1.0/24 (gateway 192.168.1.1)",
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24",
                "start service kube-proxy",
            ]
        );
    }

    #[test]
    fn wrong_subnet_recreates_and_changed_flag_reconfigures() {
        let mut f = converged();
        f.networks[0].subnet = Some("192.168.9.0/24".parse().unwrap());
        f.services[0].binpath.push_str(" --v=9");
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert!(
            a[0].starts_with("re-create transparent docker network"),
            "{a:?}"
        );
        assert!(
            a.contains(&"reconfigure and restart service kubelet".to_string()),
            "{a:?}"
        );
    }

    #[test]
    fn stale_cluster_routes_removed_others_left_alone() {
        let mut f = converged();
        f.routes.push(WinRoute {
            dst: "192.168.7.0/24".parse().unwrap(),
            via: Some("10.0.0.77".parse().unwrap()),
            index: 4,
            persistent: true,
        });
        f.routes.push(WinRoute {
            dst: "10.50.0.0/16".parse().unwrap(),
            via: Some("10.0.0.1".parse().unwrap()),
            index: 4,
            persistent: true,
        });
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            ["remove stale route 192.168.7.0/24 via 10.0.0.77"]
        );
    }

    #[test]
    fn reset_undoes_in_reverse_order_and_is_idempotent() {
        let f = converged();
        let d = diff_reset_windows(&node(), &desired(), &f);
        let a: Vec<String> = d.actions().map(|a| a.describe()).collect();
        assert_eq!(
            a,
            [
                "stop and delete service kube-proxy",
                "stop and delete service kubelet",
                "remove stale route 192.168.0.0/24 via 10.0.0.10",
                "remove stale route 192.168.2.0/24 via 10.0.0.12",
                "remove docker network kwinctl",
                "remove Hyper-V switch KubeProxySwitch",
                r"remove C:\k\kubelet.exe",
                r"remove C:\k\kwinctl\pod-cidr.txt",
            ]
        );
        let fresh = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None);
        assert_eq!(diff_reset_windows(&node(), &desired(), &fresh).changes(), 0);
    }

    #[test]
    fn preflight_names_every_problem_and_changes_nothing() {
        let mut f = converged();
        f.build = "6.3.9600".into();
        f.hyperv_module = false;
        f.docker_version = String::new();
        f.adapters.truncate(1);
        f.adapters[0].ipv4 = vec!["10.9.9.9".parse().unwrap()];
        let e = diff_windows(&node(), &desired(), &f).unwrap_err().0;
        for want in [
            "older than 10.0.14393",
            "Hyper-V",
            "Docker",
            "no adapter holds",
            "nothing was changed",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
        let mut f = converged();
        f.files.clear();
        let mut d = desired();
        d.files.clear();
        let e = diff_windows(&node(), &d, &f).unwrap_err().0;
        assert!(e.contains(r"C:\k\kubelet.exe is missing"), "{e}");
    }
}
