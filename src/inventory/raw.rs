//! The inventory as written: every value a validation rule can point at
//! keeps its source position (serde-saphyr's `Spanned`).

use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

use super::linux::RawLinux;

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

/// A kwinctl inventory (see docs/inventory.md).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "kwinctl inventory")]
pub(super) struct RawInventory {
    pub(super) cluster: RawCluster,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    /// Named groups and their settings; hosts name the groups they are in.
    /// `linux`, `windows`, `control-plane` and `worker` are built in (by os
    /// and role) and may have settings too.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, Option<RawGroup>>")]
    pub(super) groups: Pairs<Spanned<String>, Option<RawGroup>>,
    #[schemars(with = "Vec<RawHost>")]
    pub(super) hosts: Spanned<Vec<Spanned<RawHost>>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    /// The cluster's name (letters, digits, `.`, `_`, `-`).
    #[schemars(with = "String")]
    pub(super) name: Spanned<String>,
    /// The pod network, e.g. 192.168.0.0/16: one node_prefix-sized block per node.
    #[schemars(with = "String")]
    pub(super) cluster_cidr: Spanned<String>,
    #[serde(default)]
    /// The size of each node's block (default 24).
    #[schemars(with = "Option<u8>")]
    pub(super) node_prefix: Option<Spanned<u8>>,
    /// The service network; must not overlap cluster_cidr or node addresses.
    #[schemars(with = "String")]
    pub(super) service_cidr: Spanned<String>,
    #[serde(default)]
    /// What Windows nodes' kubelet and kube-proxy talk to (required with Windows hosts).
    #[schemars(with = "Option<String>")]
    pub(super) api_server: Option<Spanned<String>>,
    #[serde(default)]
    /// The release of the Windows nodes' kubelet.exe and kube-proxy.exe, e.g. "1.16.15" (required with Windows hosts).
    #[schemars(with = "Option<String>")]
    pub(super) kubernetes_version: Option<Spanned<String>>,
    #[serde(default)]
    /// A kubeconfig with embedded credentials for the Windows nodes (required with an https api_server).
    #[schemars(with = "Option<String>")]
    pub(super) kubeconfig: Option<Spanned<String>>,
    #[serde(default)]
    /// How Windows nodes get credentials: `bootstrap` (each joins with a bootstrap token and gets a client certificate of its own; the default where the release supports it and cluster.kubeconfig is not given) or `shared` (every node uses cluster.kubeconfig).
    #[schemars(with = "Option<String>")]
    pub(super) identity: Option<Spanned<String>>,
    #[serde(default)]
    /// The pause image (default: by release and Windows build).
    #[schemars(with = "Option<String>")]
    pub(super) pause_image: Option<Spanned<String>>,
    #[serde(default)]
    /// How Windows nodes are built: `transparent` (Docker, Kubernetes 1.5 to 1.10: from 1.11 its pods get no IP) or `l2bridge` (containerd + HNS L2Bridge + win-bridge, 1.24 and later); default: by kubernetes_version.
    #[schemars(with = "Option<String>")]
    pub(super) windows_profile: Option<Spanned<String>>,
    #[serde(default)]
    /// The containerd release of windows.binaries.containerd, e.g. "1.7.20" (l2bridge profile).
    #[schemars(with = "Option<String>")]
    pub(super) containerd_version: Option<Spanned<String>>,
    #[serde(default)]
    /// The Kubernetes release windows.binaries.kube-log-runner comes from, when not kubernetes_version's (l2bridge, 1.26 and later): its -log-file-size rotation exists from 1.34, and the runner only starts the binary it wraps, so a 1.34+ runner gives rotating logs to older releases.
    #[schemars(with = "Option<String>")]
    pub(super) log_runner_version: Option<Spanned<String>>,
    #[serde(default)]
    /// The cluster DNS service's address that kubelets hand to pods (kubelet's --cluster-dns); default: the 10th address of service_cidr, as kubeadm chooses it.
    #[schemars(with = "Option<String>")]
    pub(super) dns_service_ip: Option<Spanned<String>>,
    #[serde(default)]
    /// The cluster's DNS domain (kubelet's --cluster-domain); default `cluster.local`.
    #[schemars(with = "Option<String>")]
    pub(super) dns_domain: Option<Spanned<String>>,
    /// Addresses (IPv4 CIDRs) the API server reaches Windows kubelets from, when not a node's own address (a VIP, a load balancer, NAT, konnectivity): the kubelet's firewall rule admits them beside the nodes and the pod network, so `kubectl logs`/`exec` and `verify --pods` work.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) api_server_sources: Option<Spanned<Vec<String>>>,
    /// The test pods of `kwinctl verify --pods`.
    pub(super) pod_check: Option<RawPodCheck>,
}

/// `cluster.pod_check`: the test pods `kwinctl verify --pods` starts.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPodCheck {
    #[serde(default)]
    /// The namespace of the test pods (default `default`).
    #[schemars(with = "Option<String>")]
    pub(super) namespace: Option<Spanned<String>>,
    #[serde(default)]
    /// Images by node: `linux`, a Windows build number ("17763", "20348", "26100", "14393"), or `windows` (a node whose kubelet sets no build label, before 1.17), to an image offering agnhost and nslookup; default registry.k8s.io/e2e-test-images/agnhost:2.53 for Linux and Windows Server 2019, 2022 and 2025.
    #[schemars(with = "std::collections::BTreeMap<String, String>")]
    pub(super) images: Pairs<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    /// How long the pods may take to start, image pulls included (seconds, default 300).
    #[schemars(with = "Option<u64>")]
    pub(super) start_timeout: Option<Spanned<u64>>,
}

impl super::ClusterPos {
    pub(super) fn of(c: &RawCluster) -> super::ClusterPos {
        let pos = |s: &Spanned<String>| super::Pos::from(s);
        super::ClusterPos {
            name: pos(&c.name),
            api_server: c.api_server.as_ref().map(pos),
            kubernetes_version: c.kubernetes_version.as_ref().map(pos),
            kubeconfig: c.kubeconfig.as_ref().map(pos),
            identity: c.identity.as_ref().map(pos),
            pause_image: c.pause_image.as_ref().map(pos),
            windows_profile: c.windows_profile.as_ref().map(pos),
            containerd_version: c.containerd_version.as_ref().map(pos),
            log_runner_version: c.log_runner_version.as_ref().map(pos),
            dns_service_ip: c.dns_service_ip.as_ref().map(pos),
            dns_domain: c.dns_domain.as_ref().map(pos),
            cluster_cidr: pos(&c.cluster_cidr),
            service_cidr: pos(&c.service_cidr),
        }
    }
}

/// `defaults:`: the same blocks as a group's, for every host.
pub(super) type RawDefaults = RawGroup;

/// A block of settings, a group's (what its hosts get unless they set them
/// themselves) or `defaults:` (what every host gets unless a group or the
/// host sets it).
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    #[serde(default)]
    pub(super) winrm: Option<RawWinRm>,
    #[serde(default)]
    pub(super) windows: Option<RawWindows>,
    #[serde(default)]
    pub(super) linux: Option<RawLinux>,
}

#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSsh {
    #[schemars(with = "Option<String>")]
    pub(super) user: Option<Spanned<String>>,
    #[schemars(with = "Option<u16>")]
    pub(super) port: Option<Spanned<u16>>,
    #[schemars(with = "Option<String>")]
    pub(super) identity: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub(super) known_hosts: Option<Spanned<String>>,
    /// An SSH jump host in front of the host (like `ssh -J`).
    #[schemars(with = "Option<RawBastion>")]
    pub(super) bastion: Option<Spanned<RawBastion>>,
}

/// `ssh.bastion` / `winrm.bastion`: an SSH jump host in front of the host
/// (k0sctl's form), with its own user, key and known_hosts.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBastion {
    /// The jump host: an IPv4 address, or a name ssh_config (or DNS)
    /// resolves.
    #[schemars(with = "String")]
    pub(super) address: Spanned<String>,
    /// Its login user (default: ssh_config's, else root).
    pub(super) user: Option<String>,
    /// Its SSH port (default: ssh_config's, else 22).
    #[schemars(with = "Option<u16>")]
    pub(super) port: Option<Spanned<u16>>,
    /// Its key file (default: ssh-agent and ssh_config's IdentityFile).
    #[schemars(with = "Option<String>")]
    pub(super) identity: Option<Spanned<String>>,
    /// The known_hosts file its host key is checked against (default:
    /// ssh_config's UserKnownHostsFile).
    #[schemars(with = "Option<String>")]
    pub(super) known_hosts: Option<Spanned<String>>,
}

#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWinRm {
    #[schemars(with = "Option<String>")]
    pub(super) user: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub(super) password_env: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub(super) password_file: Option<Spanned<String>>,
    #[schemars(with = "Option<u16>")]
    pub(super) port: Option<Spanned<u16>>,
    #[schemars(with = "Option<bool>")]
    pub(super) tls: Option<Spanned<bool>>,
    #[schemars(with = "Option<String>")]
    pub(super) auth: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub(super) ca_file: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub(super) cert_sha256: Option<Spanned<String>>,
    #[schemars(with = "Option<bool>")]
    pub(super) allow_basic_over_http: Option<Spanned<bool>>,
    /// Kerberos: a keytab holding the keys of `user` (instead of the
    /// operator's credential cache).
    #[schemars(with = "Option<String>")]
    pub(super) keytab: Option<Spanned<String>>,
    /// Kerberos: the host's service principal (default `HTTP/<address>`).
    #[schemars(with = "Option<String>")]
    pub(super) spn: Option<Spanned<String>>,
    /// An SSH jump host in front of the host (like `ssh -J`).
    #[schemars(with = "Option<RawBastion>")]
    pub(super) bastion: Option<Spanned<RawBastion>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    #[schemars(with = "String")]
    pub(super) name: Spanned<String>,
    /// `linux` or `windows`.
    #[schemars(with = "super::Os")]
    pub(super) os: Spanned<String>,
    #[serde(default)]
    #[schemars(with = "Option<super::Role>")]
    pub(super) role: Option<Spanned<String>>,
    /// The node's routable IPv4 address: the next hop of other nodes' routes to its pod CIDR, and where kwinctl connects unless `connect` says otherwise.
    #[schemars(with = "String")]
    pub(super) address: Spanned<String>,
    /// Where kwinctl connects (SSH or WinRM) when that is not `address`: an IPv4 address (a node reached on a public address that routes pods on an internal one).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) connect: Option<Spanned<String>>,
    /// The Kubernetes node name a Windows host registers as (the kubelet's and kube-proxy's `--hostname-override`): a lower-case DNS subdomain. Default: the host's `name` in lower case, or the name the node already has (docs/windows.md, Node names).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) node_name: Option<Spanned<String>>,
    /// The groups it is in (declared under `groups:`).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) groups: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    /// Pin this node's block (default: what the node records, else allocated).
    #[schemars(with = "Option<String>")]
    pub(super) pod_cidr: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    #[serde(default)]
    pub(super) winrm: Option<RawWinRm>,
    #[serde(default)]
    pub(super) windows: Option<RawWindows>,
    #[serde(default)]
    pub(super) linux: Option<RawLinux>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindows {
    #[serde(default)]
    pub(super) binaries: RawBinaries,
    /// Where a `url:` binary comes from: `node` (default: the node downloads it) or `push` (kwinctl downloads it once to the operator's machine, checks its sha256, keeps it in its cache and pushes it to the nodes: for nodes that cannot reach the internet).
    #[serde(default)]
    #[schemars(with = "Option<BinariesSourceSchema>")]
    pub(super) binaries_source: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) adapter: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) network_name: Option<Spanned<String>>,
    /// The network card the pods' transparent network takes (never the one
    /// holding the node's address); default: the only Up physical adapter
    /// besides the routable one.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) transparent_adapter: Option<Spanned<String>>,
    /// Extra sources (IPv4 CIDRs) allowed to reach kube-proxy.exe, i.e. the
    /// NodePorts of the transparent profile's userspace proxy, besides the
    /// nodes and the pod network (e.g. [0.0.0.0/0] for anyone).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) nodeport_sources: Option<Spanned<Vec<String>>>,
    /// Taints the kubelet registers its node with (`--register-with-taints`), each `key[=value]:Effect` with Effect NoSchedule, PreferNoSchedule or NoExecute; default none. Recommended: [os=windows:NoSchedule], so Linux workloads (DaemonSets too) stay off Windows nodes unless they tolerate it. The kubelet applies them only when it registers the node.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) taints: Option<Spanned<Vec<String>>>,
    /// `verify` fails a node whose kubelet client certificate expires within this many days (0 to 3650); default 30.
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub(super) cert_margin_days: Option<Spanned<u32>>,
}

/// `windows.binaries_source`'s values, for the schema.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum BinariesSourceSchema {
    Node,
    Push,
}

/// `windows.binaries`: only the binaries kwinctl installs (a misspelt name
/// is an unknown key, not a binary silently left out).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinaries {
    #[serde(default)]
    #[schemars(with = "Option<RawBinary>")]
    pub(super) kubelet: Option<Spanned<RawBinary>>,
    #[serde(default, rename = "kube-proxy")]
    #[schemars(with = "Option<RawBinary>")]
    pub(super) kube_proxy: Option<Spanned<RawBinary>>,
    /// The containerd release archive (containerd-X.Y.Z-windows-amd64.tar.gz; l2bridge profile).
    #[serde(default)]
    #[schemars(with = "Option<RawBinary>")]
    pub(super) containerd: Option<Spanned<RawBinary>>,
    /// The CNI plugins archive (cni-plugins-windows-amd64-vX.Y.Z.tgz, with win-bridge.exe and host-local.exe; l2bridge profile).
    #[serde(default, rename = "cni-plugins")]
    #[schemars(with = "Option<RawBinary>")]
    pub(super) cni_plugins: Option<Spanned<RawBinary>>,
    /// kube-log-runner.exe of the Kubernetes release (l2bridge profile, Kubernetes 1.26 and later: it writes kubelet's and kube-proxy's logs to files).
    #[serde(default, rename = "kube-log-runner")]
    #[schemars(with = "Option<RawBinary>")]
    pub(super) kube_log_runner: Option<Spanned<RawBinary>>,
}

impl RawBinaries {
    /// (binary name, entry) of each one given.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&'static str, &Spanned<RawBinary>)> {
        [
            ("kubelet", &self.kubelet),
            ("kube-proxy", &self.kube_proxy),
            ("containerd", &self.containerd),
            ("cni-plugins", &self.cni_plugins),
            ("kube-log-runner", &self.kube_log_runner),
        ]
        .into_iter()
        .filter_map(|(n, b)| b.as_ref().map(|b| (n, b)))
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinary {
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) url: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) sha256: Option<String>,
    /// `true`: the file is on the node already (installed by other means);
    /// kwinctl places nothing and its preflight refuses the node while the
    /// file is missing. Takes no url, path or sha256.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub(super) preinstalled: Option<Spanned<bool>>,
}

/// The JSON Schema of an inventory file (`kwinctl schema inventory`,
/// published as schema/inventory.schema.json): editors validate and
/// complete YAML with it. `check` stays the authority (it also checks
/// addresses, CIDRs, overlaps and files, with positions).
pub fn schema() -> String {
    let s = schemars::schema_for!(RawInventory);
    serde_json::to_string_pretty(&s).expect("schema serializes") + "\n"
}
