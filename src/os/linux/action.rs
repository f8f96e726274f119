//! What kwinctl does on a Linux host, one action at a time. The serde `kind`
//! of an action is the name of its template (`templates/<kind>.sh.j2`).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::diff::Describe;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Record the node's pod CIDR and its cluster on the host
    /// (`/etc/kwinctl/pod-cidr`, `/etc/kwinctl/cluster`, whose second line
    /// names the host that keeps the cluster's lock).
    RecordPodCidr {
        pod_cidr: Ipv4Net,
        cluster: String,
        cluster_id: String,
        lock_host: String,
    },
    EnableForwarding,
    AddRoute {
        dst: Ipv4Net,
        via: Ipv4Addr,
    },
    /// A route to the right destination exists but has the wrong next hop, or
    /// is not marked as kwinctl's: replace it with kwinctl's.
    ReplaceRoute {
        dst: Ipv4Net,
        via: Ipv4Addr,
        was_via: Option<Ipv4Addr>,
        was_proto: String,
    },
    /// A kwinctl route the desired state no longer has (a node left).
    DelRoute {
        dst: Ipv4Net,
        via: Option<Ipv4Addr>,
    },
    /// `/etc/kwinctl/boot.sh`: re-applies forwarding and routes at boot.
    WriteBootScript {
        content: String,
    },
    /// The systemd unit that runs boot.sh at boot; `found` says what is
    /// wrong with the one on the host.
    InstallUnit {
        content: String,
        found: String,
    },
    /// The unit failed at boot (or still tries): run it again, now that
    /// the routes are in place, so that it ends active.
    RerunBootUnit {
        why: String,
    },
    /// `reset`: remove boot.sh, the pod CIDR record and the unit.
    RemoveNodeFiles,
}

impl Describe for Action {
    fn describe(&self) -> String {
        match self {
            Action::RecordPodCidr { pod_cidr, .. } => {
                format!("record pod CIDR {pod_cidr} in /etc/kwinctl/pod-cidr")
            }
            Action::EnableForwarding => "enable IPv4 forwarding".into(),
            Action::AddRoute { dst, via } => format!("add route {dst} via {via}"),
            Action::ReplaceRoute {
                dst,
                via,
                was_via,
                was_proto,
            } => match was_via {
                Some(w) if w != via => format!("replace route {dst} via {w} with via {via}"),
                _ => format!("adopt route {dst} via {via} (proto {was_proto}) as kwinctl's"),
            },
            Action::DelRoute { dst, via } => match via {
                Some(v) => format!("remove route {dst} via {v}"),
                None => format!("remove route {dst}"),
            },
            Action::WriteBootScript { .. } => {
                "write /etc/kwinctl/boot.sh (restores forwarding and routes at boot)".into()
            }
            Action::InstallUnit { .. } => {
                "install and enable kwinctl-boot.service (runs boot.sh at boot)".into()
            }
            Action::RerunBootUnit { why } => format!("run kwinctl-boot.service again (it {why})"),
            Action::RemoveNodeFiles => {
                "remove /etc/kwinctl/boot.sh, /etc/kwinctl/pod-cidr and kwinctl-boot.service".into()
            }
        }
    }

    fn finding(&self) -> String {
        match self {
            Action::RecordPodCidr { .. } => "no pod CIDR or cluster recorded on the host".into(),
            Action::EnableForwarding => "net.ipv4.ip_forward is 0".into(),
            Action::AddRoute { via, .. } => format!("missing (expected via {via})"),
            Action::ReplaceRoute {
                via,
                was_via,
                was_proto,
                ..
            } => format!(
                "found via {} proto {was_proto}, expected via {via} proto {}",
                was_via
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "none".into()),
                super::ROUTE_PROTO
            ),
            Action::DelRoute { via, .. } => format!(
                "kwinctl route{} to a block no node in the inventory has",
                via.map(|v| format!(" via {v}")).unwrap_or_default()
            ),
            Action::WriteBootScript { .. } => "/etc/kwinctl/boot.sh missing or out of date".into(),
            Action::InstallUnit { found, .. } => format!("kwinctl-boot.service {found}"),
            Action::RerunBootUnit { why } => format!("kwinctl-boot.service {why}"),
            Action::RemoveNodeFiles => "kwinctl files present".into(),
        }
    }
}

/// One of every action, for the contract tests (and a compile error in
/// `every_kind_has_an_example` when a variant is added without one).
#[doc(hidden)]
pub fn examples() -> Vec<Action> {
    vec![
        Action::RecordPodCidr {
            pod_cidr: "198.19.0.0/24".parse().unwrap(),
            cluster: "lab".into(),
            cluster_id: "0123456789abcdef".into(),
            lock_host: "h1".into(),
        },
        Action::EnableForwarding,
        Action::AddRoute {
            dst: "198.19.1.0/24".parse().unwrap(),
            via: "198.18.1.3".parse().unwrap(),
        },
        Action::ReplaceRoute {
            dst: "198.19.2.0/24".parse().unwrap(),
            via: "198.18.1.4".parse().unwrap(),
            was_via: Some("198.18.1.9".parse().unwrap()),
            was_proto: "198".into(),
        },
        Action::DelRoute {
            dst: "198.19.9.0/24".parse().unwrap(),
            via: None,
        },
        Action::WriteBootScript {
            content: "#!/bin/sh\necho hi\n".into(),
        },
        Action::InstallUnit {
            content: "[Unit]\n".into(),
            found: "is missing".into(),
        },
        Action::RerunBootUnit {
            why: "failed at boot (exit-code)".into(),
        },
        Action::RemoveNodeFiles,
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
                Action::RecordPodCidr { .. } => "record_pod_cidr",
                Action::EnableForwarding => "enable_forwarding",
                Action::AddRoute { .. } => "add_route",
                Action::ReplaceRoute { .. } => "replace_route",
                Action::DelRoute { .. } => "del_route",
                Action::WriteBootScript { .. } => "write_boot_script",
                Action::InstallUnit { .. } => "install_unit",
                Action::RerunBootUnit { .. } => "rerun_boot_unit",
                Action::RemoveNodeFiles => "remove_node_files",
            })
            .collect();
        assert_eq!(kinds.len(), 9);
        for a in examples() {
            assert!(kinds.contains(crate::render::kind_of(&a).as_str()));
        }
    }
}
