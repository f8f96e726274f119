//! The seam between the runner and an OS: [`NodeOps`], which each OS
//! folder implements. It depends on no OS (the OS folders depend on it).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::alloc::{Node, NodeRecord};
use crate::diff::{Conflict, Describe, Diff};
use crate::inventory::{ContainerdVersion, KubeVersion};
use crate::probe::{FactsError, Reach};
use crate::transport::Output;
use crate::verify::K8sView;

/// What differs between operating systems in a host's run; the flow itself
/// (probe every node → allocate → diff → apply + re-probe → verify) is the
/// runner's. Ops are made before the allocation (the probe does not depend
/// on it); what does takes the host's [`Node`].
pub trait NodeOps: Send + Sync {
    type Facts: Send + Sync;
    type Action: Describe + Serialize + Send + Sync;
    /// The read-only probe; `reach` lists addresses to ping.
    fn probe(&self, reach: &[Ipv4Addr]) -> String;
    fn parse(&self, o: &Output) -> Result<Self::Facts, FactsError>;
    /// What the node records about itself: its pod CIDR, its cluster and
    /// kwinctl's routes (inside `cluster_cidr`).
    fn record(&self, f: &Self::Facts, cluster_cidr: Ipv4Net) -> NodeRecord;
    fn diff(&self, node: &Node, f: &Self::Facts) -> Result<Diff<Self::Action>, Conflict>;
    /// `reset`: what undoes kwinctl's work on the host.
    fn reset(&self, node: &Node, f: &Self::Facts) -> Diff<Self::Action>;
    /// The actions as one script, then — when `then_probe` is given — the
    /// probe (pinging those addresses), so applying and re-probing is one
    /// remote call.
    fn script(
        &self,
        node: &Node,
        actions: &[&Self::Action],
        then_probe: Option<&[Ipv4Addr]>,
    ) -> String;
    fn reach<'f>(&self, f: &'f Self::Facts) -> &'f BTreeMap<Ipv4Addr, Reach>;
    /// When the host last started (to tell that a restart happened).
    fn boot_id(&self, _f: &Self::Facts) -> Option<String> {
        None
    }
    /// A script that restarts the host a few seconds after it returns
    /// (`up --reboot`), where kwinctl restarts hosts of this OS.
    fn reboot_script(&self) -> Option<String> {
        None
    }
    /// The control plane's kubectl view, when this node was asked for it.
    fn k8s(&self, _f: &Self::Facts) -> K8sView {
        K8sView::NotAsked
    }
    /// verify's check of who the node is to the cluster (its kubelet's
    /// client certificate), when it has an identity of its own; `ca`: the
    /// run's cluster CA, when the cluster joins nodes with their own.
    fn identity(
        &self,
        _node: &Node,
        _f: &Self::Facts,
        _ca: Option<&crate::identity::issuer::Anchor>,
    ) -> Option<crate::verify::Check> {
        None
    }
    /// The release of the kubelet this node runs (its binary's
    /// `--version`), when one is installed and running: what an upgrade
    /// starts from.
    fn kubelet_release(&self, _f: &Self::Facts) -> Option<KubeVersion> {
        None
    }
    /// The release of the container runtime this node runs (containerd's
    /// `--version`), when kwinctl installs it and it is running.
    fn runtime_release(&self, _f: &Self::Facts) -> Option<ContainerdVersion> {
        None
    }
    /// With that view: kube-apiserver's release as the control plane's
    /// kubectl reports it.
    fn api_server(&self, _f: &Self::Facts) -> Option<KubeVersion> {
        None
    }
    /// Whether the node must join the cluster with an identity of its own
    /// (src/join/): why, in words; `None` when it holds a valid one or the
    /// cluster does not join nodes that way. `ca`: the run's cluster CA (a
    /// certificate it did not sign is another cluster's).
    fn must_join(
        &self,
        _f: &Self::Facts,
        _ca: Option<&crate::identity::issuer::Anchor>,
    ) -> Option<String> {
        None
    }
    /// A joining node's two scripts: before the converge, the bootstrap
    /// kubeconfig `conf` placed and any credential that is not the node's
    /// own removed; after it, the kubelet bootstrapped (started anew if it
    /// has no certificate yet, a bounded wait for it) and the bootstrap
    /// kubeconfig removed.
    fn join_scripts(&self, _node: &Node, _conf: &[u8]) -> Option<(String, String)> {
        None
    }
    /// The node whose kube-proxy gets a credential of its own (src/join/
    /// proxy.rs), by its node name in lower case; `None` when the cluster
    /// does not give nodes their own identity.
    fn proxy_node(&self) -> Option<String> {
        None
    }
    /// A script placing kube-proxy's kubeconfig `conf` when the node does
    /// not hold exactly it; `None` when nothing is to change.
    fn proxy_script(&self, _node: &Node, _f: &Self::Facts, _conf: &[u8]) -> Option<String> {
        None
    }
    /// An upgrade's rollback: a script putting back the kubelet and
    /// kube-proxy binaries of release `to` that the upgrade replaced (kept
    /// beside the new ones) and starting their services, where this OS
    /// keeps them.
    fn rollback_script(&self, _node: &Node, _to: KubeVersion) -> Option<String> {
        None
    }
    /// Whether an action only keeps routes to other nodes right (what
    /// `up --limit … --with-peer-routes` may do on the hosts outside the
    /// limit).
    fn peer_change(&self, a: &Self::Action) -> bool;
    /// A freshly installed host of this OS: what `render` diffs against.
    fn fresh(&self, node: &Node) -> Self::Facts;
    /// How long an action may take when that is longer than a remote call
    /// usually does (a role install, an image pull, a download): it then
    /// runs in a call of its own with that budget (or `--timeout`, if
    /// longer).
    fn budget(&self, _a: &Self::Action) -> Option<std::time::Duration> {
        None
    }
    /// An action that cuts the host's network while it runs (on Windows,
    /// the first HNS network, which moves the node's address onto the new
    /// external vSwitch): it runs detached from the connection, its result
    /// recorded on the host under `token`, and kwinctl reads that result
    /// after reconnecting (`run/detach.rs`). `None`: it runs in the script.
    fn detached(&self, _node: &Node, _a: &Self::Action, _token: &str) -> Option<Detached> {
        None
    }
    /// A file an action writes whole: its path on the host and the content
    /// kwinctl would write (`plan` shows the difference from the host's).
    fn rewrites(&self, _a: &Self::Action) -> Option<(String, String)> {
        None
    }
    /// The file an action places from the operator's machine: pushed
    /// (`src/transfer/`, to [`NodeOps::push_target`]) before the script
    /// that places it runs.
    fn pushes(&self, _a: &Self::Action) -> Option<std::sync::Arc<crate::transfer::Local>> {
        None
    }
    /// Where this OS keeps pushed files and the scripts that receive them.
    fn push_target(&self) -> crate::transfer::Target {
        crate::transfer::Target::Linux
    }
    /// A read-only script printing each file's content as a `KWC` line
    /// (see `wire::file_contents`).
    fn read_files(&self, paths: &[String]) -> String;
}

/// The scripts of an action run detached from the connection
/// ([`NodeOps::detached`]).
pub struct Detached {
    /// Starts the action on the host and returns at once: prints
    /// `KWD <token> started`, or the action's failure (`KWX`/`KWE`).
    pub start: String,
    /// Prints the action's result (`KWX`/`KWE` lines, then `KWD end`) once
    /// it is recorded, else `KWD <token> pending` (still running) or
    /// `KWD <token> missing` (never started).
    pub result: String,
    /// What the operator checks on the host when no result comes.
    pub check: String,
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
