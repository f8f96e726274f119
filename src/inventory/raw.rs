//! The inventory as written: every value a validation rule can point at
//! keeps its source position (serde-saphyr's `Spanned`).

use serde::Deserialize;
use serde_saphyr::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInventory {
    pub(super) cluster: RawCluster,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    pub(super) hosts: Spanned<Vec<Spanned<RawHost>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) name: Spanned<String>,
    pub(super) cluster_cidr: Spanned<String>,
    #[serde(default)]
    pub(super) node_prefix: Option<Spanned<u8>>,
    pub(super) service_cidr: Spanned<String>,
    #[serde(default)]
    pub(super) api_server: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) kubernetes_version: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) kubeconfig: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) pause_image: Option<Spanned<String>>,
}

impl super::ClusterPos {
    pub(super) fn of(c: &RawCluster) -> super::ClusterPos {
        let pos = |s: &Spanned<String>| super::Pos::from(s);
        super::ClusterPos {
            name: pos(&c.name),
            api_server: c.api_server.as_ref().map(pos),
            kubernetes_version: c.kubernetes_version.as_ref().map(pos),
            kubeconfig: c.kubeconfig.as_ref().map(pos),
            pause_image: c.pause_image.as_ref().map(pos),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    #[serde(default)]
    pub(super) winrm: Option<RawWinRm>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSsh {
    pub(super) user: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) identity: Option<Spanned<String>>,
    pub(super) known_hosts: Option<Spanned<String>>,
    pub(super) bastion: Option<Spanned<RawBastion>>,
}

/// `ssh.bastion` / `winrm.bastion`: an SSH jump host in front of the host
/// (k0sctl's form), with its own user, key and known_hosts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBastion {
    pub(super) address: Spanned<String>,
    pub(super) user: Option<String>,
    pub(super) port: Option<Spanned<u16>>,
    pub(super) identity: Option<Spanned<String>>,
    pub(super) known_hosts: Option<Spanned<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWinRm {
    pub(super) user: Option<String>,
    pub(super) password_env: Option<Spanned<String>>,
    pub(super) password_file: Option<Spanned<String>>,
    pub(super) port: Option<u16>,
    pub(super) tls: Option<bool>,
    pub(super) auth: Option<Spanned<String>>,
    pub(super) ca_file: Option<Spanned<String>>,
    pub(super) cert_sha256: Option<Spanned<String>>,
    pub(super) allow_basic_over_http: Option<bool>,
    pub(super) bastion: Option<Spanned<RawBastion>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) name: Spanned<String>,
    pub(super) os: Spanned<String>,
    #[serde(default)]
    pub(super) role: Option<Spanned<String>>,
    pub(super) address: Spanned<String>,
    #[serde(default)]
    pub(super) pod_cidr: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    #[serde(default)]
    pub(super) winrm: Option<RawWinRm>,
    #[serde(default)]
    pub(super) windows: Option<RawWindows>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindows {
    #[serde(default)]
    pub(super) binaries: RawBinaries,
    #[serde(default)]
    pub(super) adapter: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) network_name: Option<Spanned<String>>,
}

/// `windows.binaries`: only the binaries kwinctl installs (a misspelt name
/// is an unknown key, not a binary silently left out).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinaries {
    #[serde(default)]
    pub(super) kubelet: Option<RawBinary>,
    #[serde(default, rename = "kube-proxy")]
    pub(super) kube_proxy: Option<RawBinary>,
}

impl RawBinaries {
    /// (binary name, entry) of each one given.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&'static str, &RawBinary)> {
        [("kubelet", &self.kubelet), ("kube-proxy", &self.kube_proxy)]
            .into_iter()
            .filter_map(|(n, b)| b.as_ref().map(|b| (n, b)))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinary {
    #[serde(default)]
    pub(super) url: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) sha256: Option<String>,
}
