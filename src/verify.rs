//! Read-only health checks: a host passes when `diff` finds nothing to do on
//! it and it can reach every other node's routable address.

use serde::Serialize;

use crate::diff::{Action, Conflict, HostDiff};
use crate::facts::{LinuxFacts, Reach};
use crate::plan::NodePlan;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// What a pending action says about the host as it is.
fn finding(a: &Action) -> String {
    match a {
        Action::RecordPodCidr { .. } => "no pod CIDR recorded on the host".into(),
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
            crate::facts::ROUTE_PROTO
        ),
        Action::DelRoute { via, .. } => format!(
            "kwinctl route{} to a block no node in the inventory has",
            via.map(|v| format!(" via {v}")).unwrap_or_default()
        ),
        Action::WriteBootScript { .. } => "/etc/kwinctl/boot.sh missing or out of date".into(),
        Action::InstallUnit { .. } => "kwinctl-boot.service missing, changed or disabled".into(),
        Action::RemoveNodeFiles => "kwinctl files present".into(),
    }
}

pub fn verify_linux(
    node: &NodePlan,
    diff: &Result<HostDiff, Conflict>,
    facts: &LinuxFacts,
) -> Vec<Check> {
    let mut checks = Vec::new();
    match diff {
        Err(c) => checks.push(Check {
            name: "pod-cidr".into(),
            pass: false,
            detail: c.0.clone(),
        }),
        Ok(d) => {
            for item in &d.items {
                checks.push(Check {
                    name: item.key.clone(),
                    pass: item.action.is_none(),
                    detail: item.action.as_ref().map(finding).unwrap_or_default(),
                });
            }
        }
    }
    for p in &node.peers {
        let (pass, detail) = match facts.reach.get(&p.address) {
            Some(Reach::Ok) => (true, String::new()),
            Some(Reach::NoPing) => (
                false,
                format!(
                    "cannot test: {} has no `ping` (install iputils-ping)",
                    node.name
                ),
            ),
            Some(Reach::NoAnswer) => (
                false,
                format!(
                    "no answer to ping from {} within {} s",
                    node.name,
                    crate::render::PING_WAIT_SECS
                ),
            ),
            None => (false, "not probed".to_string()),
        };
        checks.push(Check {
            name: format!("reach {} {}", p.name, p.address),
            pass,
            detail,
        });
    }
    checks
}
