//! Read-only health checks: a host passes when `diff` finds nothing to do on
//! it and it can reach every other node's routable address.

use serde::Serialize;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::diff::{Conflict, Describe, Diff};
use crate::facts::Reach;
use crate::plan::NodePlan;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// Checks for any OS: one per desired item (passing when nothing is to be
/// done), plus reachability of every other node.
pub fn checks<A: Describe>(
    node: &NodePlan,
    diff: &Result<Diff<A>, Conflict>,
    reach: &BTreeMap<Ipv4Addr, Reach>,
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
                    detail: item
                        .action
                        .as_ref()
                        .map(|a| a.finding())
                        .unwrap_or_default(),
                });
            }
        }
    }
    for p in &node.peers {
        let (pass, detail) = match reach.get(&p.address) {
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

/// Across hosts: each Windows node Ready and labelled
/// `beta.kubernetes.io/os=windows`, as the control plane's kubectl sees it
/// (the node's name is its address: kubelet runs with --hostname-override).
pub fn kubernetes_nodes(reports: &mut [crate::report::HostReport]) {
    use crate::report::{HostStatus, K8sView};
    let view = reports
        .iter()
        .map(|r| r.k8s.clone())
        .find(|v| !matches!(v, K8sView::NotAsked));
    for r in reports.iter_mut().filter(|r| r.os == "windows") {
        if r.status == HostStatus::Failed && r.checks.is_empty() {
            continue;
        }
        match &view {
            None => r.notes.push(
                "node Ready not checked: no control-plane host was checked in this run".into(),
            ),
            Some(K8sView::NoKubectl) | Some(K8sView::NotAsked) => r
                .notes
                .push("node Ready not checked: the control plane has no kubectl".into()),
            Some(K8sView::KubectlFailed) => r.notes.push(
                "node Ready not checked: `kubectl get nodes` failed on the control plane (is its kubeconfig set up?)"
                    .into(),
            ),
            Some(K8sView::Nodes(nodes)) => {
                let node = nodes.iter().find(|n| {
                    n.name.eq_ignore_ascii_case(&r.address) || n.name.eq_ignore_ascii_case(&r.host)
                });
                let (pass, detail) = match node {
                    None => (false, format!("kubectl on the control plane does not list {}", r.address)),
                    Some(n) if !n.ready => (false, format!("node {} is not Ready", n.name)),
                    Some(n) if n.os != "windows" => (
                        false,
                        format!("node {} is labelled beta.kubernetes.io/os={:?}", n.name, n.os),
                    ),
                    Some(_) => (true, String::new()),
                };
                r.checks.push(Check {
                    name: "kubernetes node Ready".into(),
                    pass,
                    detail,
                });
                if !pass {
                    r.status = HostStatus::Failed;
                }
            }
        }
    }
}
