//! Windows Server nodes over WinRM (or OpenSSH): the seeds' steps — RRAS,
//! an internal switch for kube-proxy, a transparent docker network on the
//! pod CIDR with its gateway address, persistent routes to every other pod
//! CIDR, kubelet and kube-proxy as services — each an action with its probe
//! fact, after a preflight.

pub mod action;
pub mod cmdline;
pub mod desired;
pub mod diff;
pub mod facts;
pub mod k8s;
pub mod preflight;
pub mod script;

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
pub const HNS_ADAPTER: &str = "vEthernet (HNSTransparent)";
pub const DEFAULT_NETWORK: &str = "kwinctl";
/// Where kubelet and kube-proxy log (klog's `--log-dir`, and the start
/// script's redirection for releases run by a scheduled task).
pub const LOG_DIR: &str = r"C:\k\logs";
/// The Task Scheduler folder of kwinctl's tasks.
pub const TASK_PATH: &str = r"\kwinctl\";

/// Constants the Windows templates share.
pub fn template_globals() -> Vec<(&'static str, Value)> {
    vec![
        ("kube_proxy_switch", Value::from(KUBE_PROXY_SWITCH)),
        ("hns_adapter", Value::from(HNS_ADAPTER)),
        ("kwinctl_dir", Value::from(KWINCTL_DIR)),
        ("pod_cidr_file", Value::from(POD_CIDR_FILE)),
        ("cluster_file", Value::from(CLUSTER_FILE)),
        ("log_dir", Value::from(LOG_DIR)),
        ("task_path", Value::from(TASK_PATH)),
    ]
}

pub struct WindowsOps<'a> {
    r: &'a Renderer,
    desired: &'a WindowsDesired,
    /// The files and services the probe reports on.
    files: Vec<String>,
    services: Vec<String>,
}

impl<'a> WindowsOps<'a> {
    pub fn new(r: &'a Renderer, desired: &'a WindowsDesired) -> Self {
        let mut files: Vec<String> = desired.files.iter().map(|f| f.path.clone()).collect();
        for f in &desired.required_files {
            if !files.contains(f) {
                files.push(f.clone());
            }
        }
        let services = desired.services.iter().map(|s| s.name.clone()).collect();
        WindowsOps {
            r,
            desired,
            files,
            services,
        }
    }

    fn probe_of<'p>(&'p self, reach: &'p [Ipv4Addr]) -> WinProbe<'p> {
        WinProbe {
            files: &self.files,
            services: &self.services,
            binaries: &self.desired.required_files,
            images: std::slice::from_ref(&self.desired.pause_image),
            reach,
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
        diff::diff_windows(node, self.desired, f)
    }
    fn reset(&self, node: &Node, f: &WindowsFacts) -> Diff<WinAction> {
        diff::diff_reset_windows(node, self.desired, f)
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
            adapter: self.desired.adapter.as_deref(),
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
    fn fresh(&self, node: &Node) -> WindowsFacts {
        let v = self.desired.kubernetes_version;
        let mut facts = WindowsFacts::fresh(
            node.address,
            self.desired.adapter.as_deref(),
            k8s::fresh_build(v.minor),
        );
        // Binaries kwinctl does not place are assumed to be there already,
        // of the declared release.
        for req in &self.desired.required_files {
            if !self.desired.files.iter().any(|f| &f.path == req) {
                facts.files.push(facts::FileFact {
                    path: req.clone(),
                    sha256: String::new(),
                });
                facts.versions.push(facts::VersionFact {
                    path: req.clone(),
                    output: format!("Kubernetes v{v}"),
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
            _ => None,
        }
    }
    fn read_files(&self, paths: &[String]) -> String {
        script::read_files(self.r, paths)
    }
}
