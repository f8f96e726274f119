//! Windows Server nodes over WinRM (or OpenSSH): the seeds' steps — RRAS,
//! an internal switch for kube-proxy, a transparent docker network on the
//! pod CIDR with its gateway address, persistent routes to every other pod
//! CIDR, kubelet and kube-proxy as services — each an action with its probe
//! fact, after a preflight.

pub mod action;
pub mod boot;
pub mod cmdline;
pub mod desired;
pub mod detach;
pub mod examples;
pub use examples::example_node;
pub mod facts;
pub mod files;
pub mod firewall;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod hns;
mod items;
pub mod join;
pub mod k8s;
pub mod l2bridge;
pub mod leftovers;
pub mod preflight;
mod refs;
pub mod script;
pub mod service;
pub mod transparent;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use minijinja::Value;
use serde::Serialize;

pub use action::WinAction;
pub use desired::{FileSource, Uploads, WinFile, WinService};
pub use facts::WindowsFacts;

use super::ops::NodeOps;
use crate::alloc::{Node, NodeRecord};
use crate::diff::{Conflict, Diff};
use crate::identity::issuer::Anchor;
use crate::inventory::{ContainerdVersion, KubeVersion};
use crate::probe::{FactsError, Reach};
use crate::render::Renderer;
use crate::transport::Output;
use crate::verify::Check;
use script::{ScriptHost, WinProbe};

/// Where kwinctl keeps kubelet, kube-proxy and its own files on Windows.
pub const WIN_DIR: &str = r"C:\k";
/// kwinctl's own folder on a node.
pub const KWINCTL_DIR: &str = r"C:\k\kwinctl";
/// Where a node records its pod CIDR.
pub const POD_CIDR_FILE: &str = r"C:\k\kwinctl\pod-cidr.txt";
/// Where a node records its cluster ("name id").
pub const CLUSTER_FILE: &str = r"C:\k\kwinctl\cluster.txt";
pub use join::{BOOTSTRAP_CONF, KUBE_PROXY_CONF, KUBECONFIG, KUBELET_CONF};
pub const KUBE_PROXY_SWITCH: &str = "KubeProxySwitch";
pub const DEFAULT_NETWORK: &str = "kwinctl";
/// Where kubelet and kube-proxy log (klog's `--log-dir`, and the start
/// script's redirection for releases run by a scheduled task).
pub const LOG_DIR: &str = r"C:\k\logs";
/// kube-log-runner (windows.binaries.kube-log-runner): the log wrapper of
/// kubelet and kube-proxy from Kubernetes 1.26 on.
pub const LOG_RUNNER_EXE: &str = r"C:\k\kube-log-runner.exe";
/// The Task Scheduler folder of kwinctl's tasks.
pub const TASK_PATH: &str = r"\kwinctl\";

/// Constants the Windows templates share.
pub fn template_globals() -> Vec<(&'static str, Value)> {
    vec![
        ("kube_proxy_switch", Value::from(KUBE_PROXY_SWITCH)),
        ("kwinctl_dir", Value::from(KWINCTL_DIR)),
        ("pod_cidr_file", Value::from(POD_CIDR_FILE)),
        ("cluster_file", Value::from(CLUSTER_FILE)),
        ("kubelet_client_file", Value::from(join::CLIENT_CERT)),
        ("log_dir", Value::from(LOG_DIR)),
        ("task_path", Value::from(TASK_PATH)),
        ("containerd_dir", Value::from(l2bridge::CONTAINERD_DIR)),
        ("containerd_exe", Value::from(l2bridge::CONTAINERD_EXE)),
        ("cni_conf_dir", Value::from(l2bridge::CNI_CONF_DIR)),
    ]
}

/// What a Windows node should have, beyond its pod CIDR and routes (it
/// does not depend on them: it is known before any node is asked).
#[derive(Debug, Clone, Serialize)]
pub struct WindowsDesired {
    /// The Kubernetes node name (`Host::node_name`).
    pub node_name: String,
    /// How long its kubelet client certificate must still be valid for
    /// `verify` to pass (`windows.cert_margin_days`).
    pub cert_margin: std::time::Duration,
    pub identity: crate::inventory::Identity, // cluster.identity, resolved
    pub network: String,
    /// The routable adapter's name, when the inventory names it; otherwise
    /// the adapter holding the node's address.
    pub adapter: Option<String>,
    /// Sources allowed to reach kube-proxy.exe besides the cluster
    /// (`windows.nodeport_sources`; both profiles' firewall rules take it).
    pub nodeport_sources: Vec<ipnet::Ipv4Net>,
    /// Where the API server reaches the kubelet from besides the nodes
    /// (`cluster.api_server_sources`).
    pub api_server_sources: Vec<ipnet::Ipv4Net>,
    /// The release the binaries must be.
    pub kubernetes_version: KubeVersion,
    pub pause_image: String,
    /// Whether the inventory named the pause image (else it is the table's
    /// default for the release).
    pub pause_image_given: bool,
    pub files: Vec<WinFile>,
    /// The binaries the services need, whether kwinctl places them or not.
    pub required_files: Vec<String>,
    pub services: Vec<WinService>,
    /// Said in every plan of this host.
    pub notes: Vec<String>,
    /// The profile, with its own part of the desired state.
    pub profile: ProfileDesired,
}

impl WindowsDesired {
    /// The paths this run puts on the host: the files, and the members of
    /// the archives it unpacks (l2bridge).
    pub fn placed(&self) -> Vec<&str> {
        let mut placed: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        if let Some(l2) = self.profile.l2() {
            for a in [&l2.containerd, &l2.cni_plugins].into_iter().flatten() {
                placed.extend(a.members.iter().map(String::as_str));
            }
        }
        placed
    }
}

/// The Windows profile of a node, carrying that profile's own desired state.
#[derive(Debug, Clone, Serialize)]
pub enum ProfileDesired {
    /// The seeds' transparent Docker network (Docker era).
    Transparent(transparent::desired::TransparentDesired),
    /// containerd, HNS and win-bridge (Kubernetes 1.24+).
    L2Bridge(Box<l2bridge::L2Desired>),
}

impl ProfileDesired {
    /// What the shared desired state takes from the profile.
    pub fn shape(kind: k8s::Profile) -> desired::Shape {
        match kind {
            k8s::Profile::Transparent => transparent::desired::shape(),
            k8s::Profile::L2Bridge => l2bridge::desired::shape(),
        }
    }

    /// The profile's own part of a node's desired state.
    pub fn of(
        kind: k8s::Profile,
        inv: &crate::inventory::Inventory,
        host: &crate::inventory::Host,
        uploads: &Uploads,
        pause_image: &str,
    ) -> Result<ProfileDesired, super::ops::DesiredError> {
        Ok(match kind {
            k8s::Profile::Transparent => {
                ProfileDesired::Transparent(transparent::desired::of(host))
            }
            k8s::Profile::L2Bridge => ProfileDesired::L2Bridge(Box::new(l2bridge::desired::of(
                inv,
                host,
                uploads,
                pause_image,
            )?)),
        })
    }

    /// The files the profile needs, placed by kwinctl or not.
    pub fn required(&self) -> &[String] {
        match self {
            ProfileDesired::Transparent(_) => &[],
            ProfileDesired::L2Bridge(l2) => &l2.required,
        }
    }

    /// The health endpoints the probe of a profile's node reads (verify).
    pub fn health(kind: k8s::Profile) -> Vec<u16> {
        match kind {
            k8s::Profile::Transparent => vec![],
            k8s::Profile::L2Bridge => {
                vec![l2bridge::KUBELET_HEALTHZ, l2bridge::KUBE_PROXY_HEALTHZ]
            }
        }
    }

    /// The inventory's word for this profile.
    pub fn kind(&self) -> k8s::Profile {
        match self {
            ProfileDesired::Transparent(_) => k8s::Profile::Transparent,
            ProfileDesired::L2Bridge(_) => k8s::Profile::L2Bridge,
        }
    }

    /// The l2bridge profile's own part, on that profile.
    pub fn l2(&self) -> Option<&l2bridge::L2Desired> {
        match self {
            ProfileDesired::L2Bridge(l2) => Some(l2),
            ProfileDesired::Transparent(_) => None,
        }
    }

    /// The transparent profile's own part, on that profile.
    pub fn transparent(&self) -> Option<&transparent::desired::TransparentDesired> {
        match self {
            ProfileDesired::Transparent(t) => Some(t),
            ProfileDesired::L2Bridge(_) => None,
        }
    }
}

/// One of each profile-only action (after the shared ones in
/// `examples.rs`), for the contract, grammar and snapshot tests.
fn profile_examples() -> Vec<WinAction> {
    l2bridge::examples()
}

pub struct WindowsOps<'a> {
    r: &'a Renderer,
    desired: &'a WindowsDesired,
    /// The files, services and tasks the probe reports on.
    files: Vec<String>,
    services: Vec<String>,
    tasks: Vec<String>,
    /// kwinctl's own folders, whose presence the probe reports.
    folders: Vec<String>,
    /// The binaries whose `--version` the probe reads: kubelet, kube-proxy
    /// and containerd (not the shim, ctr or the CNI plugins).
    binaries: Vec<String>,
}

impl<'a> WindowsOps<'a> {
    pub fn new(r: &'a Renderer, desired: &'a WindowsDesired) -> Self {
        let mut files: Vec<String> = desired.files.iter().map(|f| f.path.clone()).collect();
        if let Some(l2) = desired.profile.l2() {
            files.extend(l2.files.iter().map(|f| f.path.clone()));
            files.push(l2bridge::CNI_CONF.into());
            for a in [&l2.containerd, &l2.cni_plugins].into_iter().flatten() {
                files.push(a.marker.clone());
                files.push(a.archive.path.clone());
            }
        }
        for f in &desired.required_files {
            if !files.contains(f) {
                files.push(f.clone());
            }
        }
        files.extend(join::CREDENTIAL_FILES.iter().map(|f| f.to_string()));
        let services: Vec<String> = desired.services.iter().map(|s| s.name.clone()).collect();
        let mut tasks = services.clone();
        tasks.push(boot::BOOT_TASK.to_string());
        tasks.push(detach::DETACH_TASK.to_string());
        let versioned = |p: &&String| {
            let p = p.to_ascii_lowercase();
            ["kubelet.exe", "kube-proxy.exe", "containerd.exe"]
                .iter()
                .any(|b| p.ends_with(&format!(r"\{b}")))
        };
        let binaries = desired
            .required_files
            .iter()
            .filter(versioned)
            .cloned()
            .collect();
        WindowsOps {
            r,
            desired,
            files,
            services,
            tasks,
            folders: leftovers::folders(),
            binaries,
        }
    }

    /// The host a script is for.
    fn script_host<'n>(&'n self, node: &'n Node) -> ScriptHost<'n> {
        ScriptHost {
            name: &node.name,
            cluster: &node.cluster.name,
            address: node.address,
            // l2bridge: windows.adapter names the card under the vSwitch;
            // routes go on the adapter holding the address (its host vNIC)
            adapter: self
                .desired
                .adapter
                .as_deref()
                .filter(|_| self.desired.profile.l2().is_none()),
        }
    }

    fn probe_of<'p>(&'p self, reach: &'p [Ipv4Addr]) -> WinProbe<'p> {
        WinProbe {
            files: &self.files,
            services: &self.services,
            tasks: &self.tasks,
            folders: &self.folders,
            binaries: &self.binaries,
            images: std::slice::from_ref(&self.desired.pause_image),
            reach,
            profile: self.desired.profile.kind(),
        }
    }
}

impl NodeOps for WindowsOps<'_> {
    type Facts = WindowsFacts;
    type Action = WinAction;
    fn probe(&self, reach: &[Ipv4Addr]) -> String {
        script::probe(self.r, &self.probe_of(reach))
    }
    fn parse(&self, o: &Output) -> Result<WindowsFacts, FactsError> {
        WindowsFacts::parse_output(&o.stdout, &o.stderr)
    }
    fn record(&self, f: &WindowsFacts, cluster_cidr: Ipv4Net) -> NodeRecord {
        NodeRecord {
            pod_cidr: f.pod_cidr,
            cluster: f.recorded_cluster(),
            // Windows routes carry no owner mark: kwinctl's are those inside
            // the cluster CIDR (what reset removes).
            routes: f
                .routes
                .iter()
                .filter(|r| cluster_cidr.contains(&r.dst))
                .map(|r| (r.dst, r.via))
                .collect(),
            generation: 0,
            registry: Vec::new(),
            lock_host: f.recorded_lock_host(),
        }
    }
    fn diff(&self, node: &Node, f: &WindowsFacts) -> Result<Diff<WinAction>, Conflict> {
        match &self.desired.profile {
            ProfileDesired::Transparent(_) => transparent::diff_windows(node, self.desired, f),
            ProfileDesired::L2Bridge(l2) => l2bridge::diff::diff(node, self.desired, l2, f),
        }
    }
    fn reset(&self, node: &Node, f: &WindowsFacts) -> Diff<WinAction> {
        match &self.desired.profile {
            ProfileDesired::Transparent(_) => {
                transparent::diff_reset_windows(node, self.desired, f)
            }
            ProfileDesired::L2Bridge(_) => l2bridge::diff::reset(node, self.desired, f),
        }
    }
    fn script(
        &self,
        node: &Node,
        actions: &[&WinAction],
        then_probe: Option<&[Ipv4Addr]>,
    ) -> String {
        let host = self.script_host(node);
        let probe = then_probe.map(|reach| self.probe_of(reach));
        script::script(self.r, &host, actions, probe.as_ref())
    }
    fn detached(&self, node: &Node, a: &WinAction, token: &str) -> Option<crate::os::Detached> {
        if !detach::cuts_connection(a) {
            return None;
        }
        let host = self.script_host(node);
        Some(detach::scripts(self.r, &host, a, token))
    }
    fn reach<'f>(&self, f: &'f WindowsFacts) -> &'f BTreeMap<Ipv4Addr, Reach> {
        &f.reach
    }
    fn identity(&self, node: &Node, f: &WindowsFacts, ca: Option<&Anchor>) -> Option<Check> {
        join::identity(self.desired, node, f, ca)
    }
    fn must_join(&self, f: &WindowsFacts, ca: Option<&Anchor>) -> Option<String> {
        join::must_join(self.desired, f, ca)
    }
    fn join_scripts(&self, node: &Node, conf: &[u8]) -> Option<(String, String)> {
        join::scripts(self, node, conf)
    }
    fn proxy_node(&self) -> Option<String> {
        join::proxy_node(self.desired)
    }
    fn proxy_script(&self, node: &Node, f: &WindowsFacts, conf: &[u8]) -> Option<String> {
        join::proxy_script(self, node, f, conf)
    }
    fn peer_change(&self, a: &WinAction) -> bool {
        matches!(a, WinAction::AddRoute { .. } | WinAction::DelRoute { .. })
    }
    fn budget(&self, a: &WinAction) -> Option<std::time::Duration> {
        action::budget(a)
    }
    fn pushes(&self, a: &WinAction) -> Option<std::sync::Arc<crate::transfer::Local>> {
        action::pushes(a)
    }
    fn push_target(&self) -> crate::transfer::Target {
        crate::transfer::Target::Windows
    }
    fn fresh(&self, node: &Node) -> WindowsFacts {
        let v = self.desired.kubernetes_version;
        let mut facts = WindowsFacts::fresh(
            node.address,
            self.desired.adapter.as_deref(),
            // (the card a transparent network takes: none on l2bridge)
            (self.desired.profile.transparent()).and_then(|t| t.transparent_adapter.as_deref()),
            k8s::fresh_build(v.minor, self.desired.profile.kind()),
        );
        // Binaries kwinctl does not place are assumed to be there already,
        // of the declared release.
        let placed = self.desired.placed();
        for req in &self.desired.required_files {
            if !placed.contains(&req.as_str()) {
                facts.files.push(facts::FileFact {
                    path: req.clone(),
                    sha256: String::new(),
                });
                let output = match self.desired.profile.l2() {
                    Some(l2) if req == l2bridge::CONTAINERD_EXE => format!(
                        "containerd github.com/containerd/containerd v{} 0",
                        l2.containerd_version
                    ),
                    _ => format!("Kubernetes v{v}"),
                };
                facts.versions.push(facts::VersionFact {
                    path: req.clone(),
                    output,
                });
            }
        }
        facts
    }
    fn rewrites(&self, a: &WinAction) -> Option<(String, String)> {
        match a {
            WinAction::InstallTask { service, .. } => Some((
                format!(r"{KWINCTL_DIR}\{}-start.ps1", service.name),
                script::start_script(self.r, service),
            )),
            WinAction::InstallBootTask { boot } => Some((
                format!(r"{KWINCTL_DIR}\{}-start.ps1", boot::BOOT_TASK),
                script::boot_script(self.r, boot),
            )),
            _ => None,
        }
    }
    fn kubelet_release(&self, f: &WindowsFacts) -> Option<KubeVersion> {
        let named = |n: &str| n.eq_ignore_ascii_case("kubelet");
        let running = f
            .services
            .iter()
            .any(|s| named(&s.name) && s.status == "Running")
            || f.tasks.iter().any(|t| named(&t.name) && t.running);
        let exe = f
            .versions
            .iter()
            .find(|v| v.path.to_ascii_lowercase().ends_with(r"\kubelet.exe"))?;
        running
            .then(|| KubeVersion::of_binary(&exe.output))
            .flatten()
    }
    fn runtime_release(&self, f: &WindowsFacts) -> Option<ContainerdVersion> {
        let running = f
            .services
            .iter()
            .any(|s| s.name.eq_ignore_ascii_case("containerd") && s.status == "Running");
        let exe = f
            .versions
            .iter()
            .find(|v| v.path.to_ascii_lowercase().ends_with(r"\containerd.exe"))?;
        running
            .then(|| ContainerdVersion::of_binary(&exe.output))
            .flatten()
    }
    fn boot_id(&self, f: &WindowsFacts) -> Option<String> {
        (!f.boot_time.is_empty()).then(|| f.boot_time.clone())
    }
    fn reboot_script(&self) -> Option<String> {
        Some(script::restart(self.r))
    }
    fn rollback_script(&self, node: &Node, to: KubeVersion) -> Option<String> {
        let back = WinAction::RestorePrevious {
            paths: ["kubelet.exe", "kube-proxy.exe"]
                .iter()
                .map(|b| format!(r"{WIN_DIR}\{b}"))
                .collect(),
            version: to.to_string(),
            version_regex: to.version_line_regex(),
        };
        Some(self.script(node, &[&back], None))
    }
    fn read_files(&self, paths: &[String]) -> String {
        script::read_files(self.r, paths)
    }
}
