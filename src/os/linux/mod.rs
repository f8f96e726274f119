//! Linux nodes over SSH: a route to every other node's pod CIDR via that
//! node's address (marked `proto 198`), IP forwarding, and `boot.sh` with a
//! systemd unit that restores both at boot.

pub mod action;
pub mod diff;
pub mod facts;
pub mod script;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use minijinja::{Value, context};

pub use action::Action;
pub use facts::{LinuxFacts, Route};

use super::ops::NodeOps;
use crate::alloc::{Node, NodeRecord};
use crate::diff::{Conflict, Diff};
use crate::inventory::{Host, KubeVersion, LinuxSettings, Role};
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
    /// `kept`: kwinctl routes on the host that this run leaves alone (see
    /// `alloc::Frozen`): boot.sh restores them too, as they are. `settings`:
    /// the host's `linux:` block (how long boot.sh waits for its network).
    pub fn of(
        r: &Renderer,
        node: &Node,
        kept: &BTreeMap<Ipv4Net, Ipv4Addr>,
        settings: &LinuxSettings,
    ) -> LinuxDesired {
        LinuxDesired {
            boot_script: script::boot_script(r, node, kept, settings),
            unit: script::unit(r, settings),
        }
    }
}

pub struct LinuxOps<'a> {
    r: &'a Renderer,
    /// Control plane, checking: also list the nodes with kubectl.
    ask_nodes: bool,
    settings: LinuxSettings,
}

impl<'a> LinuxOps<'a> {
    pub fn new(r: &'a Renderer, host: &Host) -> Self {
        LinuxOps {
            r,
            ask_nodes: host.role == Role::ControlPlane,
            settings: host.linux,
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
    fn record(&self, f: &LinuxFacts, _cluster_cidr: Ipv4Net) -> NodeRecord {
        NodeRecord {
            pod_cidr: f.recorded_pod_cidr,
            cluster: f.recorded_cluster.clone(),
            routes: f
                .routes
                .iter()
                .filter(|r| r.owned())
                .map(|r| (r.dst, r.via))
                .collect(),
            generation: f.cluster_gen,
            registry: f.registry.clone(),
            lock_host: f.recorded_lock_host.clone(),
        }
    }
    fn diff(&self, node: &Node, f: &LinuxFacts) -> Result<Diff<Action>, Conflict> {
        let kept = diff::kept_routes(node, f);
        diff::diff_linux(
            node,
            &LinuxDesired::of(self.r, node, &kept, &self.settings),
            f,
        )
    }
    fn reset(&self, _node: &Node, f: &LinuxFacts) -> Diff<Action> {
        diff::diff_reset_linux(f)
    }
    fn script(&self, node: &Node, actions: &[&Action], then_probe: Option<&[Ipv4Addr]>) -> String {
        script::script(
            self.r,
            &node.name,
            &node.cluster.name,
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
    fn api_server(&self, f: &LinuxFacts) -> Option<KubeVersion> {
        f.api_server.filter(|_| self.ask_nodes)
    }
    fn peer_change(&self, a: &Action) -> bool {
        matches!(
            a,
            Action::AddRoute { .. }
                | Action::ReplaceRoute { .. }
                | Action::DelRoute { .. }
                | Action::WriteBootScript { .. }
        )
    }
    fn fresh(&self, _node: &Node) -> LinuxFacts {
        LinuxFacts::fresh(true)
    }
    fn rewrites(&self, a: &Action) -> Option<(String, String)> {
        match a {
            Action::WriteBootScript { content } => {
                Some(("/etc/kwinctl/boot.sh".into(), content.clone()))
            }
            Action::InstallUnit { content, .. } => Some((
                "/etc/systemd/system/kwinctl-boot.service".into(),
                content.clone(),
            )),
            _ => None,
        }
    }
    fn read_files(&self, paths: &[String]) -> String {
        self.r.render("linux/read_files.sh", context! { paths })
    }
}
