//! Desired items both Windows profiles share: kwinctl's firewall rules and
//! the pod CIDR record, routes to the other nodes, placed files, and the
//! services (installed, then running).

use std::collections::{BTreeMap, BTreeSet};

use ipnet::Ipv4Net;

use super::action::WinAction;
use super::facts::{WinRoute, WindowsFacts};
use super::firewall;
use super::k8s::Hosting;
use super::{WinService, WindowsDesired};
use crate::alloc::Node;
use crate::diff::{Diff, Item};

/// A Windows node's diff.
pub type WinDiff = Diff<WinAction>;

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_ascii_lowercase()).collect()
}

type Items = Vec<Item<WinAction>>;

fn push(items: &mut Items, key: String, action: Option<WinAction>) {
    items.push(Item { key, action });
}

/// Both profiles: kwinctl's firewall rules, then the node's pod CIDR record.
pub(crate) fn common_items(node: &Node, d: &WindowsDesired, f: &WindowsFacts, items: &mut Items) {
    let mut item = |key: String, action: Option<WinAction>| push(items, key, action);
    // First: other nodes ping this one when they verify, maybe while this
    // script still runs.
    let exes: Vec<(&str, String)> = d
        .services
        .iter()
        .filter(|s| s.name != "containerd")
        .map(|s| (s.name.as_str(), s.exe.clone()))
        .collect();
    let rules = firewall::rules(node, &exes, &d.nodeport_sources, &d.api_server_sources);
    let have: BTreeSet<(String, String)> = f
        .firewall
        .iter()
        .filter(|r| r.enabled)
        .map(|r| (r.name.to_ascii_lowercase(), r.description.clone()))
        .collect();
    let want: BTreeSet<(String, String)> = rules
        .iter()
        .map(|r| (r.name.to_ascii_lowercase(), r.description.clone()))
        .collect();
    item(
        "firewall".into(),
        (have != want || f.firewall.len() != rules.len())
            .then_some(WinAction::SetFirewall { rules }),
    );
    let cluster = (node.cluster.name.clone(), node.cluster.id.clone());
    let lock_host = node.cluster.lock_host.clone();
    let stale = f.pod_cidr.is_none()
        || f.recorded_cluster().as_ref() != Some(&cluster)
        || f.recorded_lock_host().unwrap_or_default() != lock_host;
    item(
        format!("pod-cidr {}", node.pod_cidr),
        stale.then_some(WinAction::RecordPodCidr {
            pod_cidr: node.pod_cidr,
            cluster: cluster.0,
            cluster_id: cluster.1,
            lock_host,
        }),
    );
}

/// Both profiles: a persistent route to every other node's pod CIDR via
/// its address on the adapter of interface index `index`, stale cluster
/// routes there removed. `force`: the routes there now are about to be lost
/// (the l2bridge vSwitch is being created): every one is added again.
pub(crate) fn route_items(
    node: &Node,
    f: &WindowsFacts,
    index: u32,
    force: bool,
    items: &mut Items,
    notes: &mut Vec<String>,
) {
    let mut item = |key: String, action: Option<WinAction>| push(items, key, action);
    let desired = node.routes();
    // Every route on the routable adapter, from both stores, by destination.
    let mut have: BTreeMap<Ipv4Net, Vec<&WinRoute>> = BTreeMap::new();
    for r in f.routes.iter().filter(|r| r.index == index) {
        have.entry(r.dst).or_default().push(r);
    }
    for (dst, rs) in &have {
        if desired.contains_key(dst) {
            continue;
        }
        if !node.cluster_cidr().contains(dst) || *dst == node.pod_cidr {
            continue;
        }
        let via = rs.iter().find_map(|r| r.via);
        if let Some(why) = node.frozen.route(dst, via) {
            notes.push(format!("route {dst} left alone: {why}"));
        } else {
            item(
                format!("stale route {dst}"),
                Some(WinAction::DelRoute { dst: *dst, via }),
            );
        }
    }
    for (dst, via) in &desired {
        if let Some(why) = node.frozen.route(dst, Some(*via)) {
            notes.push(format!("route {dst} left alone: {why}"));
            continue;
        }
        // Right: routing now and kept over a reboot, with no other next hop
        // in either store (a persistent copy with another one would come
        // back beside it).
        let rs = have.get(dst).map(Vec::as_slice).unwrap_or(&[]);
        let ok = rs
            .iter()
            .any(|r| r.via == Some(*via) && r.active && r.persistent)
            && rs.iter().all(|r| r.via == Some(*via));
        let action = match rs {
            _ if force => Some(WinAction::AddRoute {
                dst: *dst,
                via: *via,
                replace: true,
            }),
            _ if ok => None,
            [] => Some(WinAction::AddRoute {
                dst: *dst,
                via: *via,
                replace: false,
            }),
            _ => Some(WinAction::AddRoute {
                dst: *dst,
                via: *via,
                replace: true,
            }),
        };
        item(format!("route {dst}"), action);
    }
}

/// Both profiles: files kwinctl places, each with its SHA-256.
pub(crate) fn file_items(files: &[super::WinFile], f: &WindowsFacts, items: &mut Items) {
    for file in files {
        let ok = f.files.iter().any(|x| {
            x.path.eq_ignore_ascii_case(&file.path) && x.sha256.eq_ignore_ascii_case(&file.sha256)
        });
        push(
            items,
            format!("file {}", file.path),
            (!ok).then(|| WinAction::PlaceFile { file: file.clone() }),
        );
    }
}

/// Both profiles: kubelet and kube-proxy (and containerd) as services or
/// tasks, installed, then running.
pub(crate) fn service_items(services: &[WinService], f: &WindowsFacts, items: &mut Items) {
    let mut item = |key: String, action: Option<WinAction>| push(items, key, action);
    let mut changed_services: BTreeSet<String> = BTreeSet::new();
    for s in services {
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
                // Manual: the boot task starts it once the network is back
                let ok = service.is_some_and(|h| {
                    h.binpath == s.binpath
                        && set(&h.env) == set(&s.env)
                        && set(&h.depends) == set(&s.depends)
                        && h.start.eq_ignore_ascii_case(&s.start_mode)
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
    for s in services {
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
}
