//! The l2bridge diff against hand-written facts: a fresh host, the restart
//! the Containers feature needs, a converged host, what a reboot loses, and
//! reset.

use super::*;
use crate::diff::Describe;
use crate::inventory::Os;
use crate::os::windows::facts::{FileFact, VersionFact, WinRoute};

/// The profile's diff with the desired state's own l2bridge part.
fn diff(node: &Node, d: &WindowsDesired, f: &WindowsFacts) -> Result<WinDiff, Conflict> {
    super::diff(node, d, d.profile.l2().expect("l2bridge desired state"), f)
}

fn desired() -> WindowsDesired {
    desired_with("")
}

/// The desired state of win01 in tests/fixtures/windows/l2bridge.yaml,
/// with `extra` (lines of `cluster:`) added.
fn desired_with(extra: &str) -> WindowsDesired {
    crate::os::windows::fixtures::desired("l2bridge", extra, "win01")
}

fn node() -> Node {
    crate::alloc::test_node(
        "win01",
        Os::Windows,
        "10.0.0.11",
        "10.244.1.0/24",
        "10.244.0.0/16",
        &[("lin01", "10.0.0.10", "10.244.0.0/24")],
    )
}

/// A fresh Windows Server 2019 (tests/fixtures/windows/fresh.json) on
/// which kubelet.exe, kube-proxy.exe and kube-log-runner.exe (it has no
/// --version) are already.
fn fresh(d: &WindowsDesired) -> WindowsFacts {
    let mut f = crate::os::windows::fixtures::fresh();
    for b in ["kubelet", "kube-proxy", "kube-log-runner"] {
        f.files.push(FileFact {
            path: format!(r"C:\k\{b}.exe"),
            sha256: "00".repeat(32),
        });
    }
    for b in ["kubelet", "kube-proxy"] {
        f.versions.push(VersionFact {
            path: format!(r"C:\k\{b}.exe"),
            output: "Kubernetes v1.30.4".into(),
        });
    }
    assert_eq!(d.profile.kind(), Profile::L2Bridge);
    f
}

fn kinds(r: &Result<WinDiff, Conflict>) -> Vec<String> {
    r.as_ref()
        .unwrap()
        .items
        .iter()
        .filter_map(|i| i.action.as_ref())
        .map(crate::render::kind_of)
        .collect()
}

/// What the host looks like once everything was done
/// (tests/fixtures/windows/l2bridge-converged.json).
fn converged(d: &WindowsDesired) -> WindowsFacts {
    assert_eq!(d.profile.kind(), Profile::L2Bridge);
    crate::os::windows::fixtures::l2bridge_converged()
}

#[test]
fn a_fresh_host_gets_what_works_before_the_restart_and_is_told_to_restart() {
    let d = desired();
    let r = diff(&node(), &d, &fresh(&d));
    assert_eq!(
        kinds(&r),
        [
            "set_firewall",
            "record_pod_cidr",
            "install_feature",
            "set_dynamic_ports",
            "install_archive",
            "install_archive",
            "place_file",
            "place_file",
            "place_file",
            "place_file",
        ]
    );
    let notes = r.unwrap().notes.join("\n");
    assert!(notes.contains("waits for a restart"), "{notes}");
    // once those are done and the feature waits for the restart: refused
    // with what to do (up reports the host as failed until it restarted)
    let mut f = converged(&d);
    f.containers_feature = "InstallPending".into();
    let e = diff(&node(), &d, &f).unwrap_err();
    assert!(matches!(e, Conflict::Reboot(_)), "{e}");
    assert!(e.to_string().contains("Restart-Computer"), "{e}");
}

/// docs/research/windows-dynamic-ports.md#dyn3: widened unless the range
/// covers 34000-65535 already or could not be read.
#[test]
fn the_tcp_dynamic_port_range_is_widened_unless_it_covers_kwinctls() {
    let d = desired();
    let mut f = converged(&d);
    let widen = || vec!["set_dynamic_ports".to_string()];
    for (start, count, acts) in [
        (49152, 16384, widen()),
        (34001, 31535, widen()),
        (34000, 31535, widen()),
        (34000, 31536, vec![]),
        (10000, 55536, vec![]),
        (u32::MAX, u32::MAX, widen()),
        (0, u32::MAX, vec![]),
    ] {
        f.tcp_dynamic_ports = Some(PortRange { start, count });
        assert_eq!(kinds(&diff(&node(), &d, &f)), acts, "{start} {count}");
    }
    f.tcp_dynamic_ports = None;
    assert_eq!(kinds(&diff(&node(), &d, &f)), Vec::<String>::new());
}

#[test]
fn after_the_restart_the_rest_follows_in_order_and_a_converged_host_has_nothing_to_do() {
    let d = desired();
    let mut f = fresh(&d);
    f.containers_feature = "Installed".into();
    let r = diff(&node(), &d, &f);
    let k = kinds(&r);
    let pos = |kind: &str| {
        k.iter()
            .position(|x| x == kind)
            .unwrap_or_else(|| panic!("{kind} in {k:?}"))
    };
    assert!(pos("install_archive") < pos("install_service"));
    assert!(pos("pull_sandbox") < pos("ensure_hns_network"));
    assert!(pos("ensure_hns_network") < pos("ensure_host_endpoint"));
    assert!(pos("ensure_host_endpoint") < pos("set_forwarding"));
    assert!(pos("set_forwarding") < pos("add_route"));
    assert!(pos("add_route") < pos("install_boot_task"));
    // containerd first (it starts automatically), kubelet and kube-proxy last
    let d2 = r.unwrap();
    let services: Vec<String> = d2
        .items
        .iter()
        .filter_map(|i| match &i.action {
            Some(WinAction::InstallService { service, .. }) => Some(service.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(services, ["containerd", "kubelet", "kube-proxy"]);
    match d2.items.iter().find_map(|i| match &i.action {
        Some(WinAction::EnsureHnsNetwork { net, replace }) => Some((net.clone(), *replace)),
        _ => None,
    }) {
        Some((net, replace)) => {
            assert!(!replace);
            assert_eq!(net.gateway.to_string(), "10.244.1.1");
            assert_eq!(net.adapter, "Ethernet");
        }
        None => panic!("no network"),
    }
    assert_eq!(
        kinds(&diff(&node(), &d, &converged(&d))),
        Vec::<String>::new()
    );
}

#[test]
fn a_reboot_loses_the_host_endpoint_and_the_diff_puts_it_back() {
    let d = desired();
    let mut f = converged(&d);
    // endpoints do not survive a reboot (docs/research/kubernetes.md#g1): the object and its vNIC go
    f.hns_endpoints.clear();
    f.adapters.retain(|a| a.name != "vEthernet (cbr0_ep)");
    for s in f.services.iter_mut().filter(|s| s.name != "containerd") {
        s.status = "Stopped".into();
    }
    let k = kinds(&diff(&node(), &d, &f));
    assert_eq!(
        k,
        [
            "ensure_host_endpoint",
            "set_forwarding",
            "start_service",
            "start_service"
        ]
    );
}

#[test]
fn a_network_with_another_subnet_is_re_created_and_routes_follow_the_vswitch() {
    let d = desired();
    let mut f = converged(&d);
    f.hns_networks[1].subnets[0].prefix = "10.244.9.0/24".into();
    let r = diff(&node(), &d, &f).unwrap();
    let acts: Vec<String> = r
        .items
        .iter()
        .filter_map(|i| i.action.as_ref())
        .map(|a| a.describe())
        .collect();
    assert!(
        acts.iter()
            .any(|a| a.starts_with("re-create HNS L2Bridge network cbr0")),
        "{acts:?}"
    );
    // no vSwitch yet: creating the first network moves the address, so every
    // route is added again on the new vNIC
    let mut f = fresh(&d);
    f.containers_feature = "Installed".into();
    f.routes = vec![WinRoute {
        dst: "10.244.0.0/24".parse().unwrap(),
        via: Some("10.0.0.10".parse().unwrap()),
        index: 4,
        persistent: true,
        active: true,
    }];
    let r = diff(&node(), &d, &f).unwrap();
    assert!(
        r.items
            .iter()
            .any(|i| matches!(i.action, Some(WinAction::AddRoute { replace: true, .. })))
    );
}

#[test]
fn preflight_refuses_an_old_build_a_cni_config_sorting_first_and_a_missing_card() {
    let d = desired();
    let mut f = fresh(&d);
    f.build = "10.0.14393".into();
    f.cni_conf_files = vec!["05-flannel.conflist".into(), "10-kwinctl.conf".into()];
    f.adapters.clear();
    let e = diff(&node(), &d, &f).unwrap_err().to_string();
    assert!(e.contains("older than 10.0.17763"), "{e}");
    assert!(e.contains("05-flannel.conflist sorts before"), "{e}");
    assert!(e.contains("no adapter holds the node's address"), "{e}");
    let mut f = converged(&d);
    f.build = "10.0.20348".into();
    assert!(diff(&node(), &d, &f).is_ok());
    // the transparent profile's switch and network: reset with it first
    f.switches.push(crate::os::windows::facts::Switch {
        name: "KubeProxySwitch".into(),
        kind: "Internal".into(),
    });
    let e = diff(&node(), &d, &f).unwrap_err().to_string();
    assert!(
        e.contains("the Hyper-V switch KubeProxySwitch of the transparent profile is still here")
            && e.contains("kwinctl reset --limit win01"),
        "{e}"
    );
}

#[test]
fn reset_removes_services_network_and_files_and_leaves_the_vswitch() {
    let d = desired();
    let r = reset(&node(), &d, &converged(&d));
    let k: Vec<String> = r
        .items
        .iter()
        .filter_map(|i| i.action.as_ref())
        .map(crate::render::kind_of)
        .collect();
    assert_eq!(
        &k[..4],
        [
            "remove_service",
            "remove_service",
            "remove_service",
            "remove_task"
        ]
    );
    assert!(k.contains(&"remove_hns_network".to_string()));
    assert!(k.contains(&"del_route".to_string()));
    assert!(!k.contains(&"remove_network".to_string()));
    assert!(r.notes[0].contains("External"));
    // and on a reset host, nothing
    let mut empty = fresh(&d);
    empty.files.clear();
    assert!(
        reset(&node(), &d, &empty)
            .items
            .iter()
            .all(|i| i.action.is_none())
    );
}

#[test]
fn the_probe_runs_version_only_of_kubelet_kube_proxy_and_containerd() {
    let d = desired();
    let r = crate::os::renderer();
    let ops = crate::os::windows::WindowsOps::new(&r, &d);
    assert_eq!(
        ops.binaries,
        [
            r"C:\k\kubelet.exe",
            r"C:\k\kube-proxy.exe",
            r"C:\Program Files\containerd\containerd.exe"
        ]
    );
    // the shim, ctr and the CNI plugins are only checked for presence
    assert!(ops.files.iter().any(|f| f.ends_with("win-bridge.exe")));
}

/// The health facts: kubelet's (10248) and kube-proxy's (10256) answers.
fn health(kubelet: bool, kube_proxy: bool) -> Vec<crate::os::windows::facts::Health> {
    [(10248, kubelet), (10256, kube_proxy)]
        .into_iter()
        .map(|(port, ok)| crate::os::windows::facts::Health { port, ok })
        .collect()
}

#[test]
fn a_running_service_whose_health_endpoint_fails_is_restarted() {
    let d = desired();
    let mut f = converged(&d);
    f.health = health(true, false);
    let r = diff(&node(), &d, &f).unwrap();
    let acts: Vec<&WinAction> = r.items.iter().filter_map(|i| i.action.as_ref()).collect();
    assert_eq!(
        acts,
        [&WinAction::RestartService {
            name: "kube-proxy".into(),
            port: 10256
        }]
    );
    // one that is being started now is not restarted as well
    for s in f.services.iter_mut().filter(|s| s.name == "kube-proxy") {
        s.status = "Stopped".into();
    }
    assert_eq!(kinds(&diff(&node(), &d, &f)), ["start_service"]);
    // both healthy: nothing
    f = converged(&d);
    f.health = health(true, true);
    assert_eq!(kinds(&diff(&node(), &d, &f)), Vec::<String>::new());
}

mod logs;

/// kube-proxy's command line in a diff's install_service action.
fn proxy_binpath(r: &WinDiff) -> Option<String> {
    r.items.iter().find_map(|i| match &i.action {
        Some(WinAction::InstallService { service, .. }) if service.name == "kube-proxy" => {
            Some(service.binpath.clone())
        }
        _ => None,
    })
}

/// Windows Server 2019 before KB4580390 (17763.1554) has no DSR: kube-proxy
/// runs without --enable-dsr and the WinDSR gate, with a note; from that
/// revision on (or when the revision is unknown, or on 2022) DSR is on; a
/// host updated later gets kube-proxy reinstalled with DSR.
#[test]
fn dsr_only_where_windows_does_it() {
    let d = desired();
    let mut f = converged(&d);
    assert!(kinds(&diff(&node(), &d, &f)).is_empty());
    f.ubr = Some(1553);
    let r = diff(&node(), &d, &f).unwrap();
    let bp = proxy_binpath(&r).expect("kube-proxy reinstalled without DSR");
    assert!(
        !bp.contains("--enable-dsr") && !bp.contains("WinDSR"),
        "{bp}"
    );
    assert!(bp.contains("--proxy-mode=kernelspace"), "{bp}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("10.0.17763.1553 predates KB4580390")),
        "{:?}",
        r.notes
    );
    // kubelet and containerd are left alone
    assert_eq!(kinds(&Ok(r.clone())), ["install_service"], "{r:?}");
    for ubr in [Some(1554), Some(6054), None] {
        f.ubr = ubr;
        assert!(kinds(&diff(&node(), &d, &f)).is_empty(), "{ubr:?}");
    }
    // Windows Server 2022 always has it
    f.build = "10.0.20348".into();
    f.ubr = Some(1);
    assert!(dsr_supported(&f));
    // a fresh 2019 host without the update: DSR left out from the start
    let mut f = fresh(&d);
    f.containers_feature = "Installed".into();
    f.ubr = Some(107);
    let bp = proxy_binpath(&diff(&node(), &d, &f).unwrap()).unwrap();
    assert!(!bp.contains("--enable-dsr"), "{bp}");
}

/// A boot task that lost its startup trigger (an administrator's edit, a
/// GPO) is registered and enabled but never runs again: it is installed
/// afresh; a disabled one too.
#[test]
fn a_boot_task_without_its_startup_trigger_is_installed_again() {
    let d = desired();
    let mut f = converged(&d);
    assert_eq!(kinds(&diff(&node(), &d, &f)), Vec::<String>::new());
    let boot = f
        .tasks
        .iter_mut()
        .find(|t| t.name == crate::os::windows::boot::BOOT_TASK)
        .expect("the converged host has the boot task");
    boot.at_startup = false;
    assert_eq!(kinds(&diff(&node(), &d, &f)), ["install_boot_task"]);
    let boot = &mut f.tasks[0];
    boot.at_startup = true;
    boot.state = "Disabled".into();
    assert_eq!(kinds(&diff(&node(), &d, &f)), ["install_boot_task"]);
}

/// Windows Server 2025 with a release Kubernetes' docs list it for only from
/// 1.35: not refused (nothing in the kubelet or containerd checks the
/// build), the plan notes it; a pause image of 2022 on it passes with
/// containerd 1.7.20 (containerd/platforms' table), not with 1.7.13.
#[test]
fn windows_server_2025_before_1_35_is_noted_not_refused() {
    let d = desired();
    let mut f = converged(&d);
    f.build = "10.0.26100".into();
    let r = diff(&node(), &d, &f).unwrap();
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("Windows Server 2025 (build 26100) with Kubernetes 1.30")),
        "{:?}",
        r.notes
    );
    f.image_os = vec![crate::os::windows::facts::ImageOs {
        image: d.pause_image.clone(),
        os_version: "10.0.20348.2762".into(),
    }];
    assert!(diff(&node(), &d, &f).is_ok());
    let mut old = d.clone();
    if let crate::os::windows::ProfileDesired::L2Bridge(l2) = &mut old.profile {
        l2.containerd_version = crate::inventory::ContainerdVersion::parse("1.7.13").unwrap();
    }
    let e = diff(&node(), &old, &f).unwrap_err().to_string();
    assert!(e.contains("is built for Windows 10.0.20348.2762"), "{e}");
}
