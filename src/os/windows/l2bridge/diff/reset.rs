//! The l2bridge profile's `reset`, and one example of each of its actions.

use super::*;

fn holder_index(f: &WindowsFacts, a: Ipv4Addr) -> Option<u32> {
    holder(f, a).map(|x| x.index)
}

/// `reset`: undo what `up` created, in reverse order. The Containers
/// feature, the placeholder network (and with it the vSwitch: removing it
/// blips the host's network again) and containerd's images stay.
pub fn reset(node: &Node, d: &WindowsDesired, f: &WindowsFacts) -> WinDiff {
    let mut items: Vec<Item<WinAction>> = Vec::new();
    let mut push = |key: String, action: Option<WinAction>| items.push(Item { key, action });
    for s in d.services.iter().rev() {
        let present = f.services.iter().any(|x| is(&x.name, &s.name));
        push(
            format!("service {}", s.name),
            present.then(|| WinAction::RemoveService {
                name: s.name.clone(),
            }),
        );
    }
    if f.tasks.iter().any(|t| is(&t.name, BOOT_TASK)) {
        push(
            format!("boot task {BOOT_TASK}"),
            Some(WinAction::RemoveTask {
                name: BOOT_TASK.into(),
            }),
        );
    }
    let index = holder_index(f, node.address);
    let mut seen = std::collections::BTreeSet::new();
    for r in &f.routes {
        if Some(r.index) == index
            && node.cluster_cidr().contains(&r.dst)
            && r.dst != node.pod_cidr
            && seen.insert(r.dst)
        {
            push(
                format!("route {}", r.dst),
                Some(WinAction::DelRoute {
                    dst: r.dst,
                    via: r.via,
                }),
            );
        }
    }
    push(
        "firewall".into(),
        (!f.firewall.is_empty()).then_some(WinAction::RemoveFirewall),
    );
    let net = f.hns_networks.iter().any(|n| is(&n.name, &d.network));
    push(
        format!("hns network {}", d.network),
        net.then(|| WinAction::RemoveHnsNetwork {
            name: d.network.clone(),
        }),
    );
    let mut paths: Vec<String> = d.files.iter().map(|f| f.path.clone()).collect();
    if let Some(l2) = d.profile.l2() {
        paths.extend(l2.files.iter().map(|f| f.path.clone()));
        paths.push(l2::CNI_CONF.into());
        for a in [&l2.containerd, &l2.cni_plugins].into_iter().flatten() {
            paths.extend(a.members.iter().cloned());
            paths.push(a.archive.path.clone());
            paths.push(a.marker.clone());
        }
    }
    for p in paths {
        let present = f.files.iter().any(|x| is(&x.path, &p));
        push(
            format!("file {p}"),
            present.then(|| WinAction::RemoveFile { path: p.clone() }),
        );
    }
    push(
        "pod-cidr record".into(),
        f.pod_cidr.is_some().then(|| WinAction::RemoveFile {
            path: POD_CIDR_FILE.into(),
        }),
    );
    push(
        "cluster record".into(),
        f.cluster.is_some().then(|| WinAction::RemoveFile {
            path: CLUSTER_FILE.into(),
        }),
    );
    items.extend(crate::os::windows::join::reset_items(f));
    items.extend(crate::os::windows::leftovers::reset_items(f));
    WinDiff {
        items,
        notes: vec![format!(
            "the Containers feature, the placeholder network {} (and with it the vSwitch) and containerd's images are left in place",
            crate::os::windows::hns::PLACEHOLDER
        )],
    }
}
