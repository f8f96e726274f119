//! The inventory as written: every value a validation rule can point at
//! keeps its source position (serde-saphyr's `Spanned`).

use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

/// A YAML mapping in the file's order, keys with their positions (a map
/// type would need `Ord`/`Hash` keys, and lose the order).
#[derive(Debug, Clone)]
pub struct Pairs<K, V>(pub Vec<(K, V)>);

impl<K, V> Default for Pairs<K, V> {
    fn default() -> Self {
        Pairs(Vec::new())
    }
}

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Pairs<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pv<K, V>(PhantomData<(K, V)>);
        impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for Pv<K, V> {
            type Value = Pairs<K, V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(p) = m.next_entry()? {
                    v.push(p);
                }
                Ok(Pairs(v))
            }
            // `key:` with nothing after it
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Pairs(Vec::new()))
            }
        }
        d.deserialize_map(Pv(PhantomData))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInventory {
    pub(super) cluster: RawCluster,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    /// Named groups and their settings (hosts name the groups they are in).
    #[serde(default)]
    pub(super) groups: Pairs<Spanned<String>, Option<RawGroup>>,
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
    #[serde(default)]
    pub(super) windows: Option<RawWindows>,
}

/// A group's settings: what its hosts get unless they set it themselves.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    #[serde(default)]
    pub(super) winrm: Option<RawWinRm>,
    #[serde(default)]
    pub(super) windows: Option<RawWindows>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSsh {
    pub(super) user: Option<Spanned<String>>,
    pub(super) port: Option<Spanned<u16>>,
    pub(super) identity: Option<Spanned<String>>,
    pub(super) known_hosts: Option<Spanned<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWinRm {
    pub(super) user: Option<Spanned<String>>,
    pub(super) password_env: Option<Spanned<String>>,
    pub(super) password_file: Option<Spanned<String>>,
    pub(super) port: Option<Spanned<u16>>,
    pub(super) tls: Option<Spanned<bool>>,
    pub(super) auth: Option<Spanned<String>>,
    pub(super) ca_file: Option<Spanned<String>>,
    pub(super) cert_sha256: Option<Spanned<String>>,
    pub(super) allow_basic_over_http: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) name: Spanned<String>,
    pub(super) os: Spanned<String>,
    #[serde(default)]
    pub(super) role: Option<Spanned<String>>,
    pub(super) address: Spanned<String>,
    /// The groups it is in (declared under `groups:`).
    #[serde(default)]
    pub(super) groups: Option<Vec<Spanned<String>>>,
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
    pub(super) kubelet: Option<Spanned<RawBinary>>,
    #[serde(default, rename = "kube-proxy")]
    pub(super) kube_proxy: Option<Spanned<RawBinary>>,
}

impl RawBinaries {
    /// (binary name, entry) of each one given.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&'static str, &RawBinary)> {
        [("kubelet", &self.kubelet), ("kube-proxy", &self.kube_proxy)]
            .into_iter()
            .filter_map(|(n, b)| b.as_ref().map(|b| (n, &b.value)))
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
