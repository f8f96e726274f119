//! Pod CIDR allocation, the state file, and the desired state per host.
//!
//! Allocation is a pure function of (inventory, recorded state): pins win,
//! recorded assignments are kept, new hosts get the lowest free block in
//! inventory order. So a host keeps its block when hosts are reordered, added
//! or removed, and `check`/`plan` show exactly what `up` will record.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::inventory::{Host, Inventory, Os, nets_overlap};

/// The state file kept beside the inventory.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    pub version: u32,
    pub cluster: String,
    pub cluster_cidr: Option<Ipv4Net>,
    /// host name (lower case) → pod CIDR
    pub pod_cidrs: BTreeMap<String, Ipv4Net>,
}

pub fn state_path(inventory: &Path) -> PathBuf {
    let stem = inventory
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "inventory".into());
    inventory.with_file_name(format!("{stem}.kwinctl-state.json"))
}

impl State {
    pub fn load(path: &Path) -> Result<State> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "state file {} is not valid; restore it from a backup or move it away to start over (pins in the inventory keep CIDRs stable)",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State {
                version: 1,
                ..State::default()
            }),
            Err(e) => Err(e).with_context(|| format!("cannot read state file {}", path.display())),
        }
    }

    /// Write atomically (temp file in the same folder, fsync, rename) with
    /// owner-only permissions.
    pub fn save(&self, path: &Path) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".kwinctl-state")
            .tempfile_in(dir)
            .with_context(|| format!("cannot create a temp file in {}", dir.display()))?;
        let text = serde_json::to_string_pretty(self)? + "\n";
        tmp.write_all(text.as_bytes())?;
        tmp.as_file().sync_all()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        tmp.persist(path)
            .with_context(|| format!("cannot write state file {}", path.display()))?;
        Ok(())
    }
}

/// Where a host's pod CIDR came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Pinned,
    Recorded,
    New,
}

#[derive(Debug, Clone, Serialize)]
pub struct Assignment {
    pub host: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub source: Source,
}

#[derive(Debug, Clone)]
pub struct Allocation {
    pub assignments: Vec<Assignment>,
    /// Things the operator should know (a pin overriding a recorded block, …).
    pub notes: Vec<String>,
    /// The state to record after this allocation.
    pub state: State,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AllocError(pub String);

/// The first usable address of a block: the pod network's gateway.
pub fn gateway(net: &Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + 1)
}

pub fn allocate(inv: &Inventory, state: &State) -> Result<Allocation, AllocError> {
    let cc = inv.cluster.cluster_cidr;
    let prefix = inv.cluster.node_prefix;
    let mut notes = Vec::new();
    let mut taken: BTreeSet<Ipv4Net> = BTreeSet::new();
    let mut chosen: Vec<Option<(Ipv4Net, Source)>> = vec![None; inv.hosts.len()];
    let usable = |n: &Ipv4Net| n.prefix_len() == prefix && cc.contains(n);

    // 1. pins
    for (i, h) in inv.hosts.iter().enumerate() {
        if let Some(pin) = h.pod_cidr {
            if let Some(rec) = state.pod_cidrs.get(&key(h))
                && *rec != pin
            {
                notes.push(format!(
                    "{}: pinned to {pin}; the state file had {rec}: its routes will move",
                    h.name
                ));
            }
            taken.insert(pin);
            chosen[i] = Some((pin, Source::Pinned));
        }
    }
    // 2. recorded assignments that still fit
    for (i, h) in inv.hosts.iter().enumerate() {
        if chosen[i].is_some() {
            continue;
        }
        if let Some(rec) = state.pod_cidrs.get(&key(h)) {
            if !usable(rec) {
                notes.push(format!(
                    "{}: recorded {rec} no longer fits cluster CIDR {cc} /{prefix}: a new block is assigned",
                    h.name
                ));
            } else if taken.iter().any(|t| nets_overlap(t, rec)) {
                notes.push(format!(
                    "{}: recorded {rec} is now pinned by another host: a new block is assigned",
                    h.name
                ));
            } else {
                taken.insert(*rec);
                chosen[i] = Some((*rec, Source::Recorded));
            }
        }
    }
    // 3. new hosts: lowest free block, in inventory order
    let mut candidates = cc
        .subnets(prefix)
        .map_err(|e| AllocError(format!("cannot split {cc} into /{prefix}: {e}")))?;
    for (i, h) in inv.hosts.iter().enumerate() {
        if chosen[i].is_some() {
            continue;
        }
        let block = loop {
            match candidates.next() {
                Some(c) if taken.iter().any(|t| nets_overlap(t, &c)) => continue,
                Some(c) if c.contains(&h.address) => continue,
                Some(c) => break c,
                None => {
                    return Err(AllocError(format!(
                        "cluster CIDR {cc} has no free /{prefix} block left for host {}: use a larger cluster_cidr",
                        h.name
                    )));
                }
            }
        };
        taken.insert(block);
        chosen[i] = Some((block, Source::New));
    }
    let assignments: Vec<Assignment> = inv
        .hosts
        .iter()
        .zip(chosen)
        .map(|(h, c)| {
            let (net, source) = c.expect("every host allocated");
            Assignment {
                host: h.name.clone(),
                os: h.os,
                address: h.address,
                pod_cidr: net,
                gateway: gateway(&net),
                source,
            }
        })
        .collect();
    let state = State {
        version: 1,
        cluster: inv.cluster.name.clone(),
        cluster_cidr: Some(cc),
        pod_cidrs: inv
            .hosts
            .iter()
            .zip(&assignments)
            .map(|(h, a)| (key(h), a.pod_cidr))
            .collect(),
    };
    Ok(Allocation {
        assignments,
        notes,
        state,
    })
}

fn key(h: &Host) -> String {
    h.name.to_ascii_lowercase()
}

/// Another node, as seen from one node.
#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub name: String,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
}

/// What one node should look like.
#[derive(Debug, Clone, Serialize)]
pub struct NodePlan {
    pub name: String,
    pub os: Os,
    pub address: Ipv4Addr,
    pub pod_cidr: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub cluster_name: String,
    pub cluster_cidr: Ipv4Net,
    pub peers: Vec<Peer>,
}

impl NodePlan {
    /// Desired routes: every other node's pod CIDR via that node's address.
    pub fn routes(&self) -> BTreeMap<Ipv4Net, Ipv4Addr> {
        self.peers.iter().map(|p| (p.pod_cidr, p.address)).collect()
    }
}

pub fn node_plans(inv: &Inventory, alloc: &Allocation) -> Vec<NodePlan> {
    alloc
        .assignments
        .iter()
        .map(|a| NodePlan {
            name: a.host.clone(),
            os: a.os,
            address: a.address,
            pod_cidr: a.pod_cidr,
            gateway: a.gateway,
            cluster_name: inv.cluster.name.clone(),
            cluster_cidr: inv.cluster.cluster_cidr,
            peers: alloc
                .assignments
                .iter()
                .filter(|p| p.host != a.host)
                .map(|p| Peer {
                    name: p.host.clone(),
                    address: p.address,
                    pod_cidr: p.pod_cidr,
                    gateway: p.gateway,
                })
                .collect(),
        })
        .collect()
}

/// A node plan for unit tests: `peers` are (name, address, pod CIDR).
#[cfg(test)]
pub(crate) fn test_node(
    name: &str,
    os: Os,
    address: &str,
    pod_cidr: &str,
    cluster_cidr: &str,
    peers: &[(&str, &str, &str)],
) -> NodePlan {
    let pod_cidr: Ipv4Net = pod_cidr.parse().unwrap();
    NodePlan {
        name: name.into(),
        os,
        address: address.parse().unwrap(),
        pod_cidr,
        gateway: gateway(&pod_cidr),
        cluster_name: "t".into(),
        cluster_cidr: cluster_cidr.parse().unwrap(),
        peers: peers
            .iter()
            .map(|(n, a, c)| {
                let c: Ipv4Net = c.parse().unwrap();
                Peer {
                    name: n.to_string(),
                    address: a.parse().unwrap(),
                    pod_cidr: c,
                    gateway: gateway(&c),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(hosts: &[(&str, &str, Option<&str>)]) -> Inventory {
        let mut s = String::from(
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\nhosts:\n",
        );
        for (n, a, pin) in hosts {
            s += &format!("  - name: {n}\n    os: linux\n    address: {a}\n");
            if let Some(p) = pin {
                s += &format!("    pod_cidr: {p}\n");
            }
        }
        Inventory::parse(Path::new("i.yaml"), &s).unwrap()
    }

    fn cidrs(a: &Allocation) -> Vec<String> {
        a.assignments
            .iter()
            .map(|x| x.pod_cidr.to_string())
            .collect()
    }

    #[test]
    fn fresh_allocation_in_order_and_pins_win() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.0.0/24")),
            ("c", "198.18.1.4", None),
        ]);
        let a = allocate(&i, &State::default()).unwrap();
        assert_eq!(
            cidrs(&a),
            ["198.19.1.0/24", "198.19.0.0/24", "198.19.2.0/24"]
        );
        assert_eq!(a.assignments[0].gateway.to_string(), "198.19.1.1");
    }

    #[test]
    fn stable_under_reorder_add_remove() {
        let i1 = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let a1 = allocate(&i1, &State::default()).unwrap();
        // reorder, remove b, add d
        let i2 = inv(&[
            ("d", "198.18.1.5", None),
            ("c", "198.18.1.4", None),
            ("a", "198.18.1.2", None),
        ]);
        let a2 = allocate(&i2, &a1.state).unwrap();
        assert_eq!(
            cidrs(&a2),
            ["198.19.1.0/24", "198.19.2.0/24", "198.19.0.0/24"]
        );
        assert_eq!(a2.assignments[0].source, Source::New);
        assert_eq!(a2.assignments[1].source, Source::Recorded);
        assert!(!a2.state.pod_cidrs.contains_key("b"));
    }

    #[test]
    fn pin_taking_a_recorded_block_moves_the_other_host() {
        let i1 = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let a1 = allocate(&i1, &State::default()).unwrap();
        let i2 = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", Some("198.19.0.0/24")),
        ]);
        let a2 = allocate(&i2, &a1.state).unwrap();
        // b left 198.19.1.0/24 for its pin, so a gets that block.
        assert_eq!(cidrs(&a2), ["198.19.1.0/24", "198.19.0.0/24"]);
        assert_eq!(a2.notes.len(), 2, "{:?}", a2.notes);
    }

    #[test]
    fn state_file_round_trip_is_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.kwinctl-state.json");
        let i = inv(&[("a", "198.18.1.2", None)]);
        let a = allocate(&i, &State::default()).unwrap();
        a.state.save(&p).unwrap();
        assert_eq!(State::load(&p).unwrap(), a.state);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
    }

    #[test]
    fn peers_and_routes() {
        let i = inv(&[
            ("a", "198.18.1.2", None),
            ("b", "198.18.1.3", None),
            ("c", "198.18.1.4", None),
        ]);
        let a = allocate(&i, &State::default()).unwrap();
        let plans = node_plans(&i, &a);
        let r = plans[0].routes();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[&"198.19.1.0/24".parse().unwrap()].to_string(),
            "198.18.1.3"
        );
    }
}

// ------------------------------------------------------------- Windows

/// Where kwinctl keeps kubelet, kube-proxy and its own files on Windows.
pub const WIN_DIR: &str = r"C:\k";
pub const KUBE_PROXY_SWITCH: &str = "KubeProxySwitch";
pub const HNS_ADAPTER: &str = "vEthernet (HNSTransparent)";
pub const DEFAULT_NETWORK: &str = "kwinctl";

/// A file kwinctl places on a Windows node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WinFile {
    pub path: String,
    pub sha256: String,
    pub source: FileSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    /// The host downloads it.
    Url(String),
    /// Sent from the operator's machine inside the script (base64); shared,
    /// not copied, between hosts.
    Inline(#[serde(skip)] std::sync::Arc<[u8]>),
}

/// A native Windows service kwinctl installs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WinService {
    pub name: String,
    pub display: String,
    /// The full command line (ImagePath).
    pub binpath: String,
    pub env: Vec<String>,
    pub depends: Vec<String>,
}

/// What a Windows node should have, beyond its [`NodePlan`].
#[derive(Debug, Clone, Serialize)]
pub struct WindowsDesired {
    pub network: String,
    /// The routable adapter's name, when the inventory names it; otherwise
    /// the adapter holding the node's address.
    pub adapter: Option<String>,
    pub pause_image: String,
    pub files: Vec<WinFile>,
    /// The binaries the services need, whether kwinctl places them or not.
    pub required_files: Vec<String>,
    pub services: Vec<WinService>,
}

/// Double-quote one argument for a Windows command line.
fn win_arg(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '"']) {
        return s.to_string();
    }
    format!("\"{}\"", s.replace('"', "\\\""))
}

/// Local files to upload, read once per command and shared between hosts.
#[derive(Default)]
pub struct Uploads(std::sync::Mutex<BTreeMap<std::path::PathBuf, std::sync::Arc<[u8]>>>);

impl Uploads {
    fn read(&self, p: &Path) -> std::io::Result<std::sync::Arc<[u8]>> {
        let mut m = self.0.lock().unwrap();
        if let Some(b) = m.get(p) {
            return Ok(b.clone());
        }
        let b: std::sync::Arc<[u8]> = std::fs::read(p)?.into();
        m.insert(p.to_path_buf(), b.clone());
        Ok(b)
    }
}

pub fn windows_desired(
    inv: &Inventory,
    host: &Host,
    node: &NodePlan,
    uploads: &Uploads,
) -> Result<WindowsDesired, String> {
    let w = &host.windows;
    let network = w
        .network_name
        .clone()
        .unwrap_or_else(|| DEFAULT_NETWORK.to_string());
    let mut files = Vec::new();
    for (name, exe) in [("kubelet", "kubelet.exe"), ("kube-proxy", "kube-proxy.exe")] {
        let Some(b) = w.binaries.get(name) else {
            continue;
        };
        let path = format!(r"{WIN_DIR}\{exe}");
        let (source, local_sha) = match (&b.url, &b.path) {
            (Some(u), None) => (FileSource::Url(u.clone()), None),
            (None, Some(p)) => {
                let bytes = uploads.read(p).map_err(|e| {
                    format!(
                        "{}: windows.binaries.{name}.path {}: {e}",
                        host.name,
                        p.display()
                    )
                })?;
                let sha = crate::diff::sha256_bytes(&bytes);
                (FileSource::Inline(bytes), Some(sha))
            }
            _ => {
                return Err(format!(
                    "{}: windows.binaries.{name} needs exactly one of url or path",
                    host.name
                ));
            }
        };
        let sha256 = match (b.sha256.as_ref().map(|s| s.to_ascii_lowercase()), local_sha) {
            (Some(given), Some(actual)) if given != actual => {
                return Err(format!(
                    "{}: windows.binaries.{name}: the local file's SHA-256 is {actual}, the inventory says {given}",
                    host.name
                ));
            }
            (_, Some(actual)) => actual,
            (Some(given), None) => given,
            (None, None) => {
                return Err(format!(
                    "{}: windows.binaries.{name}.sha256 is required with a url",
                    host.name
                ));
            }
        };
        files.push(WinFile {
            path,
            sha256: sha256.to_ascii_lowercase(),
            source,
        });
    }
    let kubeconfig_path = format!(r"{WIN_DIR}\config");
    if let Some(kc) = &inv.cluster.kubeconfig {
        let bytes = std::fs::read(kc)
            .map_err(|e| format!("cannot read kubeconfig {}: {e}", kc.display()))?;
        files.push(WinFile {
            path: kubeconfig_path.clone(),
            sha256: crate::diff::sha256_bytes(&bytes),
            source: FileSource::Inline(bytes.into()),
        });
    }
    let ip = node.address.to_string();
    let exe = |n: &str| win_arg(&format!(r"{WIN_DIR}\{n}"));
    // The seed's flags; a kubeconfig replaces --api-servers when given.
    let mut kubelet = vec![
        exe("kubelet.exe"),
        "--windows-service".into(),
        format!("--hostname-override={}", win_arg(&ip)),
        format!(
            "--pod-infra-container-image={}",
            win_arg(&inv.cluster.pause_image)
        ),
        "--resolv-conf=\"\"".into(),
    ];
    let mut proxy = vec![
        exe("kube-proxy.exe"),
        "--windows-service".into(),
        "--proxy-mode=userspace".into(),
        format!("--bind-address={ip}"),
        format!("--hostname-override={}", win_arg(&ip)),
    ];
    if inv.cluster.kubeconfig.is_some() {
        kubelet.push(format!("--kubeconfig={}", win_arg(&kubeconfig_path)));
        proxy.push(format!("--kubeconfig={}", win_arg(&kubeconfig_path)));
    } else {
        kubelet.push(format!(
            "--api-servers={}",
            win_arg(&inv.cluster.api_server)
        ));
        proxy.push(format!("--master={}", win_arg(&inv.cluster.api_server)));
    }
    let env = vec![
        format!("CONTAINER_NETWORK={network}"),
        format!("INTERFACE_TO_ADD_SERVICE_IP=vEthernet ({KUBE_PROXY_SWITCH})"),
    ];
    Ok(WindowsDesired {
        network,
        adapter: w.adapter.clone(),
        pause_image: inv.cluster.pause_image.clone(),
        files,
        required_files: vec![
            format!(r"{WIN_DIR}\kubelet.exe"),
            format!(r"{WIN_DIR}\kube-proxy.exe"),
        ],
        services: vec![
            WinService {
                name: "kubelet".into(),
                display: "Kubernetes kubelet (kwinctl)".into(),
                binpath: kubelet.join(" "),
                env: env.clone(),
                depends: vec!["docker".into()],
            },
            WinService {
                name: "kube-proxy".into(),
                display: "Kubernetes kube-proxy (kwinctl)".into(),
                binpath: proxy.join(" "),
                env,
                depends: vec!["kubelet".into()],
            },
        ],
    })
}
