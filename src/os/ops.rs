//! The seam between the runner and an OS: [`NodeOps`], which each OS
//! folder implements. It depends on no OS (the OS folders depend on it).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::diff::{Conflict, Describe, Diff};
use crate::probe::{FactsError, Reach};
use crate::transport::Output;
use crate::verify::K8sView;

/// What differs between operating systems in a host's run; the flow itself
/// (probe → diff → apply + re-probe → verify) is the runner's.
pub trait NodeOps: Send + Sync {
    type Facts: Send + Sync;
    type Action: Describe + Serialize + Send + Sync;
    /// The read-only probe; `reach` lists addresses to ping.
    fn probe(&self, reach: &[Ipv4Addr]) -> String;
    fn parse(&self, o: &Output) -> Result<Self::Facts, FactsError>;
    fn diff(&self, f: &Self::Facts) -> Result<Diff<Self::Action>, Conflict>;
    /// `reset`: what undoes kwinctl's work on the host.
    fn reset(&self, f: &Self::Facts) -> Diff<Self::Action>;
    /// The actions as one script, then — when `then_probe` is given — the
    /// probe (pinging those addresses), so applying and re-probing is one
    /// remote call.
    fn script(&self, actions: &[&Self::Action], then_probe: Option<&[Ipv4Addr]>) -> String;
    fn reach<'f>(&self, f: &'f Self::Facts) -> &'f BTreeMap<Ipv4Addr, Reach>;
    /// The control plane's kubectl view, when this node was asked for it.
    fn k8s(&self, _f: &Self::Facts) -> K8sView {
        K8sView::NotAsked
    }
    /// A freshly installed host of this OS: what `render` diffs against.
    fn fresh(&self) -> Self::Facts;
}

/// The desired state cannot be computed from the inventory.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DesiredError(pub String);

/// Something to do with a host's [`NodeOps`], whatever its OS.
pub trait WithOps<'a> {
    type Out;
    fn with<O: NodeOps + 'a>(self, ops: O) -> Self::Out;
}
