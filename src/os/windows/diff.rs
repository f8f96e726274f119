//! Windows: desired × facts → actions, following the seeds step by step,
//! after the preflight checks; and `reset`, which undoes them.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::Ipv4Net;

use super::action::WinAction;
use super::desired::WindowsDesired;
use super::facts::{WinRoute, WindowsFacts};
use super::k8s::Hosting;
use super::preflight::{preflight, routable_adapter};
use super::{CLUSTER_FILE, HNS_ADAPTER, KUBE_PROXY_SWITCH, POD_CIDR_FILE};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff, Item};

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
    let index = preflight(node, d, f)?;
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
    let mut item = |key: String, action: Option<WinAction>| items.push(Item { key, action });

    let cluster = (node.cluster.name.clone(), node.cluster.id.clone());
    item(
        format!("pod-cidr {}", node.pod_cidr),
        (f.pod_cidr.is_none() || f.recorded_cluster().as_ref() != Some(&cluster)).then_some(
            WinAction::RecordPodCidr {
                pod_cidr: node.pod_cidr,
                cluster: cluster.0,
                cluster_id: cluster.1,
            },
        ),
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
    let mut have: BTreeMap<Ipv4Net, &WinRoute> = BTreeMap::new();
    for r in f.routes.iter().filter(|r| r.index == index) {
        have.entry(r.dst).or_insert(r);
    }
    for r in f.routes.iter().filter(|r| r.index == index) {
        if desired.contains_key(&r.dst) {
            continue;
        }
        if !node.cluster_cidr().contains(&r.dst) || r.dst == node.pod_cidr {
            continue;
        }
        if let Some(why) = node.frozen.route(&r.dst, r.via) {
            notes.push(format!("route {} left alone: {why}", r.dst));
        } else {
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
        if let Some(why) = node.frozen.route(dst, Some(*via)) {
            notes.push(format!("route {dst} left alone: {why}"));
            continue;
        }
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
        let name = |n: &str| n.eq_ignore_ascii_case(&s.name);
        let service = f.services.iter().find(|x| name(&x.name));
        let task = f.tasks.iter().find(|x| name(&x.name));
        match s.hosting {
            Hosting::Service => {
                if task.is_some() {
                    item(
                        format!("task {}", s.name),
                        Some(WinAction::RemoveTask {
                            name: s.name.clone(),
                        }),
                    );
                }
                let ok = service.is_some_and(|h| {
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
                        exists: service.is_some(),
                    }),
                );
            }
            Hosting::Task => {
                if service.is_some() {
                    item(
                        format!("service {}", s.name),
                        Some(WinAction::RemoveService {
                            name: s.name.clone(),
                        }),
                    );
                }
                let ok = task.is_some_and(|t| {
                    t.description == s.task_description()
                        && !t.state.eq_ignore_ascii_case("disabled")
                });
                if !ok {
                    changed_services.insert(s.name.clone());
                }
                item(
                    format!("task {}", s.name),
                    (!ok).then(|| WinAction::InstallTask {
                        service: s.clone(),
                        exists: task.is_some(),
                    }),
                );
            }
        }
    }
    for s in &d.services {
        // A service or task being (re)installed is (re)started by its own action.
        if changed_services.contains(&s.name) {
            continue;
        }
        let name = |n: &str| n.eq_ignore_ascii_case(&s.name);
        let action = match s.hosting {
            Hosting::Service => {
                let running = f
                    .services
                    .iter()
                    .any(|x| name(&x.name) && x.status.eq_ignore_ascii_case("running"));
                (!running).then(|| WinAction::StartService {
                    name: s.name.clone(),
                })
            }
            Hosting::Task => {
                let running = f.tasks.iter().any(|x| name(&x.name) && x.running);
                (!running).then(|| WinAction::StartTask {
                    name: s.name.clone(),
                })
            }
        };
        item(format!("running {}", s.name), action);
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
    let index = routable_adapter(node, d, f).map(|a| a.index);
    for r in &f.routes {
        if Some(r.index) == index && node.cluster_cidr().contains(&r.dst) && r.dst != node.pod_cidr
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
    use crate::os::windows::desired::{FileSource, WinFile, WinService};
    use crate::os::windows::facts::{Adapter, FileFact, Network, Service, Switch, VersionFact};
    use crate::os::windows::{HNS_ADAPTER, KUBE_PROXY_SWITCH, WIN_DIR};

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

    fn desired() -> WindowsDesired {
        WindowsDesired {
            network: "kwinctl".into(),
            adapter: None,
            kubernetes_version: KubeVersion::parse("1.13.12").unwrap(),
            pause_image: "apprenda/pause".into(),
            pause_image_given: false,
            files: vec![WinFile {
                path: format!(r"{WIN_DIR}\kubelet.exe"),
                sha256: "aa".into(),
                source: FileSource::Url("https://example.invalid/kubelet.exe".into()),
                version: Some("1.13.12".into()),
                version_regex: None,
            }],
            required_files: vec![
                format!(r"{WIN_DIR}\kubelet.exe"),
                format!(r"{WIN_DIR}\kube-proxy.exe"),
            ],
            services: vec![
                svc("kubelet", "docker", Hosting::Service),
                svc("kube-proxy", "kubelet", Hosting::Service),
            ],
            notes: vec![],
        }
    }

    fn converged() -> WindowsFacts {
        let d = desired();
        let mut f = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None, 14393);
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
        f.versions = ["kubelet", "kube-proxy"]
            .iter()
            .map(|b| VersionFact {
                path: format!(r"{WIN_DIR}\{b}.exe"),
                output: "Kubernetes v1.13.12".into(),
            })
            .collect();
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
        f.cluster = Some("t 0123456789abcdef".into());
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
        let mut f = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None, 14393);
        f.files.push(FileFact {
            path: format!(r"{WIN_DIR}\kube-proxy.exe"),
            sha256: "bb".into(),
        });
        f.versions.push(VersionFact {
            path: format!(r"{WIN_DIR}\kube-proxy.exe"),
            output: "Kubernetes v1.13.12".into(),
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
                r"remove C:\k\kwinctl\cluster.txt",
            ]
        );
        let fresh = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None, 14393);
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
        let e = diff_windows(&node(), &desired(), &f).unwrap_err();
        assert_eq!(e.check_name(), "preflight");
        let e = e.to_string();
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
        let e = diff_windows(&node(), &d, &f).unwrap_err().to_string();
        assert!(e.contains(r"C:\k\kubelet.exe is missing"), "{e}");
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
                "stop and delete service kubelet",
                "run kubelet as a boot-time scheduled task (start script; it has no --windows-service)",
                "stop and delete service kube-proxy",
                "run kube-proxy as a boot-time scheduled task (start script; it has no --windows-service)",
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
            })
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
                "reconfigure and restart kubelet as a boot-time scheduled task (start script; it has no --windows-service)"
            ]
        );
        // and back to 1.13 (binaries of 1.13): the tasks go, the services come
        for v in &mut f.versions {
            v.output = "Kubernetes v1.13.12".into();
        }
        let a = acts(&diff_windows(&node(), &desired(), &f));
        assert_eq!(
            a[0],
            "stop and delete scheduled task kubelet and its start script"
        );
        assert_eq!(a[1], "install service kubelet");
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
            e.contains(r"C:\k\kube-proxy.exe is Kubernetes 1.9.11 (its --version), but the inventory declares kubernetes_version 1.13.12"),
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
        // Windows Server 2019 cannot run 1.13
        let mut f = converged();
        f.build = "10.0.17763".into();
        let e = diff_windows(&node(), &desired(), &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Windows Server 2019 (build 17763) cannot run Kubernetes 1.13"),
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
