//! Linux nodes over SSH: a route to every other node's pod CIDR via that
//! node's address (marked `proto 198`), IP forwarding, and `boot.sh` with a
//! systemd unit that restores both at boot.

pub mod action;
pub mod diff;
pub mod facts;
pub mod script;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use minijinja::Value;

pub use action::Action;
pub use facts::{LinuxFacts, Route};

use super::ops::NodeOps;
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::inventory::{Host, Role};
use crate::probe::{FactsError, Reach};
use crate::render::Renderer;
use crate::transport::Output;
use crate::verify::K8sView;

/// The route protocol number kwinctl marks its Linux routes with
/// (`ip route ... proto 198`), so that it only ever removes its own.
pub const ROUTE_PROTO: u8 = 198;
/// Where a node records its pod CIDR.
pub const POD_CIDR_FILE: &str = "/etc/kwinctl/pod-cidr";

/// Constants the Linux templates share.
pub fn template_globals() -> Vec<(&'static str, Value)> {
    vec![("route_proto", Value::from(ROUTE_PROTO))]
}

/// What a Linux node should have, beyond its [`Node`].
#[derive(Debug, Clone)]
pub struct LinuxDesired {
    /// `/etc/kwinctl/boot.sh`.
    pub boot_script: String,
    /// `kwinctl-boot.service`.
    pub unit: String,
}

impl LinuxDesired {
    pub fn of(r: &Renderer, host: &Host, node: &Node) -> LinuxDesired {
        LinuxDesired {
            boot_script: script::boot_script(r, node, &host.linux),
            unit: script::unit(r, &host.linux),
        }
    }
}

pub struct LinuxOps<'a> {
    r: &'a Renderer,
    node: &'a Node,
    desired: &'a LinuxDesired,
    /// Control plane, checking: also list the nodes with kubectl.
    ask_nodes: bool,
}

impl<'a> LinuxOps<'a> {
    pub fn new(r: &'a Renderer, host: &Host, node: &'a Node, desired: &'a LinuxDesired) -> Self {
        LinuxOps {
            r,
            node,
            desired,
            ask_nodes: host.role == Role::ControlPlane,
        }
    }
}

impl NodeOps for LinuxOps<'_> {
    type Facts = LinuxFacts;
    type Action = Action;
    fn probe(&self, reach: &[Ipv4Addr]) -> String {
        script::probe(self.r, reach, self.ask_nodes && !reach.is_empty())
    }
    fn parse(&self, o: &Output) -> Result<LinuxFacts, FactsError> {
        LinuxFacts::parse(&o.stdout, &o.stderr)
    }
    fn diff(&self, f: &LinuxFacts) -> Result<Diff<Action>, Conflict> {
        diff::diff_linux(self.node, self.desired, f)
    }
    fn reset(&self, f: &LinuxFacts) -> Diff<Action> {
        diff::diff_reset_linux(f)
    }
    fn script(&self, actions: &[&Action], then_probe: Option<&[Ipv4Addr]>) -> String {
        script::script(
            self.r,
            &self.node.name,
            &self.node.cluster_name,
            actions,
            then_probe.map(|reach| (reach, self.ask_nodes && !reach.is_empty())),
        )
    }
    fn reach<'f>(&self, f: &'f LinuxFacts) -> &'f BTreeMap<Ipv4Addr, Reach> {
        &f.reach
    }
    fn k8s(&self, f: &LinuxFacts) -> K8sView {
        match (&f.k8s_nodes, self.ask_nodes) {
            (_, false) => K8sView::NotAsked,
            (None, true) => K8sView::NoKubectl,
            (Some(Err(_)), true) => K8sView::KubectlFailed,
            (Some(Ok(n)), true) => K8sView::Nodes(n.clone()),
        }
    }
    fn fresh(&self) -> LinuxFacts {
        LinuxFacts::fresh(true)
    }
}
