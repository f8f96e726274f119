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

pub use ops::{DesiredError, NodeOps, WithOps};

#[cfg(test)]
mod contract;

use minijinja::Value;

use crate::alloc::Node;
use crate::inventory::{Host, Inventory, Os};
use crate::render::Renderer;
use crate::transport::Interpreter;

/// What a node should have beyond its [`Node`], per OS; computed before
/// anything is contacted (a bad binary spec or an unreadable kubeconfig is
/// bad input).
pub enum Desired {
    Linux(linux::LinuxDesired),
    Windows(windows::WindowsDesired),
}

impl Desired {
    pub fn of(
        inv: &Inventory,
        host: &Host,
        node: &Node,
        r: &Renderer,
        uploads: &windows::Uploads,
    ) -> Result<Desired, DesiredError> {
        Ok(match host.os {
            Os::Linux => Desired::Linux(linux::LinuxDesired::of(r, host, node)),
            Os::Windows => Desired::Windows(windows::WindowsDesired::of(inv, host, node, uploads)?),
        })
    }

    /// Hand this host's [`NodeOps`] to `w`.
    pub fn ops<'a, W: WithOps<'a>>(
        &'a self,
        r: &'a Renderer,
        host: &'a Host,
        node: &'a Node,
        w: W,
    ) -> W::Out {
        match self {
            Desired::Linux(d) => w.with(linux::LinuxOps::new(r, host, node, d)),
            Desired::Windows(d) => w.with(windows::WindowsOps::new(r, node, d)),
        }
    }
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

/// The script a host would get on a freshly installed machine (`render`).
pub fn fresh_script(
    r: &Renderer,
    inv: &Inventory,
    host: &Host,
    node: &Node,
) -> Result<String, DesiredError> {
    struct Fresh;
    impl<'a> WithOps<'a> for Fresh {
        type Out = Result<String, DesiredError>;
        fn with<O: NodeOps + 'a>(self, ops: O) -> Self::Out {
            let d = ops
                .diff(&ops.fresh())
                .map_err(|e| DesiredError(e.to_string()))?;
            let actions: Vec<_> = d.actions().collect();
            Ok(ops.script(&actions, None))
        }
    }
    let desired = Desired::of(inv, host, node, r, &windows::Uploads::default())?;
    desired.ops(r, host, node, Fresh)
}
