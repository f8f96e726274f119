//! The l2bridge profile's preflight, diff and reset (`l2bridge.rs` has the
//! desired state; docs/research/l2bridge-profile.md the sources, in brackets).
//!
//! Order on a host: firewall and pod CIDR record; the Containers feature
//! (a restart before HNS and containerd work, docs/research/sig-windows-tools.md#s2, docs/research/kubernetes.md#g1: until then nothing
//! after the files is done, and the host reports "reboot required");
//! containerd and the CNI plugins; config files; the containerd service and
//! the sandbox image; the HNS network (placeholder first), host endpoint and
//! forwarding; routes on the vSwitch's host vNIC; the boot task; kubelet
//! and kube-proxy.

use std::net::Ipv4Addr;

use super::{self as l2, L2Desired};
use crate::alloc::Node;
use crate::diff::{Conflict, Item};
use crate::os::windows::action::WinAction;
use crate::os::windows::boot::{BOOT_TASK, BootRoute, BootSpec, L2Boot};
use crate::os::windows::facts::{
    Adapter, HnsNetwork, PortRange, WindowsFacts, normalise_image, parse_build,
};
use crate::os::windows::files::WinFile;
use crate::os::windows::hns::{HnsNet, HostEp};
use crate::os::windows::items::{WinDiff, common_items, file_items, route_items, service_items};
use crate::os::windows::k8s::{self, Hosting, Profile};
use crate::os::windows::preflight::{binary_versions, missing_files, pause_image};
use crate::os::windows::{CLUSTER_FILE, POD_CIDR_FILE, WinService, WindowsDesired};

/// Windows Server 2019: the first build the profile runs on (k8s.yaml).
const MIN_BUILD: u32 = 17763;

/// The TCP dynamic port range an l2bridge node gets: 34000-65535, as
/// Kubernetes' Windows node images have it (docs/research/windows-dynamic-ports.md#dyn2).
pub const DYNAMIC_PORTS: PortRange = PortRange {
    start: 34000,
    count: 31536,
};

fn holder(f: &WindowsFacts, a: Ipv4Addr) -> Option<&Adapter> {
    f.adapters.iter().find(|x| x.ipv4.contains(&a))
}

/// `vEthernet (Ethernet)` → `Ethernet`: the card under an external vSwitch.
fn card_of_vnic(name: &str) -> Option<&str> {
    name.strip_prefix("vEthernet (")?.strip_suffix(')')
}

fn is(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// The network card the vSwitch takes: the one the inventory names, else
/// the one holding the node's address (under the vSwitch once it exists:
/// the address moves to `vEthernet (<card>)`, docs/research/flannel.md#f1, docs/research/kubernetes.md#g1).
fn card(
    node: &Node,
    d: &WindowsDesired,
    f: &WindowsFacts,
    problems: &mut Vec<String>,
) -> Option<String> {
    let h = holder(f, node.address);
    if let Some(named) = &d.adapter {
        let known = f.adapters.iter().any(|a| is(&a.name, named));
        if !known {
            problems.push(format!("no network card named {named:?} (windows.adapter)"));
            return None;
        }
        return Some(named.clone());
    }
    match h {
        None => {
            problems.push(format!(
                "no adapter holds the node's address {}: name the network card with windows.adapter",
                node.address
            ));
            None
        }
        Some(a) => match card_of_vnic(&a.name) {
            Some(c) => Some(c.to_string()),
            None if a.physical => Some(a.name.clone()),
            None => {
                problems.push(format!(
                    "the node's address {} is on {:?}, which is neither a network card nor a vSwitch's host adapter: name the card with windows.adapter",
                    node.address, a.name
                ));
                None
            }
        },
    }
}

/// Checks that fail an l2bridge host before anything is changed; the
/// network card the vSwitch takes.
pub fn preflight(
    node: &Node,
    d: &WindowsDesired,
    l2: &L2Desired,
    f: &WindowsFacts,
) -> Result<String, Conflict> {
    let mut problems = Vec::new();
    let m = d.kubernetes_version.minor;
    let build = match parse_build(&f.build) {
        Some(b) if b.2 >= MIN_BUILD => {
            if let Some(why) = k8s::build_refusal(m, Profile::L2Bridge, b.2) {
                problems.push(why);
            }
            Some(b.2)
        }
        _ => {
            problems.push(format!(
                "Windows build {} is older than 10.0.17763 (Windows Server 2019), the first the l2bridge profile runs on",
                f.build
            ));
            None
        }
    };
    if f.containers_feature.is_empty() {
        problems.push("kwinctl cannot tell whether the Containers feature is installed (Get-WindowsFeature Containers failed)".into());
    }
    let card = card(node, d, f, &mut problems);
    missing_files(d, f, l2::archive_key, &mut problems);
    binary_versions(d, f, &mut problems);
    if l2.containerd.is_none() {
        let out = f
            .versions
            .iter()
            .find(|v| is(&v.path, l2::CONTAINERD_EXE))
            .map(|v| v.output.trim())
            .unwrap_or("");
        let want = format!(" v{} ", l2.containerd_version);
        if !out.is_empty() && !format!("{out} ").contains(&want) {
            problems.push(format!(
                "{} --version printed {:?}, but the inventory declares containerd_version {}: set containerd_version, or give windows.binaries.containerd",
                l2::CONTAINERD_EXE,
                crate::text::clip(out, 100),
                l2.containerd_version
            ));
        }
    }
    if let Some(b) = build {
        // containerd's matcher: from 1.7.20 a 2025 host runs 2022's entry
        let table = k8s::containerd_has_table(l2.containerd_version);
        pause_image(d, f, b, table, &mut problems);
    }
    // What the transparent profile built is still there (an inventory moved
    // to 1.24+): its switch and network hold the cards and addresses the
    // vSwitch needs, and its kubelet runs on Docker.
    let transparent: Vec<String> = f
        .switches
        .iter()
        .filter(|s| s.name == crate::os::windows::KUBE_PROXY_SWITCH)
        .map(|s| format!("the Hyper-V switch {}", s.name))
        .chain(
            f.networks
                .iter()
                .filter(|n| n.driver == "transparent")
                .map(|n| format!("the Docker transparent network {}", n.name)),
        )
        .collect();
    if !transparent.is_empty() {
        problems.push(format!(
            "{} of the transparent profile {} still here: run `kwinctl reset --limit {}` with the inventory of that profile (windows_profile: transparent, its kubernetes_version) first",
            transparent.join(" and "),
            if transparent.len() > 1 { "are" } else { "is" },
            node.name
        ));
    }
    // containerd loads only the first file of its conf dir (docs/research/containerd.md#d2).
    if let Some(first) = f
        .cni_conf_files
        .iter()
        .filter(|n| n.as_str() < l2::CNI_CONF_NAME)
        .min()
    {
        problems.push(format!(
            r"{}\{first} sorts before kwinctl's {}: containerd loads only the first CNI config (max_conf_num = 1), so pods would not use kwinctl's network; remove or rename it",
            l2::CNI_CONF_DIR,
            l2::CNI_CONF_NAME
        ));
    }
    if let Some(rec) = f.pod_cidr
        && rec != node.pod_cidr
    {
        problems.push(format!(
            "the host records pod CIDR {rec} ({POD_CIDR_FILE}) but the state file assigns {}; if the state file is wrong, pin `pod_cidr: {rec}` for {} in the inventory",
            node.pod_cidr, node.name
        ));
    }
    match card {
        Some(c) if problems.is_empty() => Ok(c),
        _ => Err(Conflict::Preflight(problems)),
    }
}

/// The first update build revision of Windows Server 2019 (17763) whose
/// HNS does Direct Server Return: KB4580390, 10.0.17763.1554, October 2020
/// (docs/research/kubernetes.md#k-dsr). kube-proxy started with
/// `--enable-dsr=true` on an older one exits ("platform does not support
/// feature Direct Server Return (DSR)").
pub const DSR_MIN_UBR_17763: u32 = 1554;

/// Whether the host's Windows does DSR, as far as kwinctl can tell (a
/// revision it could not read counts as recent: every later build has it).
pub fn dsr_supported(f: &WindowsFacts) -> bool {
    match (parse_build(&f.build), f.ubr) {
        (Some((_, _, 17763)), Some(ubr)) => ubr >= DSR_MIN_UBR_17763,
        _ => true,
    }
}

/// On a Windows Server 2019 without the update that brings DSR, kube-proxy
/// runs without it rather than exit: DSR is an optimisation, and the node
/// should not fail for it (a note says what is lost and how to get it).
fn without_dsr_where_unsupported(
    kube: Vec<WinService>,
    f: &WindowsFacts,
    notes: &mut Vec<String>,
) -> Vec<WinService> {
    if dsr_supported(f) {
        return kube;
    }
    notes.push(format!(
        "Windows {}.{} predates KB4580390 (10.0.17763.{DSR_MIN_UBR_17763}, October 2020), the update that brings DSR to Windows Server 2019: kube-proxy runs without --enable-dsr (Services work; externalTrafficPolicy: Local needs DSR); install a cumulative update from October 2020 or later and run `kwinctl up` again to turn it on",
        f.build,
        f.ubr.unwrap_or_default()
    ));
    kube.into_iter()
        .map(|s| {
            if s.name == "kube-proxy" {
                s.without_args(|a| {
                    a.starts_with("--enable-dsr=") || a == "--feature-gates=WinDSR=true"
                })
            } else {
                s
            }
        })
        .collect()
}

fn subnet_is(n: &HnsNetwork, prefix: &str, gateway: &str) -> bool {
    n.subnets
        .iter()
        .any(|s| s.prefix == prefix && s.gateway.as_deref() == Some(gateway))
}

pub fn diff(
    node: &Node,
    d: &WindowsDesired,
    l2: &L2Desired,
    f: &WindowsFacts,
) -> Result<WinDiff, Conflict> {
    let card = preflight(node, d, l2, f)?;
    let mut items: Vec<Item<WinAction>> = Vec::new();
    let mut notes = vec![format!(
        "Windows {}, containerd {}, Kubernetes {} (l2bridge: HNS L2Bridge network {}, win-bridge, kernelspace kube-proxy)",
        f.build, l2.containerd_version, d.kubernetes_version, d.network
    )];
    notes.extend(d.notes.iter().cloned());
    common_items(node, d, f, &mut items);
    let installed = f.containers_feature.eq_ignore_ascii_case("Installed");
    let pending = f.containers_feature.eq_ignore_ascii_case("InstallPending");
    items.push(Item {
        key: "feature Containers".into(),
        action: (!installed && !pending).then(|| WinAction::InstallFeature {
            name: "Containers".into(),
        }),
    });
    // (a range the probe could not read is left alone: docs/research/windows-dynamic-ports.md#dyn3)
    items.push(Item {
        key: "tcp dynamic ports".into(),
        action: f
            .tcp_dynamic_ports
            .filter(|r| !r.covers(DYNAMIC_PORTS))
            .map(|_| WinAction::SetDynamicPorts {
                start: DYNAMIC_PORTS.start,
                count: DYNAMIC_PORTS.count,
            }),
    });
    for a in [&l2.containerd, &l2.cni_plugins].into_iter().flatten() {
        let marker_ok = f
            .files
            .iter()
            .any(|x| is(&x.path, &a.marker) && is(&x.sha256, &a.marker_sha256()));
        let members_ok = a
            .members
            .iter()
            .all(|m| f.files.iter().any(|x| is(&x.path, m)));
        items.push(Item {
            key: format!("archive {}", a.name),
            action: (!(marker_ok && members_ok)).then(|| WinAction::InstallArchive {
                archive: Box::new(a.clone()),
            }),
        });
    }
    let cni: WinFile = l2::cni_file(node, &d.network, &l2.cni);
    let files: Vec<WinFile> = d
        .files
        .iter()
        .chain(&l2.files)
        .cloned()
        .chain([cni])
        .collect();
    file_items(&files, f, &mut items);
    if !installed {
        let why = "the Windows feature Containers is installed but waits for a restart: HNS and containerd work only after it (restart the host, e.g. Restart-Computer, then run `kwinctl up` again)".to_string();
        if items.iter().all(|i| i.action.is_none()) {
            return Err(Conflict::Reboot(why));
        }
        notes.push(format!("then {why}"));
        return Ok(WinDiff { items, notes });
    }
    let (runtime, kube): (Vec<_>, Vec<_>) = d
        .services
        .iter()
        .cloned()
        .partition(|s| s.name == "containerd");
    let kube = without_dsr_where_unsupported(kube, f, &mut notes);
    if let Some((_, _, b)) = parse_build(&f.build)
        && let Some(n) = k8s::build_note(
            d.kubernetes_version.minor,
            Profile::L2Bridge,
            b,
            Some(l2.containerd_version),
        )
    {
        notes.push(n);
    }
    service_items(&runtime, f, &mut items);
    let images: Vec<String> = f
        .sandbox_images
        .iter()
        .map(|i| normalise_image(i))
        .collect();
    items.push(Item {
        key: format!("sandbox image {}", d.pause_image),
        action: (!images.contains(&normalise_image(&d.pause_image))).then(|| {
            WinAction::PullSandbox {
                image: d.pause_image.clone(),
            }
        }),
    });

    let net = HnsNet::of(node, &d.network, &card);
    let ep = HostEp::of(node, &d.network);
    let found = f.hns_networks.iter().find(|n| is(&n.name, &net.name));
    let placeholder = f.hns_networks.iter().any(|n| is(&n.name, &net.placeholder));
    let net_ok = found.is_some_and(|n| {
        is(&n.kind, "L2Bridge")
            && subnet_is(n, &net.subnet.to_string(), &net.gateway.to_string())
            && n.adapter.as_deref().is_none_or(|a| is(a, &card))
    });
    // No external network on the card yet: the first one creates the
    // vSwitch, moving the address and dropping the routes there (docs/research/flannel.md#f1, docs/research/kubernetes.md#g1).
    let new_vswitch = !f.hns_networks.iter().any(|n| {
        (is(&n.kind, "L2Bridge") || is(&n.kind, "External"))
            && n.adapter.as_deref().is_none_or(|a| is(a, &card))
    });
    items.push(Item {
        key: format!("hns network {}", net.name),
        action: (!(net_ok && placeholder)).then(|| WinAction::EnsureHnsNetwork {
            net: net.clone(),
            replace: found.is_some() && !net_ok,
        }),
    });
    let ep_ok = net_ok
        && f.hns_endpoints.iter().any(|e| {
            is(&e.name, &ep.name)
                && e.ip.as_deref() == Some(ep.ip.to_string().as_str())
                && e.attached
                && found.is_some_and(|n| n.id.is_empty() || is(&e.network_id, &n.id))
        });
    items.push(Item {
        key: format!("host endpoint {} {}", ep.name, ep.ip),
        action: (!ep_ok).then(|| WinAction::EnsureHostEndpoint { ep: ep.clone() }),
    });
    let forwarding = [node.address, ep.ip];
    let fwd_ok = !new_vswitch
        && ep_ok
        && forwarding
            .iter()
            .all(|a| holder(f, *a).is_some_and(|x| x.forwarding));
    items.push(Item {
        key: "forwarding".into(),
        action: (!fwd_ok).then(|| WinAction::SetForwarding {
            addresses: forwarding.to_vec(),
        }),
    });
    let index = holder(f, node.address).map(|a| a.index).unwrap_or(0);
    route_items(node, f, index, new_vswitch, &mut items, &mut notes);

    let boot = boot_spec(node, d, &card);
    let boot_ok = boot.installed(f);
    items.push(Item {
        key: format!("boot task {BOOT_TASK}"),
        action: (!boot_ok).then_some(WinAction::InstallBootTask { boot }),
    });
    let before = items.len();
    service_items(&kube, f, &mut items);
    // kubelet's and kube-proxy's health endpoints (docs/research/l2bridge-profile.md#p7), for services
    // that run and are not being (re)installed or started now
    let touched: Vec<String> = items[before..]
        .iter()
        .filter_map(|i| match &i.action {
            Some(WinAction::InstallService { service, .. }) => Some(service.name.clone()),
            Some(WinAction::StartService { name }) => Some(name.clone()),
            _ => None,
        })
        .collect();
    for (name, port) in [
        ("kubelet", l2::KUBELET_HEALTHZ),
        ("kube-proxy", l2::KUBE_PROXY_HEALTHZ),
    ] {
        let Some(h) = f.health.iter().find(|h| h.port == port) else {
            continue;
        };
        let ok = h.ok || touched.iter().any(|t| t == name);
        items.push(Item {
            key: format!("healthy {name} :{port}"),
            action: (!ok).then(|| WinAction::RestartService {
                name: name.into(),
                port,
            }),
        });
    }
    Ok(WinDiff { items, notes })
}

/// What the boot task re-ensures and starts on an l2bridge node.
pub fn boot_spec(node: &Node, d: &WindowsDesired, card: &str) -> BootSpec {
    let ep = HostEp::of(node, &d.network);
    let l2 = L2Boot {
        network: HnsNet::of(node, &d.network, card),
        forwarding: vec![node.address, ep.ip],
        endpoint: ep,
        routes: node
            .routes()
            .into_iter()
            .map(|(dst, via)| BootRoute { dst, via })
            .collect(),
    };
    let services = d
        .services
        .iter()
        .filter(|s| s.hosting == Hosting::Service && s.start_mode == "Manual")
        .map(|s| s.name.clone())
        .collect();
    BootSpec::l2bridge(l2, node.address, services)
}

mod reset;
pub use reset::reset;

#[cfg(test)]
mod tests;
