//! Checks across hosts: each Windows node Ready and labelled
//! `beta.kubernetes.io/os=windows`, as the control plane's kubectl sees it
//! (the node's name is `Host::node_name`: kubelet runs with
//! --hostname-override; a report without one is looked up by address or
//! host name).
//!
//! A Windows host's result depends on the control plane's view, so it is
//! held back until every control-plane host of the run has reported, then
//! checked and announced: a host's streamed event always agrees with the
//! summary.

use std::collections::BTreeMap;

use crate::inventory::Os;
use crate::mode::Mode;
use crate::outcome::{HostReport, HostStatus};
use crate::verify::{Check, K8sView};

pub(super) struct Readiness {
    /// Only `up` and `verify` check across hosts.
    active: bool,
    /// Control-plane hosts by input position, with their view once they
    /// have reported.
    control_planes: BTreeMap<usize, Option<K8sView>>,
    /// The view, once every control-plane host has reported (`None` inside:
    /// no control-plane host gave one).
    view: Option<Option<K8sView>>,
    held: Vec<(usize, HostReport)>,
    /// The Windows nodes' kubelets set `node.kubernetes.io/windows-build`
    /// (the l2bridge profile's releases: the kubelet sets it itself, docs/research/kubernetes.md#k7).
    build_label: bool,
    /// The declared release (`cluster.kubernetes_version`): a node's kubelet
    /// must report it.
    version: Option<String>,
    /// `up`: how long a control plane waited for the changed nodes to report
    /// Ready (settle.rs); `None`: it did not.
    waited: Option<u64>,
}

impl Readiness {
    pub(super) fn new(
        mode: Mode,
        control_planes: impl Iterator<Item = usize>,
        build_label: bool,
        version: Option<String>,
    ) -> Readiness {
        Readiness {
            active: mode.checks(),
            control_planes: control_planes.map(|i| (i, None)).collect(),
            view: None,
            held: Vec::new(),
            build_label,
            version,
            waited: None,
        }
    }

    /// A host finished: the reports that can be announced now, in no
    /// particular order.
    pub(super) fn arrived(&mut self, i: usize, r: HostReport) -> Vec<(usize, HostReport)> {
        if !self.active {
            return vec![(i, r)];
        }
        if let Some(v) = self.control_planes.get_mut(&i) {
            *v = Some(r.k8s.clone());
            self.waited = self.waited.max(r.k8s_waited);
        }
        let mut ready = Vec::new();
        if needs_view(&r) {
            self.held.push((i, r));
        } else {
            ready.push((i, r));
        }
        if self.view.is_none() && self.control_planes.values().all(|v| v.is_some()) {
            self.view = Some(
                self.control_planes
                    .values()
                    .flatten()
                    .find(|v| !matches!(v, K8sView::NotAsked))
                    .cloned(),
            );
        }
        if let Some(view) = &self.view {
            let judge = self.judge();
            for (j, mut r) in self.held.drain(..) {
                check(view.as_ref(), &judge, &mut r);
                ready.push((j, r));
            }
        }
        ready
    }

    /// Every host finished: whatever is still held (a control-plane host
    /// that never reported counts as no view).
    pub(super) fn finish(&mut self) -> Vec<(usize, HostReport)> {
        let view = self.view.take().unwrap_or_else(|| {
            self.control_planes
                .values()
                .flatten()
                .find(|v| !matches!(v, K8sView::NotAsked))
                .cloned()
        });
        let judge = self.judge();
        self.held
            .drain(..)
            .map(|(j, mut r)| {
                check(view.as_ref(), &judge, &mut r);
                (j, r)
            })
            .collect()
    }

    fn judge(&self) -> Judge {
        Judge {
            build_label: self.build_label,
            version: self.version.clone(),
            waited: self.waited,
        }
    }
}

/// What a node is judged against.
struct Judge {
    build_label: bool,
    version: Option<String>,
    waited: Option<u64>,
}

/// Whether a host's result waits for the control plane's view.
fn needs_view(r: &HostReport) -> bool {
    r.os == Os::Windows && !(r.status == HostStatus::Failed && r.checks.is_empty())
}

/// The "kubernetes node Ready" check (or a note saying why it was not made).
fn check(view: Option<&K8sView>, judge: &Judge, r: &mut HostReport) {
    let build_label = judge.build_label;
    // the host changed in this run (and did not fail): its kubelet may have
    // just (re)started
    let changed = r.status == HostStatus::Changed;
    let address = r.address.to_string();
    match view {
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
            let node = nodes.iter().find(|n| match &r.node_name {
                Some(name) => n.name == *name,
                None => {
                    n.name.eq_ignore_ascii_case(&address) || n.name.eq_ignore_ascii_case(&r.host)
                }
            });
            let (pass, detail) = match node {
                None => (
                    false,
                    format!(
                        "kubectl on the control plane does not list node {}",
                        r.node_name.as_deref().unwrap_or(&address)
                    ),
                ),
                Some(n) if !n.ready => (false, not_ready(n, changed, judge.waited)),
                Some(n) if judge.version.as_deref().is_some_and(|v| !n.at_version(v)) => (
                    false,
                    format!(
                        "node {} reports kubelet {}, but the inventory declares kubernetes_version {}{}",
                        n.name,
                        n.kubelet_version.as_deref().unwrap_or_default(),
                        judge.version.as_deref().unwrap_or_default(),
                        match (changed, judge.waited) {
                            (true, Some(s)) => format!(
                                " (still so {s}s after this run changed the node: is the old kubelet still running?)"
                            ),
                            _ => " (the kubelet running is not the declared release: `kwinctl up` replaces it)".into(),
                        }
                    ),
                ),
                Some(n) if n.os != "windows" => (
                    false,
                    format!(
                        "node {} is labelled beta.kubernetes.io/os={:?}",
                        n.name, n.os
                    ),
                ),
                Some(n) => match (&n.pod_cidr, &n.windows_build) {
                    (Some(p), _) if !p.is_empty() && *p != r.pod_cidr.to_string() => (
                        false,
                        format!(
                            "node {} has .spec.podCIDR {p}, but kwinctl allocated {} (pods get addresses the other nodes' routes do not lead to): stop the controller manager allocating node CIDRs (--allocate-node-cidrs=false) or give it kwinctl's blocks",
                            n.name, r.pod_cidr
                        ),
                    ),
                    (_, Some(b)) if build_label && b.is_empty() => (
                        false,
                        format!(
                            "node {} has no node.kubernetes.io/windows-build label (the kubelet sets it itself: is it a Windows kubelet of the declared release?)",
                            n.name
                        ),
                    ),
                    (p, _) => {
                        if p.as_deref() == Some("") {
                            r.notes.push(format!(
                                "node {} has no .spec.podCIDR (the controller manager does not allocate node CIDRs): kwinctl's {} is the node's own record",
                                n.name, r.pod_cidr
                            ));
                        }
                        (true, String::new())
                    }
                },
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

/// Why a node listed not Ready fails: one this run changed and waited for
/// is still starting; otherwise not Ready.
fn not_ready(n: &crate::verify::K8sNode, changed: bool, waited: Option<u64>) -> String {
    match (changed, waited) {
        (true, Some(s)) => format!(
            "node {} is still starting: not Ready {s}s after this run changed it (kwinctl waits up to KWINCTL_READY_WAIT, default {}s; a kubelet reports Ready once its runtime and network are up): `kubectl describe node {}` says why; `kwinctl verify` once it is Ready",
            n.name,
            super::settle::READY_WAIT,
            n.name
        ),
        _ => format!("node {} is not Ready", n.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::K8sNode;

    fn report() -> HostReport {
        HostReport::new(
            "win01",
            Os::Windows,
            "10.0.0.11".parse().unwrap(),
            "10.244.1.0/24".parse().unwrap(),
        )
    }

    fn node(build: &str, pod_cidr: &str) -> K8sView {
        K8sView::Nodes(vec![K8sNode {
            name: "10.0.0.11".into(),
            ready: true,
            os: "windows".into(),
            windows_build: Some(build.into()),
            pod_cidr: Some(pod_cidr.into()),
            kubelet_version: Some("v1.30.4".into()),
        }])
    }

    fn node_check(view: K8sView, build_label: bool) -> (bool, String, Vec<String>) {
        let mut r = report();
        let judge = Judge {
            build_label,
            version: Some("1.30.4".into()),
            waited: None,
        };
        check(Some(&view), &judge, &mut r);
        let c = r
            .checks
            .iter()
            .find(|c| c.name == "kubernetes node Ready")
            .unwrap();
        (c.pass, c.detail.clone(), r.notes)
    }

    #[test]
    fn the_nodes_pod_cidr_and_build_label_are_checked() {
        assert!(node_check(node("10.0.17763", "10.244.1.0/24"), true).0);
        let (pass, detail, _) = node_check(node("10.0.17763", "10.244.7.0/24"), true);
        assert!(
            !pass && detail.contains("kwinctl allocated 10.244.1.0/24"),
            "{detail}"
        );
        let (pass, detail, _) = node_check(node("", "10.244.1.0/24"), true);
        assert!(!pass && detail.contains("windows-build"), "{detail}");
        // the transparent profile's old kubelets have no such label
        assert!(node_check(node("", "10.244.1.0/24"), false).0);
        let (pass, _, notes) = node_check(node("10.0.17763", ""), true);
        assert!(
            pass && notes.iter().any(|n| n.contains("no .spec.podCIDR")),
            "{notes:?}"
        );
    }
}
