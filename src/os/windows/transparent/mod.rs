//! Windows: desired × facts → actions, following the seeds step by step,
//! after the preflight checks; and `reset`, which undoes them.

use std::collections::BTreeSet;

pub mod desired;
pub mod nic;
pub mod preflight;

use super::action::WinAction;
use super::boot::{BOOT_TASK, BootSpec};
use super::facts::{WindowsFacts, normalise_image};
use super::items::{WinDiff, common_items, file_items, route_items, service_items};
use super::k8s::Hosting;
use super::{CLUSTER_FILE, KUBE_PROXY_SWITCH, POD_CIDR_FILE, WindowsDesired};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff, Item};
use nic::Nics;
use preflight::{preflight, routable_adapter};

fn hosting_word(d: &WindowsDesired, name: &str) -> &'static str {
    match d
        .services
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.hosting)
    {
        Some(Hosting::Service) => "a native service",
        Some(Hosting::Task) => "a scheduled task",
        None => "not run",
    }
}

pub fn diff_windows(
    node: &Node,
    d: &WindowsDesired,
    f: &WindowsFacts,
) -> Result<WinDiff, Conflict> {
    let nics = preflight(node, d, f)?;
    let index = nics.routable;
    let mut items: Vec<Item<WinAction>> = Vec::new();
    let mut notes = vec![format!(
        "Windows {}, Docker {}, Kubernetes {} (kubelet {}, kube-proxy {})",
        f.build,
        f.docker_version,
        d.kubernetes_version,
        hosting_word(d, "kubelet"),
        hosting_word(d, "kube-proxy"),
    )];
    notes.extend(d.notes.iter().cloned());
    common_items(node, d, f, &mut items);
    let mut item = |key: String, action: Option<WinAction>| items.push(Item { key, action });
    let forwarding = f
        .adapters
        .iter()
        .find(|a| a.index == index)
        .is_some_and(|a| a.forwarding);
    // Installed but waiting for a restart: not installed again.
    let pending = f.routing_state.eq_ignore_ascii_case("InstallPending");
    if pending {
        notes.push(
            "reboot required: the Routing role is installed but waits for a restart (Get-WindowsFeature Routing: InstallPending)"
                .into(),
        );
    }
    item(
        "routing".into(),
        (!((f.routing_installed || pending) && forwarding)).then_some(WinAction::EnableRouting),
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
    // A network on another card, or on one HNS chose itself, is re-created
    // on the chosen one.
    let net_ok = net.is_some_and(|n| {
        n.driver == "transparent"
            && n.subnet == Some(node.pod_cidr)
            && n.gateway == Some(node.gateway)
            && n.interface
                .as_deref()
                .is_some_and(|i| i.eq_ignore_ascii_case(&nics.transparent))
    });
    item(
        format!("network {}", d.network),
        (!net_ok).then(|| WinAction::CreateNetwork {
            name: d.network.clone(),
            subnet: node.pod_cidr,
            gateway: node.gateway,
            interface: nics.transparent.clone(),
            replace: net.is_some(),
        }),
    );
    // Replies from pods arrive on the network's adapter: it forwards too
    // (Set-NetIPInterface: -Forwarding "determines if this IP interface
    // forwards packets that arrive on this interface to other interfaces").
    let gw_ok = net_ok
        && f.adapters.iter().any(|a| {
            a.name.eq_ignore_ascii_case(&nics.container)
                && a.ipv4.contains(&node.gateway)
                && a.forwarding
                && !a.dhcp
        });
    item(
        format!("gateway {} on {}", node.gateway, nics.container),
        (!gw_ok).then(|| WinAction::SetGatewayAddress {
            adapter: nics.container.clone(),
            gateway: node.gateway,
            prefix: node.pod_cidr.prefix_len(),
            node_address: node.address,
        }),
    );

    route_items(node, f, index, false, &mut items, &mut notes);
    let mut item = |key: String, action: Option<WinAction>| items.push(Item { key, action });
    let desired = node.routes();
    let images: BTreeSet<String> = f.images.iter().map(|i| normalise_image(i)).collect();
    item(
        format!("image {}", d.pause_image),
        (!images.contains(&normalise_image(&d.pause_image))).then(|| WinAction::PullImage {
            image: d.pause_image.clone(),
        }),
    );
    file_items(&d.files, f, &mut items);
    let mut item = |key: String, action: Option<WinAction>| items.push(Item { key, action });
    let boot = boot_spec(node, d, &nics);
    let boot_ok = boot.installed(f);
    item(
        format!("boot task {BOOT_TASK}"),
        (!boot_ok).then_some(WinAction::InstallBootTask { boot }),
    );
    service_items(&d.services, f, &mut items);
    if f.routes
        .iter()
        .any(|r| r.index == index && !r.persistent && desired.contains_key(&r.dst))
    {
        notes.push(
            "some routes were not persistent: they are re-added (New-NetRoute writes the persistent store too)"
                .into(),
        );
    }
    if f.routes
        .iter()
        .any(|r| r.index == index && !r.active && node.cluster_cidr().contains(&r.dst))
    {
        notes.push(
            "some routes are only in the persistent store (they would come back at the next reboot): replaced or removed in both stores"
                .into(),
        );
    }
    Ok(Diff { items, notes })
}

/// What the boot task restores and starts on this node.
pub fn boot_spec(node: &Node, d: &WindowsDesired, nics: &Nics) -> BootSpec {
    let named = |h: Hosting| {
        d.services
            .iter()
            .filter(|s| s.hosting == h)
            .map(|s| s.name.clone())
            .collect()
    };
    BootSpec::new(
        &d.network,
        node.pod_cidr,
        node.gateway,
        &nics.transparent,
        &nics.container,
        node.address,
        d.adapter.as_deref(),
        named(Hosting::Service),
        named(Hosting::Task),
    )
}

/// `reset`: undo what `up` created, in reverse order. The Routing role and
/// the pause image stay (other software may use them); so do routes outside
/// the cluster CIDR.
pub fn diff_reset_windows(node: &Node, d: &WindowsDesired, f: &WindowsFacts) -> WinDiff {
    let mut items: Vec<Item<WinAction>> = Vec::new();
    for s in d.services.iter().rev() {
        let name = |n: &str| n.eq_ignore_ascii_case(&s.name);
        let present = f.services.iter().any(|x| name(&x.name));
        items.push(Item {
            key: format!("service {}", s.name),
            action: present.then(|| WinAction::RemoveService {
                name: s.name.clone(),
            }),
        });
        if f.tasks.iter().any(|x| name(&x.name)) {
            items.push(Item {
                key: format!("task {}", s.name),
                action: Some(WinAction::RemoveTask {
                    name: s.name.clone(),
                }),
            });
        }
    }
    if f.tasks
        .iter()
        .any(|t| t.name.eq_ignore_ascii_case(BOOT_TASK))
    {
        items.push(Item {
            key: format!("boot task {BOOT_TASK}"),
            action: Some(WinAction::RemoveTask {
                name: BOOT_TASK.into(),
            }),
        });
    }
    let index = routable_adapter(node, d, f).map(|a| a.index);
    let mut seen = BTreeSet::new();
    for r in &f.routes {
        if Some(r.index) == index
            && node.cluster_cidr().contains(&r.dst)
            && r.dst != node.pod_cidr
            && seen.insert(r.dst)
        {
            items.push(Item {
                key: format!("route {}", r.dst),
                action: Some(WinAction::DelRoute {
                    dst: r.dst,
                    via: r.via,
                }),
            });
        }
    }
    items.push(Item {
        key: "firewall".into(),
        action: (!f.firewall.is_empty()).then_some(WinAction::RemoveFirewall),
    });
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
            path: POD_CIDR_FILE.into(),
        }),
    });
    items.push(Item {
        key: "cluster record".into(),
        action: f.cluster.is_some().then(|| WinAction::RemoveFile {
            path: CLUSTER_FILE.into(),
        }),
    });
    items.extend(super::join::reset_items(f));
    items.extend(super::leftovers::reset_items(f));
    Diff {
        items,
        notes: vec!["the Routing role and the pause image are left in place".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Describe;
    use crate::inventory::KubeVersion;
    use crate::inventory::Os;
    use crate::os::windows::WIN_DIR;
    use crate::os::windows::facts::WinRoute;
    use crate::os::windows::facts::{FileFact, VersionFact};
    use crate::os::windows::service::WinService;

    const HNS_ADAPTER: &str = "vEthernet (HNSTransparent)";

    fn node() -> Node {
        crate::alloc::test_node(
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

    fn svc(n: &str, dep: &str, hosting: Hosting) -> WinService {
        WinService::new(
            n,
            n,
            format!(r"{WIN_DIR}\{n}.exe"),
            &["--windows-service".into()],
            vec!["CONTAINER_NETWORK=kwinctl".into()],
            vec![dep.into()],
            hosting,
        )
    }

    /// win01 of tests/fixtures/windows/transparent.yaml.
    fn desired() -> WindowsDesired {
        crate::os::windows::fixtures::desired("transparent", "", "win01")
    }

    /// What `up` leaves on win01 (tests/fixtures/windows/transparent-converged.json).
    fn converged() -> WindowsFacts {
        crate::os::windows::fixtures::transparent_converged()
    }

    fn boot_task(d: &WindowsDesired) -> crate::os::windows::facts::TaskFact {
        let nics = Nics {
            routable: 4,
            transparent: "Ethernet 2".into(),
            container: HNS_ADAPTER.into(),
        };
        crate::os::windows::facts::TaskFact {
            name: BOOT_TASK.into(),
            state: "Ready".into(),
            description: boot_spec(&node(), d, &nics).description(),
            running: false,
            at_startup: true,
        }
    }

    const FIREWALL: &str = "allow ICMPv4 echo, kubelet, kube-proxy from the cluster in Windows Firewall (rules kwinctl-icmp4-echo, kwinctl-kubelet, kwinctl-kube-proxy)";

    fn acts(r: &Result<WinDiff, Conflict>) -> Vec<String> {
        r.as_ref()
            .unwrap()
            .actions()
            .map(|a| a.describe())
            .collect()
    }

    #[test]
    fn fresh_node_gets_every_seed_step() {
        let mut f = crate::os::windows::fixtures::fresh_2016();
        f.files.push(FileFact {
            path: format!(r"{WIN_DIR}\kube-proxy.exe"),
            sha256: "bb".into(),
        });
        f.versions.push(VersionFact {
            path: format!(r"{WIN_DIR}\kube-proxy.exe"),
            output: "Kubernetes v1.10.13".into(),
        });
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert_eq!(
            a,
            [
                FIREWALL,
                r"record pod CIDR 192.168.1.0/24 in C:\k\kwinctl\pod-cidr.txt",
                "enable routing (Routing role, forwarding on the routable adapter)",
                "create internal Hyper-V switch KubeProxySwitch",
                "create transparent docker network kwinctl on 192.168.1.0/24 (gateway 192.168.1.1) on network card Ethernet 2",
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24 (DHCP off, forwarding on)",
                "add persistent route 192.168.0.0/24 via 10.0.0.10",
                "add persistent route 192.168.2.0/24 via 10.0.0.12",
                "pull image apprenda/pause",
                r"download C:\k\kubelet.exe from https://example.invalid/kubelet.exe",
                r"upload C:\k\config (263 bytes)",
                "install the startup task kwinctl-boot (puts the pods' network, gateway and forwarding back, then starts kubelet and kube-proxy)",
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
                "create transparent docker network kwinctl on 192.168.1.0/24 (gateway 192.168.1.1) on network card Ethernet 2",
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24 (DHCP off, forwarding on)",
                "start service kube-proxy",
            ]
        );
    }

    #[test]
    fn a_network_on_no_named_card_is_recreated_and_the_gateway_needs_forwarding() {
        // made by kwinctl before it named the card: HNS chose one itself
        let mut f = converged();
        f.networks[0].interface = None;
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            [
                "re-create transparent docker network kwinctl on 192.168.1.0/24 (gateway 192.168.1.1) on network card Ethernet 2",
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24 (DHCP off, forwarding on)",
            ]
        );
        // the network's adapter does not forward (pods' replies are dropped)
        let mut f = converged();
        let hns = f.adapters.iter_mut().find(|a| a.name == HNS_ADAPTER);
        hns.unwrap().forwarding = false;
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            [
                "give vEthernet (HNSTransparent) the gateway address 192.168.1.1/24 (DHCP off, forwarding on)"
            ]
        );
    }

    #[test]
    fn wrong_subnet_recreates_and_changed_flag_reconfigures() {
        let mut f = converged();
        f.networks[0].subnet = Some("192.168.9.0/24".parse().unwrap());
        f.services[0].binpath.push_str(" --v=9");
        f.services[1].start = "Automatic".into();
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert!(
            a[0].starts_with("re-create transparent docker network"),
            "{a:?}"
        );
        assert!(
            a.contains(&"reconfigure and restart service kubelet".to_string()),
            "{a:?}"
        );
        // started at boot by SCM is too early (before the boot task)
        assert!(
            a.contains(&"reconfigure and restart service kube-proxy".to_string()),
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
            active: true,
        });
        f.routes.push(WinRoute {
            dst: "10.50.0.0/16".parse().unwrap(),
            via: Some("10.0.0.1".parse().unwrap()),
            index: 4,
            persistent: true,
            active: true,
        });
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            ["remove route 192.168.7.0/24 via 10.0.0.77"]
        );
    }

    #[test]
    fn a_routing_role_waiting_for_a_restart_is_not_installed_again() {
        let mut f = converged();
        f.routing_installed = false;
        f.routing_state = "InstallPending".into();
        let d = diff_windows(&node(), &desired(), &f).unwrap();
        assert_eq!(d.changes(), 0);
        assert!(
            d.notes.iter().any(|n| n.starts_with("reboot required")),
            "{:?}",
            d.notes
        );
        // forwarding still comes from Set-NetIPInterface
        f.adapters[0].forwarding = false;
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            ["enable routing (Routing role, forwarding on the routable adapter)"]
        );
    }

    #[test]
    fn persistent_only_routes_are_replaced_or_removed_in_both_stores() {
        // a copy with an old next hop only in the persistent store: it
        // would come back at the next reboot beside the right route
        let mut f = converged();
        f.routes.push(WinRoute {
            dst: "192.168.0.0/24".parse().unwrap(),
            via: Some("10.0.0.99".parse().unwrap()),
            index: 4,
            persistent: true,
            active: false,
        });
        // and one to a block no node has any more
        f.routes.push(WinRoute {
            dst: "192.168.7.0/24".parse().unwrap(),
            via: Some("10.0.0.77".parse().unwrap()),
            index: 4,
            persistent: true,
            active: false,
        });
        let d = diff_windows(&node(), &desired(), &f).unwrap();
        assert_eq!(
            d.actions().map(|a| a.describe()).collect::<Vec<_>>(),
            [
                "remove route 192.168.7.0/24 via 10.0.0.77",
                "replace persistent route 192.168.0.0/24 via 10.0.0.10",
            ]
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.contains("only in the persistent store")),
            "{:?}",
            d.notes
        );
        // a route that routes but would not survive a reboot
        let mut f = converged();
        f.routes[1].persistent = false;
        assert_eq!(
            acts(&diff_windows(&node(), &desired(), &f)),
            ["replace persistent route 192.168.2.0/24 via 10.0.0.12"]
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
                "stop and delete scheduled task kwinctl-boot and its start script",
                "remove route 192.168.0.0/24 via 10.0.0.10",
                "remove route 192.168.2.0/24 via 10.0.0.12",
                "remove kwinctl's Windows Firewall rules (kwinctl-*)",
                "remove docker network kwinctl",
                "remove Hyper-V switch KubeProxySwitch",
                r"remove C:\k\kubelet.exe",
                r"remove C:\k\config",
                r"remove C:\k\kwinctl\pod-cidr.txt",
                r"remove C:\k\kwinctl\cluster.txt",
            ]
        );
        let fresh = crate::os::windows::fixtures::fresh_2016();
        assert_eq!(diff_reset_windows(&node(), &desired(), &fresh).changes(), 0);
    }

    #[test]
    fn preflight_names_every_problem_and_changes_nothing() {
        let mut f = converged();
        f.build = "6.3.9600".into();
        f.hyperv_module = false;
        f.hyperv_role = "Available".into();
        f.docker_version = String::new();
        f.adapters.truncate(1);
        f.adapters[0].ipv4 = vec!["10.9.9.9".parse().unwrap()];
        let e = diff_windows(&node(), &desired(), &f).unwrap_err();
        assert_eq!(e.check_name(), "preflight");
        let e = e.to_string();
        for want in [
            "older than 10.0.14393",
            "Hyper-V PowerShell module",
            "the Hyper-V role is Available, not installed",
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
        let e = diff_windows(&node(), &d, &f).unwrap_err().to_string();
        assert!(e.contains(r"C:\k\kubelet.exe is missing"), "{e}");
        let mut f = converged();
        f.hyperv_role = "InstallPending".into();
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("reboot required: the Hyper-V role"), "{e}");
    }

    #[test]
    fn a_release_change_moves_the_binaries_between_service_and_task() {
        // 1.9 has no --windows-service: the services become scheduled tasks
        let mut d = desired();
        d.kubernetes_version = KubeVersion::parse("1.9.11").unwrap();
        d.services = vec![
            svc("kubelet", "docker", Hosting::Task),
            svc("kube-proxy", "kubelet", Hosting::Task),
        ];
        let mut f = converged();
        for v in &mut f.versions {
            v.output = "Kubernetes v1.9.11".into();
        }
        let a = acts(&diff_windows(&node(), &d, &f));
        assert_eq!(
            a,
            [
                "install the startup task kwinctl-boot (puts the pods' network, gateway and forwarding back, then starts kubelet and kube-proxy)",
                "stop and delete service kubelet",
                "run kubelet as a scheduled task (start script; it has no --windows-service)",
                "stop and delete service kube-proxy",
                "run kube-proxy as a scheduled task (start script; it has no --windows-service)",
            ]
        );
        // once they are tasks: nothing to do, unless a binary stopped
        f.services.clear();
        f.tasks = d
            .services
            .iter()
            .map(|s| crate::os::windows::facts::TaskFact {
                name: s.name.clone(),
                state: "Running".into(),
                description: s.task_description(),
                running: true,
                at_startup: false,
            })
            .chain([boot_task(&d)])
            .collect();
        assert_eq!(acts(&diff_windows(&node(), &d, &f)), Vec::<String>::new());
        f.tasks[0].running = false;
        assert_eq!(
            acts(&diff_windows(&node(), &d, &f)),
            ["start scheduled task kubelet"]
        );
        // another command line: the task is re-registered
        f.tasks[0].description = "Kubernetes kubelet (kwinctl) [kwinctl 0000]".into();
        assert_eq!(
            acts(&diff_windows(&node(), &d, &f)),
            [
                "reconfigure and restart kubelet as a scheduled task (start script; it has no --windows-service)"
            ]
        );
        // and back to 1.10 (binaries of 1.10): the tasks go, the services come
        for v in &mut f.versions {
            v.output = "Kubernetes v1.10.13".into();
        }
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert!(a[0].starts_with("install the startup task"), "{a:?}");
        assert_eq!(
            a[1],
            "stop and delete scheduled task kubelet and its start script"
        );
        assert_eq!(a[2], "install service kubelet");
        // reset removes tasks as well as services
        let r: Vec<String> = diff_reset_windows(&node(), &d, &f)
            .actions()
            .map(|a| a.describe())
            .collect();
        assert!(
            r.contains(
                &"stop and delete scheduled task kube-proxy and its start script".to_string()
            ),
            "{r:?}"
        );
    }

    #[test]
    fn preflight_checks_the_release_against_binaries_build_and_pause_image() {
        // a kube-proxy.exe of another release, which kwinctl does not replace
        let mut f = converged();
        f.versions[1].output = "Kubernetes v1.9.11".into();
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(r"C:\k\kube-proxy.exe is Kubernetes 1.9.11 (its --version), but the inventory declares kubernetes_version 1.10.13"),
            "{e}"
        );
        // a kubelet.exe kwinctl is about to replace is not held against it
        let mut f = converged();
        f.files[0].sha256 = "old".into();
        f.versions[0].output = "Kubernetes v1.9.11".into();
        assert!(diff_windows(&node(), &desired(), &f).is_ok());
        // something that does not say its release
        let mut f = converged();
        f.versions[1].output = "garbage \u{1b}[31m".into();
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kwinctl cannot tell its release"), "{e}");
        // Windows Server 2019 cannot run 1.10
        let mut f = converged();
        f.build = "10.0.17763".into();
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Windows Server 2019 (build 17763) cannot run Kubernetes 1.10"),
            "{e}"
        );
        // the pause image present on the host is of another build
        let mut f = converged();
        f.image_os = vec![crate::os::windows::facts::ImageOs {
            image: "apprenda/pause".into(),
            os_version: "10.0.17763.1".into(),
        }];
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("built for Windows 10.0.17763.1 but the host is build 14393")
                && e.contains("use a pause image built for Windows build 14393"),
            "{e}"
        );
        // a known image without this build, named in the inventory
        let mut d = desired();
        d.pause_image = "mcr.microsoft.com/k8s/core/pause:1.2.0".into();
        d.pause_image_given = true;
        let e = diff_windows(&node(), &d, &converged())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has images for Windows builds [17134, 17763] only"),
            "{e}"
        );
        assert!(e.contains("use apprenda/pause"), "{e}");
    }
}
