//! What a Windows node should have beyond its pod CIDR and routes: the
//! transparent network's name, the pause image, the files kwinctl places
//! (binaries, kubeconfig) and the services with the seed's flags.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{DEFAULT_NETWORK, KUBE_PROXY_SWITCH, WIN_DIR};
use crate::hash::sha256_bytes;
use crate::inventory::{Host, Inventory};
use crate::os::ops::DesiredError;

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

/// What a Windows node should have, beyond its pod CIDR and routes (it
/// does not depend on them: it is known before any node is asked).
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

impl WindowsDesired {
    /// The desired state of a Windows node: files, services and their flags.
    pub fn of(
        inv: &Inventory,
        host: &Host,
        uploads: &Uploads,
    ) -> Result<WindowsDesired, DesiredError> {
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
                        DesiredError(format!(
                            "{}: windows.binaries.{name}.path {}: {e}",
                            host.name,
                            p.display()
                        ))
                    })?;
                    let sha = sha256_bytes(&bytes);
                    (FileSource::Inline(bytes), Some(sha))
                }
                _ => {
                    return Err(DesiredError(format!(
                        "{}: windows.binaries.{name} needs exactly one of url or path",
                        host.name
                    )));
                }
            };
            let sha256 = match (b.sha256.as_ref().map(|s| s.to_ascii_lowercase()), local_sha) {
                (Some(given), Some(actual)) if given != actual => {
                    return Err(DesiredError(format!(
                        "{}: windows.binaries.{name}: the local file's SHA-256 is {actual}, the inventory says {given}",
                        host.name
                    )));
                }
                (_, Some(actual)) => actual,
                (Some(given), None) => given,
                (None, None) => {
                    return Err(DesiredError(format!(
                        "{}: windows.binaries.{name}.sha256 is required with a url",
                        host.name
                    )));
                }
            };
            files.push(WinFile {
                path,
                sha256: sha256.to_ascii_lowercase(),
                source,
            });
        }
        let kubeconfig_path = super::KUBECONFIG.to_string();
        if let Some(kc) = &inv.cluster.kubeconfig {
            let bytes = std::fs::read(kc).map_err(|e| {
                DesiredError(format!("cannot read kubeconfig {}: {e}", kc.display()))
            })?;
            files.push(WinFile {
                path: kubeconfig_path.clone(),
                sha256: sha256_bytes(&bytes),
                source: FileSource::Inline(bytes.into()),
            });
        }
        let ip = host.address.to_string();
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
}
