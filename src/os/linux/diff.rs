//! Linux: desired × facts → actions.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::action::Action;
use super::facts::{LinuxFacts, Route};
use super::{LinuxDesired, POD_CIDR_FILE};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff, Item};
use crate::hash::sha256_hex;

/// A Linux host's diff.
pub type HostDiff = Diff<Action>;

pub fn diff_linux(node: &Node, d: &LinuxDesired, f: &LinuxFacts) -> Result<HostDiff, Conflict> {
    let mut items = Vec::new();
    let mut notes = Vec::new();

    match f.recorded_pod_cidr {
        Some(rec) if rec != node.pod_cidr => {
            return Err(Conflict::PodCidr {
                node: node.name.clone(),
                record: POD_CIDR_FILE,
                recorded: rec,
                assigned: node.pod_cidr,
            });
        }
        rec => {
            let cluster = (node.cluster.name.clone(), node.cluster.id.clone());
            let lock_host = node.cluster.lock_host.clone();
            let stale = rec.is_none()
                || f.recorded_cluster.as_ref() != Some(&cluster)
                || f.recorded_lock_host.as_deref().unwrap_or_default() != lock_host;
            items.push(Item {
                key: format!("pod-cidr {}", node.pod_cidr),
                action: stale.then_some(Action::RecordPodCidr {
                    pod_cidr: node.pod_cidr,
                    cluster: cluster.0,
                    cluster_id: cluster.1,
                    lock_host,
                }),
            })
        }
    }

    items.push(Item {
        key: "ip-forward".into(),
        action: (!f.ip_forward).then_some(Action::EnableForwarding),
    });

    let desired = node.routes();
    // Index the host's routes by destination (first one wins, like the kernel
    // with equal metrics).
    let mut have: BTreeMap<Ipv4Net, &Route> = BTreeMap::new();
    for r in &f.routes {
        have.entry(r.dst).or_insert(r);
    }
    for (dst, via) in &desired {
        if let Some(why) = node.frozen.route(dst, Some(*via)) {
            notes.push(format!("route {dst} left alone: {why}"));
            continue;
        }
        let action = match have.get(dst) {
            None => Some(Action::AddRoute {
                dst: *dst,
                via: *via,
            }),
            Some(r) if r.via == Some(*via) && r.owned() => None,
            Some(r) => Some(Action::ReplaceRoute {
                dst: *dst,
                via: *via,
                was_via: r.via,
                was_proto: r.proto.clone(),
            }),
        };
        items.push(Item {
            key: format!("route {dst}"),
            action,
        });
    }
    for r in &f.routes {
        if desired.contains_key(&r.dst) {
            continue;
        }
        if r.owned()
            && let Some(why) = node.frozen.route(&r.dst, r.via)
        {
            notes.push(format!("route {} left alone: {why}", r.dst));
        } else if r.owned() {
            items.push(Item {
                key: format!("stale route {}", r.dst),
                action: Some(Action::DelRoute {
                    dst: r.dst,
                    via: r.via,
                }),
            });
        } else if r.dst.prefix_len() > 0
            && crate::inventory::nets_overlap(&r.dst, &node.cluster_cidr())
            && r.dst != node.pod_cidr
            && !r.dst.contains(&node.pod_cidr)
        {
            notes.push(format!(
                "route {} ({}) inside the cluster CIDR is not kwinctl's; left alone",
                r.dst,
                r.via
                    .map(|v| format!("via {v}"))
                    .unwrap_or_else(|| format!("dev {}", r.dev.as_deref().unwrap_or("?")))
            ));
        }
    }

    let boot_sha = sha256_hex(&d.boot_script);
    items.push(Item {
        key: "boot script".into(),
        action: (f.boot_sha.as_deref() != Some(boot_sha.as_str())).then(|| {
            Action::WriteBootScript {
                content: d.boot_script.clone(),
            }
        }),
    });
    if f.systemd {
        let unit_sha = sha256_hex(&d.unit);
        items.push(Item {
            key: "boot unit".into(),
            action: unit_file_finding(f, &unit_sha).map(|found| Action::InstallUnit {
                content: d.unit.clone(),
                found,
            }),
        });
        if f.unit_sha.is_some() {
            items.push(Item {
                key: "boot unit run".into(),
                action: unit_run_finding(f).map(|why| Action::RerunBootUnit { why }),
            });
        }
    } else {
        notes.push(
            "no systemd on this host: routes do not come back by themselves after a reboot; \
             run /etc/kwinctl/boot.sh at boot or rerun `kwinctl up`"
                .into(),
        );
    }
    Ok(HostDiff { items, notes })
}

/// What is wrong with the unit file, if anything.
fn unit_file_finding(f: &LinuxFacts, want_sha: &str) -> Option<String> {
    let state = f.unit_file_state.as_str();
    if state.starts_with("masked") {
        return Some(format!(
            "is masked ({state}): someone turned it off on purpose, so kwinctl will not; \
             `systemctl unmask kwinctl-boot.service` on the host, then rerun `kwinctl up`"
        ));
    }
    match f.unit_sha.as_deref() {
        None => Some("is missing".into()),
        Some(s) if s != want_sha => Some(
            "differs from kwinctl's (edited by hand, or written by another kwinctl version)".into(),
        ),
        Some(_) if !f.unit_enabled => Some(format!(
            "is not enabled ({})",
            if state.is_empty() { "unknown" } else { state }
        )),
        Some(_) => None,
    }
}

/// Whether the unit's last run at boot went wrong: what systemd and boot.sh's
/// journal say. A unit that has not run since it was installed passes.
fn unit_run_finding(f: &LinuxFacts) -> Option<String> {
    let s = f.unit_state.as_ref()?;
    let n = s.restarts;
    let what = match (s.load.as_str(), s.active.as_str(), s.sub.as_str()) {
        (load, _, _) if !matches!(load, "loaded" | "masked" | "not-found") => format!(
            "is not loaded by systemd ({load}; systemd before 245 refuses Restart=on-failure \
             in a Type=oneshot unit)"
        ),
        (_, "failed", _) => format!("failed at boot ({}; {n} restarts)", s.result),
        (_, "activating", "auto-restart") => format!(
            "failed at boot ({}) and systemd runs it again soon ({n} restarts so far)",
            s.result
        ),
        (_, "activating", _) => {
            format!("is still waiting for the network at boot ({n} restarts so far)")
        }
        _ => return None,
    };
    Some(match f.unit_journal.as_deref() {
        Some(j) if !j.is_empty() => format!("{what}: {j}"),
        _ => format!("{what}; see `journalctl -b -u kwinctl-boot.service` on the host"),
    })
}

/// kwinctl's routes on the host that this run must leave alone (frozen:
/// to a disputed node, or to a node this inventory does not know).
pub fn kept_routes(node: &Node, f: &LinuxFacts) -> BTreeMap<Ipv4Net, Ipv4Addr> {
    let desired = node.routes();
    f.routes
        .iter()
        .filter(|r| r.owned() && !desired.contains_key(&r.dst))
        .filter(|r| node.frozen.route(&r.dst, r.via).is_some())
        .filter_map(|r| Some((r.dst, r.via?)))
        .collect()
}

/// `reset`: remove every kwinctl route and file from a Linux host. IP
/// forwarding is left on: other software may rely on it.
pub fn diff_reset_linux(f: &LinuxFacts) -> HostDiff {
    let mut items: Vec<Item<Action>> = f
        .routes
        .iter()
        .filter(|r| r.owned())
        .map(|r| Item {
            key: format!("route {}", r.dst),
            action: Some(Action::DelRoute {
                dst: r.dst,
                via: r.via,
            }),
        })
        .collect();
    let has_files = f.recorded_pod_cidr.is_some() || f.boot_sha.is_some() || f.unit_sha.is_some();
    items.push(Item {
        key: "node files".into(),
        action: has_files.then_some(Action::RemoveNodeFiles),
    });
    HostDiff {
        items,
        notes: vec!["IPv4 forwarding is left on".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Describe;
    use crate::inventory::Os;

    fn node() -> Node {
        crate::alloc::test_node(
            "a",
            Os::Linux,
            "198.18.1.2",
            "198.19.0.0/24",
            "198.19.0.0/16",
            &[
                ("b", "198.18.1.3", "198.19.1.0/24"),
                ("c", "198.18.1.4", "198.19.2.0/24"),
            ],
        )
    }

    const BOOT: &str = "#!/bin/sh\nboot\n";
    const UNIT: &str = "[Unit]\n";

    fn route(dst: &str, via: Option<&str>, proto: &str) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            via: via.map(|v| v.parse().unwrap()),
            dev: Some("eth0".into()),
            proto: proto.into(),
        }
    }

    fn converged() -> LinuxFacts {
        LinuxFacts {
            hostname: "a".into(),
            ip_forward: true,
            systemd: true,
            routes: vec![
                route("198.18.1.0/24", None, "kernel"),
                route("198.19.1.0/24", Some("198.18.1.3"), "198"),
                route("198.19.2.0/24", Some("198.18.1.4"), "198"),
            ],
            recorded_pod_cidr: Some("198.19.0.0/24".parse().unwrap()),
            recorded_cluster: Some(("t".into(), "0123456789abcdef".into())),
            recorded_lock_host: Some("lin01".into()),
            cluster_gen: 0,
            registry: vec![],
            boot_sha: Some(sha256_hex(BOOT)),
            unit_sha: Some(sha256_hex(UNIT)),
            unit_enabled: true,
            unit_file_state: "enabled".into(),
            unit_state: Some(unit_state("loaded active exited success 0")),
            unit_journal: None,
            reach: Default::default(),
            k8s_nodes: None,
            api_server: None,
        }
    }

    fn unit_state(s: &str) -> super::super::facts::UnitState {
        let f: Vec<&str> = s.split(' ').collect();
        super::super::facts::UnitState {
            load: f[0].into(),
            active: f[1].into(),
            sub: f[2].into(),
            result: f[3].into(),
            restarts: f[4].parse().unwrap(),
        }
    }

    fn run(f: &LinuxFacts) -> Result<HostDiff, Conflict> {
        diff_linux(
            &node(),
            &LinuxDesired {
                boot_script: BOOT.into(),
                unit: UNIT.into(),
            },
            f,
        )
    }

    fn actions(d: &HostDiff) -> Vec<String> {
        d.actions().map(|a| a.describe()).collect()
    }

    #[test]
    fn empty_host_gets_everything() {
        let d = run(&LinuxFacts::fresh(true)).unwrap();
        assert_eq!(
            actions(&d),
            [
                "record pod CIDR 198.19.0.0/24 in /etc/kwinctl/pod-cidr",
                "enable IPv4 forwarding",
                "add route 198.19.1.0/24 via 198.18.1.3",
                "add route 198.19.2.0/24 via 198.18.1.4",
                "write /etc/kwinctl/boot.sh (restores forwarding and routes at boot)",
                "install and enable kwinctl-boot.service (runs boot.sh at boot)",
            ]
        );
    }

    #[test]
    fn converged_host_has_nothing_to_do() {
        let d = run(&converged()).unwrap();
        assert_eq!(d.changes(), 0, "{:?}", actions(&d));
        assert_eq!(d.items.len(), 7);
        // installed, not run since: fine
        let mut f = converged();
        f.unit_state = Some(unit_state("loaded inactive dead success 0"));
        assert_eq!(run(&f).unwrap().changes(), 0);
    }

    #[test]
    fn drifted_next_hop_is_replaced() {
        let mut f = converged();
        f.routes[1] = route("198.19.1.0/24", Some("198.18.1.9"), "198");
        let d = run(&f).unwrap();
        assert_eq!(
            actions(&d),
            ["replace route 198.19.1.0/24 via 198.18.1.9 with via 198.18.1.3"]
        );
    }

    #[test]
    fn manual_route_with_right_hop_is_adopted() {
        let mut f = converged();
        f.routes[1] = route("198.19.1.0/24", Some("198.18.1.3"), "boot");
        let d = run(&f).unwrap();
        assert_eq!(
            actions(&d),
            ["adopt route 198.19.1.0/24 via 198.18.1.3 (proto boot) as kwinctl's"]
        );
    }

    #[test]
    fn stale_owned_route_is_removed() {
        let mut f = converged();
        f.routes
            .push(route("198.19.9.0/24", Some("198.18.1.10"), "198"));
        let d = run(&f).unwrap();
        assert_eq!(actions(&d), ["remove route 198.19.9.0/24 via 198.18.1.10"]);
    }

    #[test]
    fn foreign_routes_are_left_alone() {
        let mut f = converged();
        f.routes
            .push(route("198.19.9.0/24", Some("198.18.1.10"), "static"));
        f.routes
            .push(route("0.0.0.0/0", Some("198.18.1.1"), "boot"));
        f.routes
            .push(route("10.0.0.0/8", Some("198.18.1.1"), "boot"));
        // the node's own pod bridge
        f.routes.push(route("198.19.0.0/24", None, "kernel"));
        let d = run(&f).unwrap();
        assert_eq!(d.changes(), 0, "{:?}", actions(&d));
        assert_eq!(d.notes.len(), 1, "{:?}", d.notes);
        assert!(d.notes[0].contains("198.19.9.0/24"));
    }

    #[test]
    fn recorded_cidr_conflict_changes_nothing() {
        let mut f = converged();
        f.recorded_pod_cidr = Some("198.19.7.0/24".parse().unwrap());
        let e = run(&f).unwrap_err();
        assert_eq!(e.check_name(), "pod-cidr");
        let e = e.to_string();
        assert!(e.contains("198.19.7.0/24"), "{e}");
        assert!(e.contains("pod_cidr: 198.19.7.0/24"), "{e}");
    }

    #[test]
    fn a_node_without_its_cluster_recorded_gets_it() {
        let mut f = converged();
        f.recorded_cluster = None;
        assert_eq!(
            actions(&run(&f).unwrap()),
            ["record pod CIDR 198.19.0.0/24 in /etc/kwinctl/pod-cidr"]
        );
        // so does a node that records no lock host yet (an older kwinctl's)
        let mut f = converged();
        f.recorded_lock_host = None;
        assert_eq!(
            actions(&run(&f).unwrap()),
            ["record pod CIDR 198.19.0.0/24 in /etc/kwinctl/pod-cidr"]
        );
    }

    #[test]
    fn frozen_routes_are_left_alone() {
        let mut n = node();
        let mut frozen = crate::alloc::Frozen::default();
        frozen
            .dsts
            .insert("198.19.9.0/24".parse().unwrap(), "disputed".into());
        frozen
            .vias
            .insert("198.18.1.4".parse().unwrap(), "c is disputed".into());
        n.frozen = std::sync::Arc::new(frozen);
        let mut f = converged();
        // a stale route to a frozen block, and a wrong route via a frozen hop
        f.routes
            .push(route("198.19.9.0/24", Some("198.18.1.10"), "198"));
        f.routes[2] = route("198.19.2.0/24", Some("198.18.1.99"), "198");
        let d = diff_linux(
            &n,
            &LinuxDesired {
                boot_script: BOOT.into(),
                unit: UNIT.into(),
            },
            &f,
        )
        .unwrap();
        assert_eq!(d.changes(), 0, "{:?}", actions(&d));
        assert_eq!(
            d.notes.iter().filter(|n| n.contains("left alone")).count(),
            2,
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn changed_boot_script_and_disabled_unit() {
        let mut f = converged();
        f.boot_sha = Some(sha256_hex("old"));
        f.unit_enabled = false;
        let d = run(&f).unwrap();
        assert_eq!(d.changes(), 2, "{:?}", actions(&d));
    }

    /// verify names what is wrong with the unit file: masked (which `up`
    /// leaves to the operator), edited, or disabled.
    #[test]
    fn unit_file_findings() {
        let finding = |f: &LinuxFacts| {
            let d = run(f).unwrap();
            let i = d.items.iter().find(|i| i.key == "boot unit").unwrap();
            i.action.as_ref().map(|a| a.finding())
        };
        let mut f = converged();
        f.unit_sha = None;
        f.unit_enabled = false;
        f.unit_file_state = "masked".into();
        let m = finding(&f).unwrap();
        assert!(
            m.contains("is masked (masked)") && m.contains("systemctl unmask"),
            "{m}"
        );
        let mut f = converged();
        f.unit_sha = Some(sha256_hex("[Unit]\nExecStart=/bin/evil\n"));
        assert!(finding(&f).unwrap().contains("edited by hand"));
        let mut f = converged();
        f.unit_enabled = false;
        f.unit_file_state = "disabled".into();
        assert_eq!(
            finding(&f).unwrap(),
            "kwinctl-boot.service is not enabled (disabled)"
        );
        f.unit_sha = None;
        f.unit_file_state = String::new();
        assert_eq!(finding(&f).unwrap(), "kwinctl-boot.service is missing");
    }

    /// A unit that failed at boot, or is still trying, is a failed check
    /// with boot.sh's journal line, and `up` runs it again (after the routes).
    #[test]
    fn a_failed_boot_unit_is_found_and_run_again() {
        let journal =
            "kwinctl-boot: gave up after 120 s; never reachable on any interface: 198.18.1.3";
        for (state, want) in [
            (
                "loaded failed failed exit-code 4",
                "failed at boot (exit-code; 4 restarts)",
            ),
            (
                "loaded activating auto-restart exit-code 1",
                "failed at boot (exit-code) and systemd runs it again soon (1 restarts so far)",
            ),
            (
                "loaded activating start success 0",
                "is still waiting for the network at boot (0 restarts so far)",
            ),
            (
                "bad-setting inactive dead success 0",
                "is not loaded by systemd (bad-setting;",
            ),
        ] {
            let mut f = converged();
            f.routes.truncate(1);
            f.unit_state = Some(unit_state(state));
            f.unit_journal = Some(journal.into());
            let d = run(&f).unwrap();
            let item = d.items.iter().find(|i| i.key == "boot unit run").unwrap();
            let a = item.action.as_ref().expect(state);
            let finding = a.finding();
            assert!(
                finding.starts_with(&format!("kwinctl-boot.service {want}")),
                "{finding}"
            );
            assert!(finding.ends_with(&format!(": {journal}")), "{finding}");
            // after the routes it restores
            let acts = actions(&d);
            assert!(
                acts.last()
                    .unwrap()
                    .starts_with("run kwinctl-boot.service again"),
                "{acts:?}"
            );
            assert!(acts[0].starts_with("add route"), "{acts:?}");
        }
        // no journal line: where to look
        let mut f = converged();
        f.unit_state = Some(unit_state("loaded failed failed timeout 3"));
        let d = run(&f).unwrap();
        let a = d.actions().next().unwrap();
        assert!(
            a.finding()
                .ends_with("see `journalctl -b -u kwinctl-boot.service` on the host")
        );
        // no unit file: nothing to run (installing it is the finding)
        f.unit_sha = None;
        let d = run(&f).unwrap();
        assert!(d.items.iter().all(|i| i.key != "boot unit run"));
    }

    #[test]
    fn reset_removes_only_owned_routes_and_files() {
        let mut f = converged();
        f.routes
            .push(route("198.19.9.0/24", Some("198.18.1.10"), "static"));
        let d = diff_reset_linux(&f);
        assert_eq!(
            actions(&d),
            [
                "remove route 198.19.1.0/24 via 198.18.1.3",
                "remove route 198.19.2.0/24 via 198.18.1.4",
                "remove /etc/kwinctl/boot.sh, /etc/kwinctl/pod-cidr and kwinctl-boot.service",
            ]
        );
        assert_eq!(diff_reset_linux(&LinuxFacts::fresh(false)).changes(), 0);
    }

    #[test]
    fn no_systemd_is_noted_not_installed() {
        let mut f = converged();
        f.systemd = false;
        let d = run(&f).unwrap();
        assert_eq!(d.changes(), 0);
        assert!(d.notes.iter().any(|n| n.contains("no systemd")));
    }
}
