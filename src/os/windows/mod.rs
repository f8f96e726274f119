//! Windows Server nodes over WinRM (or OpenSSH): the seeds' steps — RRAS,
//! an internal switch for kube-proxy, a transparent docker network on the
//! pod CIDR with its gateway address, persistent routes to every other pod
//! CIDR, kubelet and kube-proxy as services — each an action with its probe
//! fact, after a preflight.

pub mod action;
pub mod boot;
pub mod cmdline;
pub mod desired;
pub mod diff;
pub mod facts;
pub mod firewall;
mod items;
pub mod k8s;
pub mod l2bridge;
pub mod l2diff;
pub mod nic;
pub mod preflight;
pub mod script;
pub mod service;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use minijinja::Value;

pub use action::WinAction;
pub use desired::{FileSource, Uploads, WinFile, WinService, WindowsDesired};
pub use facts::WindowsFacts;

use super::ops::NodeOps;
use crate::alloc::{Node, NodeRecord};
use crate::diff::{Conflict, Diff};
use crate::probe::{FactsError, Reach};
use crate::render::Renderer;
use crate::transport::Output;
use script::{ScriptHost, WinProbe};

/// Where kwinctl keeps kubelet, kube-proxy and its own files on Windows.
pub const WIN_DIR: &str = r"C:\k";
/// kwinctl's own folder on a node.
pub const KWINCTL_DIR: &str = r"C:\k\kwinctl";
/// Where a node records its pod CIDR.
pub const POD_CIDR_FILE: &str = r"C:\k\kwinctl\pod-cidr.txt";
/// Where a node records its cluster ("name id").
pub const CLUSTER_FILE: &str = r"C:\k\kwinctl\cluster.txt";
/// Where the kubeconfig goes (a secret: run records name it, never show it).
pub const KUBECONFIG: &str = r"C:\k\config";
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
        ("log_dir", Value::from(LOG_DIR)),
        ("task_path", Value::from(TASK_PATH)),
        ("containerd_dir", Value::from(l2bridge::CONTAINERD_DIR)),
        ("containerd_exe", Value::from(l2bridge::CONTAINERD_EXE)),
        ("cni_conf_dir", Value::from(l2bridge::CNI_CONF_DIR)),
    ]
}

pub struct WindowsOps<'a> {
    r: &'a Renderer,
    desired: &'a WindowsDesired,
    /// The files, services and tasks the probe reports on.
    files: Vec<String>,
    services: Vec<String>,
    tasks: Vec<String>,
    /// The binaries whose `--version` the probe reads: kubelet, kube-proxy
    /// and containerd (not the shim, ctr or the CNI plugins).
    binaries: Vec<String>,
}

impl<'a> WindowsOps<'a> {
    pub fn new(r: &'a Renderer, desired: &'a WindowsDesired) -> Self {
        let mut files: Vec<String> = desired.files.iter().map(|f| f.path.clone()).collect();
        if let Some(l2) = &desired.l2 {
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
        let services: Vec<String> = desired.services.iter().map(|s| s.name.clone()).collect();
        let mut tasks = services.clone();
        tasks.push(boot::BOOT_TASK.to_string());
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
            binaries,
        }
    }

    fn probe_of<'p>(&'p self, reach: &'p [Ipv4Addr]) -> WinProbe<'p> {
        WinProbe {
            files: &self.files,
            services: &self.services,
            tasks: &self.tasks,
            binaries: &self.binaries,
            images: std::slice::from_ref(&self.desired.pause_image),
            reach,
            l2bridge: self.desired.l2.is_some(),
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
        }
    }
    fn diff(&self, node: &Node, f: &WindowsFacts) -> Result<Diff<WinAction>, Conflict> {
        match self.desired.profile {
            k8s::Profile::Transparent => diff::diff_windows(node, self.desired, f),
            k8s::Profile::L2Bridge => l2diff::diff(node, self.desired, f),
        }
    }
    fn reset(&self, node: &Node, f: &WindowsFacts) -> Diff<WinAction> {
        match self.desired.profile {
            k8s::Profile::Transparent => diff::diff_reset_windows(node, self.desired, f),
            k8s::Profile::L2Bridge => l2diff::reset(node, self.desired, f),
        }
    }
    fn script(
        &self,
        node: &Node,
        actions: &[&WinAction],
        then_probe: Option<&[Ipv4Addr]>,
    ) -> String {
        let host = ScriptHost {
            name: &node.name,
            cluster: &node.cluster.name,
            address: node.address,
            // l2bridge: windows.adapter names the card under the vSwitch;
            // routes go on the adapter holding the address (its host vNIC)
            adapter: self
                .desired
                .adapter
                .as_deref()
                .filter(|_| self.desired.l2.is_none()),
        };
        let probe = then_probe.map(|reach| self.probe_of(reach));
        script::script(self.r, &host, actions, probe.as_ref())
    }
    fn reach<'f>(&self, f: &'f WindowsFacts) -> &'f BTreeMap<Ipv4Addr, Reach> {
        &f.reach
    }
    fn peer_change(&self, a: &WinAction) -> bool {
        matches!(a, WinAction::AddRoute { .. } | WinAction::DelRoute { .. })
    }
    fn budget(&self, a: &WinAction) -> Option<std::time::Duration> {
        action::budget(a)
    }
    fn fresh(&self, node: &Node) -> WindowsFacts {
        let v = self.desired.kubernetes_version;
        let mut facts = WindowsFacts::fresh(
            node.address,
            self.desired.adapter.as_deref(),
            self.desired.transparent_adapter.as_deref(),
            k8s::fresh_build(v.minor, self.desired.profile),
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
                let output = match &self.desired.l2 {
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
    fn boot_id(&self, f: &WindowsFacts) -> Option<String> {
        (!f.boot_time.is_empty()).then(|| f.boot_time.clone())
    }
    fn reboot_script(&self) -> Option<String> {
        Some(script::restart(self.r))
    }
    fn read_files(&self, paths: &[String]) -> String {
        script::read_files(self.r, paths)
    }
}
