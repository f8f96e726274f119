//! Checks across hosts: each Windows node Ready and labelled
//! `beta.kubernetes.io/os=windows`, as the control plane's kubectl sees it
//! (the node's name is its address: kubelet runs with --hostname-override).
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
}

impl Readiness {
    pub(super) fn new(mode: Mode, control_planes: impl Iterator<Item = usize>) -> Readiness {
        Readiness {
            active: mode.checks(),
            control_planes: control_planes.map(|i| (i, None)).collect(),
            view: None,
            held: Vec::new(),
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
            for (j, mut r) in self.held.drain(..) {
                check(view.as_ref(), &mut r);
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
        self.held
            .drain(..)
            .map(|(j, mut r)| {
                check(view.as_ref(), &mut r);
                (j, r)
            })
            .collect()
    }
}

/// Whether a host's result waits for the control plane's view.
fn needs_view(r: &HostReport) -> bool {
    r.os == Os::Windows && !(r.status == HostStatus::Failed && r.checks.is_empty())
}

/// The "kubernetes node Ready" check (or a note saying why it was not made).
fn check(view: Option<&K8sView>, r: &mut HostReport) {
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
            let node = nodes.iter().find(|n| {
                n.name.eq_ignore_ascii_case(&address) || n.name.eq_ignore_ascii_case(&r.host)
            });
            let (pass, detail) = match node {
                None => (
                    false,
                    format!("kubectl on the control plane does not list {address}"),
                ),
                Some(n) if !n.ready => (false, format!("node {} is not Ready", n.name)),
                Some(n) if n.os != "windows" => (
                    false,
                    format!(
                        "node {} is labelled beta.kubernetes.io/os={:?}",
                        n.name, n.os
                    ),
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
