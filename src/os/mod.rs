//! Everything that differs between operating systems, one folder each:
//! facts (the probe's parser beside its template), actions, the pure diff,
//! scripts, desired state, and the [`NodeOps`] implementation the runner
//! drives. Nothing outside `os/` matches on the OS to decide what to do.
//!
//! Adding a Windows action: a variant in `windows/action.rs` (its serde
//! `kind` names its template `windows/templates/<kind>.ps1.j2` and the
//! simulator's handler `act_<kind>` in `winsim/winsim.py`), the check in
//! `windows/diff.rs`, the fact in `windows/facts.rs` and the probe template.
//! `contract` tests that every kind has its template, simulator handler and
//! an example in the snapshots.

pub mod linux;
mod ops;
pub mod windows;

pub use ops::{DesiredError, Detached, NodeOps, WithOps};

#[cfg(test)]
mod contract;

use minijinja::Value;

use crate::alloc::Node;
use crate::inventory::{Host, Inventory, InventoryError, Os};
use crate::render::Renderer;
use crate::transport::Interpreter;

/// What a host needs that does not depend on its pod CIDR, per OS;
/// computed before anything is contacted (a bad binary spec or an
/// unreadable kubeconfig is bad input).
pub enum Desired {
    Linux,
    Windows(Box<windows::WindowsDesired>),
}

impl Desired {
    pub fn of(
        inv: &Inventory,
        host: &Host,
        uploads: &windows::Uploads,
    ) -> Result<Desired, DesiredError> {
        Ok(match host.os {
            Os::Linux => Desired::Linux,
            Os::Windows => {
                Desired::Windows(Box::new(windows::WindowsDesired::of(inv, host, uploads)?))
            }
        })
    }

    /// Hand this host's [`NodeOps`] to `w`.
    pub fn ops<'a, W: WithOps<'a>>(&'a self, r: &'a Renderer, host: &'a Host, w: W) -> W::Out {
        match self {
            Desired::Linux => w.with(linux::LinuxOps::new(r, host)),
            Desired::Windows(d) => w.with(windows::WindowsOps::new(r, d)),
        }
    }
}

/// The inventory's problems that only an OS's profile knows (the Windows
/// profile's Kubernetes release rules): bad input like any other inventory
/// error, found before anything is contacted.
pub fn check_inventory(inv: &Inventory) -> Result<(), InventoryError> {
    let problems = windows::k8s::inventory_problems(inv);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InventoryError {
            file: inv.path.clone(),
            problems,
        })
    }
}

/// Whether the API server is reached over https.
fn https_api(inv: &Inventory) -> bool {
    inv.cluster
        .api_server
        .as_deref()
        .is_some_and(|a| a.starts_with("https://"))
}

/// Whether `up` joins Windows nodes with identities of their own
/// (`cluster.identity` bootstrap, src/join/).
pub fn joins_nodes(inv: &Inventory) -> bool {
    inv.hosts.iter().any(|h| h.os == Os::Windows)
        && windows::k8s::identity(&inv.cluster) == crate::inventory::Identity::Bootstrap
}

/// The shared identity chosen only because the inventory gives
/// `cluster.kubeconfig` (as every inventory did before issue 35), on a
/// release that could join each node with an identity of its own: say how
/// to choose either way.
fn implicit_shared(inv: &Inventory, v: &crate::inventory::KubeVersion) -> Option<String> {
    let c = &inv.cluster;
    (c.identity_given.is_none()
        && c.kubeconfig.is_some()
        && https_api(inv)
        && windows::k8s::can_join(v.minor))
    .then(|| {
        format!(
            "cluster.identity is shared only because cluster.kubeconfig is set: Kubernetes {v} can              join each Windows node with a certificate of its own (`identity: bootstrap`, no              kubeconfig; docs/security.md); write `identity: shared` to keep one credential for              every node"
        )
    })
}

/// Notes about the inventory as a whole that `check` prints.
pub fn inventory_notes(inv: &Inventory) -> Vec<String> {
    let has_windows = inv.hosts.iter().any(|h| h.os == Os::Windows);
    match inv.cluster.kubernetes_version {
        Some(v) if has_windows => windows::k8s::identity_note(
            &v,
            https_api(inv) && windows::k8s::identity(&inv.cluster) == crate::inventory::Identity::Shared,
        )
            .into_iter()
            .chain([
                windows::k8s::join_note(&v),
                format!(
                    "cluster.identity: {} ({})",
                    windows::k8s::identity(&inv.cluster).name(),
                    match windows::k8s::identity(&inv.cluster) {
                        crate::inventory::Identity::Bootstrap => "each Windows node joins with a short-lived bootstrap token and gets a client certificate of its own, as `kubeadm join` does",
                        crate::inventory::Identity::Shared => "every Windows node uses cluster.kubeconfig's credential",
                    }
                ),
            ])
            .chain(implicit_shared(inv, &v))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether the cluster step's node check requires a node's OS build label
/// (`node.kubernetes.io/windows-build`): when the inventory declares the
/// l2bridge Windows profile, whose kubelets set it themselves
/// (docs/research/kubernetes.md#k7). The runner asks this without naming
/// an OS or a profile.
pub fn build_label_required(inv: &Inventory) -> bool {
    inv.cluster.windows_profile() == Some(windows::k8s::Profile::L2Bridge)
}

/// How a host of this OS runs the scripts it is sent.
pub fn interpreter(os: Os) -> Interpreter {
    match os {
        Os::Linux => Interpreter::Sh,
        Os::Windows => Interpreter::PowerShell,
    }
}

/// The renderer with every OS's template globals (names kwinctl gives things
/// on a host).
pub fn renderer() -> Renderer {
    let mut globals: Vec<(&'static str, Value)> = Vec::new();
    globals.extend(linux::template_globals());
    globals.extend(windows::template_globals());
    Renderer::new(&globals)
}

/// The cluster lock lives on a Linux host (the control plane's, when there
/// is one): these are its scripts. See `linux::script::lock`.
pub use linux::script::{
    lock as lock_script, lock_break as lock_break_script, lock_lease, lock_lease_setting,
    renew as renew_script, unlock as unlock_script,
};

/// The script a host would get on a freshly installed machine (`render`).
pub fn fresh_script(
    r: &Renderer,
    inv: &Inventory,
    host: &Host,
    node: &Node,
) -> Result<String, DesiredError> {
    struct Fresh<'n>(&'n Node);
    impl<'a> WithOps<'a> for Fresh<'_> {
        type Out = Result<String, DesiredError>;
        fn with<O: NodeOps + 'a>(self, ops: O) -> Self::Out {
            let d = ops
                .diff(self.0, &ops.fresh(self.0))
                .map_err(|e| DesiredError(e.to_string()))?;
            let actions: Vec<_> = d.actions().collect();
            Ok(ops.script(self.0, &actions, None))
        }
    }
    let desired = Desired::of(inv, host, &windows::Uploads::default())?;
    desired.ops(r, host, Fresh(node))
}
