//! Inventory: the YAML model, defaults and validation.
//! Size: the validated model is one set of types (Inventory, Cluster, Host
//! and their settings) that every command reads; its rules live beside it.
//!
//! Every error names `file:line:column` and says how to fix it. Parsing keeps
//! source positions (serde-saphyr's `Spanned`) for every value a validation
//! rule can point at, so semantic errors (duplicates, overlaps) point at the
//! offending value, not just at the file.

mod bastion;
mod credentials;
mod groups;
mod host;
mod kerberos;
pub mod kubeconfig;
mod linux;
mod net;
mod placeholder;
mod raw;
mod same;
mod validate;
mod validator;
mod version;

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde_saphyr::Spanned;

pub use groups::BUILT_IN as BUILT_IN_GROUPS;

pub use host::valid_node_name;
pub use kubeconfig::Identity;
pub use linux::{DEFAULT_BOOT_WAIT_SECS, LinuxSettings};
pub use net::{block_count, nets_overlap, not_a_node_address, routable_node_address};
pub use raw::Pairs;
use raw::RawInventory;
pub use raw::schema;
use validate::{first_line, yaml_hint};
use validator::Validator;
pub use version::{ContainerdVersion, KubeVersion, Minor, WindowsProfile};

/// What `kwinctl import` writes where only the operator knows the value
/// (the `cluster:` section); `check` refuses it until it is replaced.
pub const PLACEHOLDER: &str = "FILL-IN";

/// A position in the inventory file (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl<T> From<&Spanned<T>> for Pos {
    fn from(s: &Spanned<T>) -> Self {
        Pos {
            line: s.referenced.line() as usize,
            column: s.referenced.column() as usize,
        }
    }
}

/// One problem found in an inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub pos: Pos,
    pub message: String,
    pub hint: String,
}

/// All problems found in one inventory file; `Display` prints one per line as
/// `file:line:column: message` followed by an indented hint.
#[derive(Debug, Clone)]
pub struct InventoryError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for InventoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                p.pos.line,
                p.pos.column,
                p.message
            )?;
            if !p.hint.is_empty() {
                write!(f, "\n    fix: {}", p.hint)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for InventoryError {}

// ---------------------------------------------------------- validated model
// (the raw model is in raw.rs, the rules that turn one into the other in
// validate.rs)

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Os {
    Linux,
    Windows,
}

impl fmt::Display for Os {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Os::Linux => "linux",
            Os::Windows => "windows",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    ControlPlane,
    Worker,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::ControlPlane => "control-plane",
            Role::Worker => "worker",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    pub cluster_cidr: Ipv4Net,
    pub node_prefix: u8,
    pub service_cidr: Ipv4Net,
    /// What Windows nodes' kubelet and kube-proxy talk to (required when
    /// there are Windows hosts; nothing on a Linux node uses it).
    pub api_server: Option<String>,
    /// The Kubernetes release the Windows nodes' binaries are (required
    /// when there are Windows hosts).
    pub kubernetes_version: Option<KubeVersion>,
    pub kubeconfig: Option<PathBuf>,
    /// `cluster.identity` as given (`None`: chosen by release and
    /// kubeconfig, os/windows/k8s/check.rs `identity`).
    pub identity_given: Option<Identity>,
    /// `None`: chosen by Kubernetes version and the host's Windows build.
    pub pause_image: Option<String>,
    /// As the inventory names it; [`Cluster::windows_profile`] is the one used.
    pub windows_profile_given: Option<WindowsProfile>,
    /// The containerd release the l2bridge profile installs.
    pub containerd_version: Option<ContainerdVersion>,
    /// The release of windows.binaries.kube-log-runner (`None`: kubernetes_version's).
    pub log_runner_version: Option<KubeVersion>,
    /// The cluster DNS service's address (kubelet's `--cluster-dns`).
    pub dns_service_ip: Ipv4Addr,
    /// The cluster's DNS domain (kubelet's `--cluster-domain`).
    pub dns_domain: String,
    /// The test pods of `verify --pods`.
    pub pod_check: PodCheckSettings,
    /// Where the API server reaches kubelets from besides the nodes
    /// (`cluster.api_server_sources`): the kubelet's firewall rule admits them.
    pub api_server_sources: Vec<Ipv4Net>,
    /// Where keys that later checks point at are in the inventory.
    pub pos: ClusterPos,
}

/// `cluster.pod_check`: the test pods `kwinctl verify --pods` starts.
#[derive(Debug, Clone)]
pub struct PodCheckSettings {
    pub namespace: String,
    /// `linux` or a Windows build number, to an image.
    pub images: BTreeMap<String, String>,
    pub start_timeout: std::time::Duration,
}

/// Positions of cluster keys, for checks made after loading (the Windows
/// profile's version rules in `os/windows/k8s.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterPos {
    pub name: Pos,
    pub api_server: Option<Pos>,
    pub kubernetes_version: Option<Pos>,
    pub kubeconfig: Option<Pos>,
    pub identity: Option<Pos>,
    pub pause_image: Option<Pos>,
    pub windows_profile: Option<Pos>,
    pub containerd_version: Option<Pos>,
    pub log_runner_version: Option<Pos>,
    pub dns_service_ip: Option<Pos>,
    pub dns_domain: Option<Pos>,
    pub cluster_cidr: Pos,
    pub service_cidr: Pos,
}

/// What the inventory says about an SSH connection. Each value set here is
/// given to OpenSSH's resolution as on `ssh`'s command line (`-l`, `-p`,
/// `-i`, `-o UserKnownHostsFile`): it wins over ssh_config.
#[derive(Debug, Clone)]
pub struct SshSettings {
    /// `None`: from ssh_config, else root.
    pub user: Option<String>,
    /// `None`: from ssh_config, else 22.
    pub port: Option<u16>,
    /// A key file offered first (as `ssh -i`).
    pub identity: Option<PathBuf>,
    /// `None`: ssh_config's UserKnownHostsFile (OpenSSH's default
    /// `~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// A jump host in front of the host (as `ssh -J`).
    pub bastion: Option<Bastion>,
}

/// An SSH jump host in front of a host (`ssh.bastion` / `winrm.bastion`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bastion {
    /// An address or a name (resolved through ssh_config as `ssh` would).
    pub address: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    /// Where it is written in the inventory.
    pub pos: Pos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WinRmAuth {
    Ntlm,
    Basic,
    Kerberos,
}

#[derive(Debug, Clone)]
pub enum PasswordSource {
    Env(String),
    File(PathBuf),
}

impl PasswordSource {
    /// The password (a file's trailing line break removed), or what is
    /// wrong, in words that say how to fix it.
    pub fn read(&self) -> Result<String, String> {
        match self {
            PasswordSource::Env(var) => std::env::var(var)
                .map_err(|_| format!("the WinRM password variable {var} is not set")),
            PasswordSource::File(p) => {
                crate::localfile::read_to_string(p, crate::localfile::Kind::Password)
                    .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
                    .map_err(|e| {
                        format!(
                            "the WinRM password file {} cannot be read: {e}",
                            p.display()
                        )
                    })
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct WinRmSettings {
    pub user: String,
    pub password: PasswordSource,
    pub port: u16,
    pub tls: bool,
    pub auth: WinRmAuth,
    pub ca_file: Option<PathBuf>,
    pub cert_sha256: Option<String>,
    pub allow_basic_over_http: bool,
    /// Kerberos: the keytab of `user` (none: the operator's credential
    /// cache, filled by `kinit`).
    pub keytab: Option<PathBuf>,
    /// Kerberos: the service principal's host part when it is not the
    /// address (`winrm.spn: HTTP/<name>`).
    pub spn_host: Option<String>,
    /// An SSH jump host in front of the host: WinRM goes through a tunnel.
    pub bastion: Option<Bastion>,
}

#[derive(Debug, Clone)]
pub enum Connection {
    Ssh(SshSettings),
    WinRm(WinRmSettings),
}

#[derive(Debug, Clone)]
pub struct Binary {
    pub url: Option<String>,
    pub path: Option<PathBuf>,
    pub sha256: Option<String>,
}

/// `windows.binaries_source`: who downloads a `url:` binary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BinariesSource {
    /// The node, from the URL.
    #[default]
    Node,
    /// kwinctl, once, into its cache on the operator's machine; then it is
    /// pushed to the nodes (`src/transfer/`).
    Push,
}

#[derive(Debug, Clone)]
pub struct WindowsSettings {
    /// The binaries kwinctl places (url or path).
    pub binaries: BTreeMap<String, Binary>,
    /// Where `url:` binaries come from.
    pub binaries_source: BinariesSource,
    /// The `windows.binaries` entries marked `preinstalled: true`: on the
    /// node already, placed by nobody (docs/inventory.md).
    pub preinstalled: Vec<String>,
    pub adapter: Option<String>,
    pub network_name: Option<String>,
    /// The network card the transparent network takes (never the routable
    /// one); chosen by preflight when not given.
    pub transparent_adapter: Option<String>,
    /// Extra sources allowed to reach kube-proxy.exe (NodePorts on the
    /// transparent profile), besides the nodes and the pod network.
    pub nodeport_sources: Vec<Ipv4Net>,
    /// Taints the kubelet registers the node with (`key[=value]:Effect`).
    pub taints: Vec<String>,
    /// `verify` fails a node whose kubelet client certificate expires
    /// within this many days (`src/identity/cert.rs`).
    pub cert_margin_days: u32,
}

/// `windows.cert_margin_days`'s default.
pub const DEFAULT_CERT_MARGIN_DAYS: u32 = 30;

impl Default for WindowsSettings {
    fn default() -> Self {
        WindowsSettings {
            binaries: BTreeMap::new(),
            binaries_source: BinariesSource::default(),
            preinstalled: Vec::new(),
            adapter: None,
            network_name: None,
            transparent_adapter: None,
            nodeport_sources: Vec::new(),
            taints: Vec::new(),
            cert_margin_days: DEFAULT_CERT_MARGIN_DAYS,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub os: Os,
    pub role: Role,
    pub address: Ipv4Addr,
    /// Where kwinctl connects when not `address` (`connect:`).
    pub connect: Option<Ipv4Addr>,
    /// The Kubernetes node name when not the host's name in lower case:
    /// `node_name:`, or the name the node already has (kept from the state
    /// file, identity/name.rs). Read it with [`Host::node_name`].
    pub node_name: Option<String>,
    pub pod_cidr: Option<Ipv4Net>,
    pub connection: Connection,
    pub windows: WindowsSettings,
    /// The declared groups it is in (not the built-in ones), in the order
    /// `groups:` declares them.
    pub groups: Vec<String>,
    pub linux: LinuxSettings,
    /// Where the host's entry starts in the inventory file.
    pub pos: Pos,
}

#[derive(Debug, Clone)]
pub struct Inventory {
    pub path: PathBuf,
    pub cluster: Cluster,
    pub hosts: Vec<Host>,
    /// The groups declared under `groups:` (built-in ones aside), in order.
    pub groups: Vec<String>,
    /// How a host with no settings of its own is reached, per OS (`None`
    /// when the defaults do not make a valid connection): what `reset` uses
    /// for a host removed from the inventory.
    pub default_connections: BTreeMap<Os, Connection>,
}

impl Inventory {
    /// Read and validate an inventory file.
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        let text = crate::localfile::read_to_string(path, crate::localfile::Kind::Inventory)
            .map_err(|e| InventoryError {
                file: path.to_path_buf(),
                problems: vec![Problem {
                    pos: Pos { line: 0, column: 0 },
                    message: format!("cannot read inventory: {e}"),
                    hint: "pass the path of an inventory file with -i".into(),
                }],
            })?;
        Self::parse(path, &text)
    }

    /// Parse and validate inventory text; `path` is used for messages and to
    /// resolve relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Inventory, InventoryError> {
        let err = |problems| InventoryError {
            file: path.to_path_buf(),
            problems,
        };
        let raw: RawInventory = serde_saphyr::from_str(text).map_err(|e| {
            let pos = e
                .location()
                .map(|l| Pos {
                    line: l.line() as usize,
                    column: l.column() as usize,
                })
                .unwrap_or_default();
            err(vec![Problem {
                pos,
                message: first_line(&e.to_string()),
                hint: yaml_hint(&e.to_string()),
            }])
        })?;
        // placeholders first: until they are filled in, what else is wrong
        // may only be their consequence
        let unfilled = placeholder::problems(text);
        if !unfilled.is_empty() {
            return Err(err(unfilled));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut v = Validator {
            base: base.to_path_buf(),
            problems: Vec::new(),
        };
        let inv = v.inventory(path, raw);
        if v.problems.is_empty() {
            Ok(inv.expect("validated inventory"))
        } else {
            v.problems.sort_by_key(|p| (p.pos.line, p.pos.column));
            Err(err(v.problems))
        }
    }

    /// The hosts of a group, built-in (`all`, `linux`, `windows`,
    /// `control-plane`, `worker`) or declared (names without case); `None`
    /// when there is no such group.
    pub fn group_members(&self, group: &str) -> Option<Vec<&Host>> {
        let g = group.to_ascii_lowercase();
        let member = |h: &Host| match g.as_str() {
            "all" => true,
            "linux" => h.os == Os::Linux,
            "windows" => h.os == Os::Windows,
            "control-plane" => h.role == Role::ControlPlane,
            "worker" => h.role == Role::Worker,
            _ => h.groups.iter().any(|x| x.eq_ignore_ascii_case(&g)),
        };
        let known = g == "all"
            || BUILT_IN_GROUPS.contains(&g.as_str())
            || self.groups.iter().any(|x| x.eq_ignore_ascii_case(&g));
        known.then(|| self.hosts.iter().filter(|h| member(h)).collect())
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
    }
}

/// Names end up in file names, unit names and scripts: keep them plain.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Expand `~/` and make relative paths relative to the inventory's folder.
pub fn expand_path(base: &Path, s: &str) -> PathBuf {
    if let Some(rest) = s.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let p = PathBuf::from(s);
    if p.is_absolute() { p } else { base.join(p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const GOOD: &str = "\
cluster:
  name: demo
  cluster_cidr: 192.168.0.0/16
  service_cidr: 10.96.0.0/12
  api_server: http://10.0.0.10:8080
  kubernetes_version: 1.7.16
hosts:
  - name: lin01
    os: linux
    role: control-plane
    address: 10.0.0.10
  - name: win01
    os: windows
    address: 10.0.0.11
    pod_cidr: 192.168.1.0/24
";

    fn parse(s: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(Path::new("inv.yaml"), s)
    }

    fn first(s: &str) -> Problem {
        parse(s).unwrap_err().problems.remove(0)
    }

    #[test]
    fn a_windows_node_is_named_by_its_host_name_unless_told() {
        let inv = parse(&GOOD.replace("name: win01", "name: WIN01")).unwrap();
        assert_eq!(inv.hosts[1].node_name(), "win01");
        let named = GOOD.replace(
            "address: 10.0.0.11",
            "address: 10.0.0.11\n    node_name: win-01.lab",
        );
        assert_eq!(parse(&named).unwrap().hosts[1].node_name(), "win-01.lab");
        let p = first(&GOOD.replace(
            "address: 10.0.0.11",
            "address: 10.0.0.11\n    node_name: Win_01",
        ));
        assert!(p.message.contains("not a Kubernetes node name"), "{p:?}");
        let p = first(&GOOD.replace("name: win01", "name: win_01"));
        assert!(
            p.message.contains("cannot be a Kubernetes node name"),
            "{p:?}"
        );
        assert!(p.hint.contains("node_name"), "{p:?}");
        let p = first(&GOOD.replace(
            "address: 10.0.0.10",
            "address: 10.0.0.10\n    node_name: lin01",
        ));
        assert!(p.message.contains("for Windows hosts"), "{p:?}");
        let two = format!(
            "{GOOD}  - name: win02\n    os: windows\n    address: 10.0.0.12\n    node_name: win01\n"
        );
        let p = first(&two);
        assert!(
            p.message
                .contains("registers as node win01, as host win01 does"),
            "{p:?}"
        );
    }

    #[test]
    fn a_connect_address_must_be_an_address() {
        let with = |c: &str| {
            GOOD.replace(
                "address: 10.0.0.11",
                &format!("address: 10.0.0.11\n    connect: {c}"),
            )
        };
        let inv = parse(&with("203.0.113.7")).unwrap();
        assert_eq!(inv.hosts[1].reach().to_string(), "203.0.113.7");
        assert_eq!(inv.hosts[1].address.to_string(), "10.0.0.11");
        assert_eq!(inv.hosts[0].reach(), inv.hosts[0].address);
        let p = first(&with("win01.example"));
        assert!(
            p.message.contains("connect \"win01.example\" is not"),
            "{p:?}"
        );
        assert_eq!(p.pos.line, 15, "{p:?}");
    }

    #[test]
    fn good_inventory_parses_with_defaults() {
        let inv = parse(GOOD).unwrap();
        assert_eq!(inv.cluster.node_prefix, 24);
        assert_eq!(inv.hosts.len(), 2);
        assert_eq!(inv.hosts[0].role, Role::ControlPlane);
        assert_eq!(
            inv.hosts[1].pod_cidr,
            Some("192.168.1.0/24".parse().unwrap())
        );
        match &inv.hosts[1].connection {
            Connection::WinRm(w) => {
                assert_eq!(w.port, 5986);
                assert!(w.tls);
                assert_eq!(w.auth, WinRmAuth::Ntlm);
            }
            c => panic!("expected winrm, got {c:?}"),
        }
        assert_eq!(inv.hosts[0].pos.line, 8);
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let p = first(&GOOD.replace("    role: control-plane\n", "    rol: control-plane\n"));
        assert_eq!(p.pos.line, 10, "{p:?}");
        assert!(p.message.contains("rol"), "{p:?}");
    }

    #[test]
    fn duplicate_name_and_address() {
        let s = GOOD
            .replace("name: win01", "name: LIN01")
            .replace("10.0.0.11", "10.0.0.10");
        let e = parse(&s).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("inv.yaml:12:11: duplicate host name"),
            "{text}"
        );
        assert!(
            text.contains("inv.yaml:14:14: duplicate address 10.0.0.10"),
            "{text}"
        );
    }

    #[test]
    fn pin_outside_cluster_and_wrong_size() {
        let p = first(&GOOD.replace("192.168.1.0/24", "10.200.1.0/24"));
        assert!(p.message.contains("outside the cluster CIDR"), "{p:?}");
        assert_eq!(p.pos.line, 15);
        let p = first(&GOOD.replace("192.168.1.0/24", "192.168.1.0/25"));
        assert!(p.message.contains("node_prefix"), "{p:?}");
    }

    #[test]
    fn overlapping_pins() {
        let s = GOOD.replace(
            "    role: control-plane\n",
            "    role: control-plane\n    pod_cidr: 192.168.1.0/24\n",
        );
        let p = first(&s);
        assert!(p.message.contains("overlaps host"), "{p:?}");
    }

    #[test]
    fn service_cidr_overlap_and_address_collisions() {
        let p = first(&GOOD.replace("10.96.0.0/12", "192.168.128.0/17"));
        assert!(p.message.contains("overlaps cluster_cidr"), "{p:?}");
        let p = first(&GOOD.replace("address: 10.0.0.10", "address: 192.168.7.7"));
        assert!(p.message.contains("inside the cluster CIDR"), "{p:?}");
        let p = first(&GOOD.replace("address: 10.0.0.10", "address: 10.96.0.1"));
        assert!(p.message.contains("inside the service CIDR"), "{p:?}");
    }

    /// `windows.nodeport_sources`: IPv4 CIDRs, sorted and deduplicated,
    /// from a group or the defaults as any windows key; a bad entry is a
    /// problem at the list's line and column.
    #[test]
    fn nodeport_sources_are_cidrs() {
        let with = |list: &str| {
            GOOD.replace(
                "    pod_cidr: 192.168.1.0/24\n",
                &format!(
                    "    pod_cidr: 192.168.1.0/24\n    windows:\n      nodeport_sources: {list}\n"
                ),
            )
        };
        let inv = parse(&with("[203.0.113.0/24, 0.0.0.0/0, 203.0.113.0/24]")).unwrap();
        let w = &inv.hosts[1].windows;
        assert_eq!(
            w.nodeport_sources
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
            ["0.0.0.0/0", "203.0.113.0/24"]
        );
        assert!(inv.hosts[0].windows.nodeport_sources.is_empty());
        let p = first(&with("[203.0.113.7/24]"));
        assert!(p.message.contains("has host bits set"), "{p:?}");
        assert_eq!(p.hint, "write it as 203.0.113.0/24");
        assert_eq!((p.pos.line, p.pos.column), (17, 25), "{p:?}");
        let p = first(&with("[\"everyone\"]"));
        assert!(
            p.message.contains("\"everyone\" is not an IPv4 CIDR"),
            "{p:?}"
        );
        let defaults = GOOD.replace(
            "hosts:\n",
            "defaults:\n  windows:\n    nodeport_sources: [198.51.100.0/24]\nhosts:\n",
        );
        let inv = parse(&defaults).unwrap();
        assert_eq!(inv.hosts[1].windows.nodeport_sources.len(), 1);
    }

    /// `windows.cert_margin_days`: 30 unless given, from the defaults as
    /// any windows key; more than ten years is refused at its line.
    #[test]
    fn cert_margin_days_defaults_to_30() {
        let inv = parse(GOOD).unwrap();
        assert_eq!(inv.hosts[1].windows.cert_margin_days, 30);
        let with = |days: &str| {
            GOOD.replace(
                "hosts:\n",
                &format!("defaults:\n  windows:\n    cert_margin_days: {days}\nhosts:\n"),
            )
        };
        let inv = parse(&with("7")).unwrap();
        assert_eq!(inv.hosts[1].windows.cert_margin_days, 7);
        let p = first(&with("4000"));
        assert!(p.message.contains("cert_margin_days 4000"), "{p:?}");
    }

    /// `windows.taints` as the kubelet takes them; `cluster.api_server_sources`
    /// are CIDRs as nodeport_sources.
    #[test]
    fn taints_and_api_server_sources_are_checked() {
        let with = |list: &str| {
            GOOD.replace(
                "    pod_cidr: 192.168.1.0/24\n",
                &format!("    pod_cidr: 192.168.1.0/24\n    windows:\n      taints: {list}\n"),
            )
        };
        let inv = parse(&with(
            "[\"os=windows:NoSchedule\", \"example.com/gpu:NoExecute\"]",
        ))
        .unwrap();
        assert_eq!(
            inv.hosts[1].windows.taints,
            ["os=windows:NoSchedule", "example.com/gpu:NoExecute"]
        );
        assert!(inv.hosts[0].windows.taints.is_empty());
        for bad in [
            "os=windows",
            "os=windows:NoRun",
            "=x:NoSchedule",
            "a b:NoSchedule",
        ] {
            let p = first(&with(&format!("[\"{bad}\"]")));
            assert!(p.message.contains("is not a taint"), "{bad}: {p:?}");
            assert!(p.hint.contains("key[=value]:Effect"), "{p:?}");
        }
        let vip = GOOD.replace(
            "cluster:\n",
            "cluster:\n  api_server_sources: [198.18.9.10/32, 198.18.9.10/32]\n",
        );
        let inv = parse(&vip).unwrap();
        assert_eq!(inv.cluster.api_server_sources.len(), 1);
        let p = first(&GOOD.replace(
            "cluster:\n",
            "cluster:\n  api_server_sources: [vip.example]\n",
        ));
        assert!(
            p.message
                .contains("cluster.api_server_sources: \"vip.example\" is not an IPv4 CIDR"),
            "{p:?}"
        );
    }

    #[test]
    fn cluster_dns_defaults_to_the_tenth_service_address_and_is_checked() {
        let inv = parse(GOOD).unwrap();
        assert_eq!(inv.cluster.dns_service_ip.to_string(), "10.96.0.10");
        assert_eq!(inv.cluster.dns_domain, "cluster.local");
        let with = |extra: &str| {
            GOOD.replace(
                "  service_cidr: 10.96.0.0/12\n",
                &format!("  service_cidr: 10.96.0.0/12\n{extra}"),
            )
        };
        let inv = parse(&with(
            "  dns_service_ip: 10.96.0.53\n  dns_domain: Corp.Example.\n",
        ))
        .unwrap();
        assert_eq!(inv.cluster.dns_service_ip.to_string(), "10.96.0.53");
        assert_eq!(inv.cluster.dns_domain, "corp.example");
        let p = first(&with("  dns_service_ip: 10.0.0.10\n"));
        assert!(
            p.message
                .contains("not a service address of service_cidr 10.96.0.0/12"),
            "{p:?}"
        );
        assert!(p.hint.contains("10.96.0.10"), "{p:?}");
        assert_eq!((p.pos.line, p.pos.column), (5, 19), "{p:?}");
        let p = first(&with("  dns_service_ip: 10.96.0.0\n"));
        assert!(p.message.contains("not a service address"), "{p:?}");
        let p = first(&with("  dns_service_ip: kube-dns\n"));
        assert!(p.message.contains("not an IPv4 address"), "{p:?}");
        for bad in ["-bad.local", "a..b", "under_score.local", "x y"] {
            let p = first(&with(&format!("  dns_domain: \"{bad}\"\n")));
            assert!(p.message.contains("is not a DNS domain"), "{bad}: {p:?}");
        }
    }

    #[test]
    fn pod_check_settings_are_checked() {
        let inv = parse(GOOD).unwrap();
        assert_eq!(inv.cluster.pod_check.namespace, "default");
        assert_eq!(inv.cluster.pod_check.start_timeout.as_secs(), 300);
        let with = |extra: &str| {
            GOOD.replace(
                "  service_cidr: 10.96.0.0/12\n",
                &format!("  service_cidr: 10.96.0.0/12\n  pod_check:\n{extra}"),
            )
        };
        let inv = parse(&with(
            "    namespace: kw-test\n    start_timeout: 900\n    images:\n      linux: busybox:1.36\n      \"14393\": ex/probe:ltsc2016\n      windows: ex/probe:1809\n",
        ))
        .unwrap();
        let pc = &inv.cluster.pod_check;
        assert_eq!(pc.namespace, "kw-test");
        assert_eq!(pc.start_timeout.as_secs(), 900);
        assert_eq!(pc.images["14393"], "ex/probe:ltsc2016");
        assert_eq!(pc.images.len(), 3);
        for (bad, says) in [
            ("    namespace: Bad.Name\n", "not a namespace name"),
            ("    namespace: A\n", "not a namespace name"),
            (
                "    images:\n      mac: x/y:1\n",
                "neither `linux`, `windows` nor a Windows build number",
            ),
            (
                "    images:\n      linux: \"x y\"\n",
                "not an image reference",
            ),
            ("    start_timeout: 5\n", "out of range"),
        ] {
            let p = first(&with(bad));
            assert!(p.message.contains(says), "{bad}: {p:?}");
        }
    }

    #[test]
    fn cluster_too_small() {
        let s = GOOD
            .replace("192.168.0.0/16", "192.168.0.0/24")
            .replace("    pod_cidr: 192.168.1.0/24\n", "");
        let p = first(&s);
        assert!(p.message.contains("do not fit"), "{p:?}");
    }

    #[test]
    fn host_bits_and_bad_values() {
        let p = first(&GOOD.replace("192.168.0.0/16", "192.168.0.1/16"));
        assert!(p.hint.contains("192.168.0.0/16"), "{p:?}");
        let p = first(&GOOD.replace("address: 10.0.0.11", "address: win01.local"));
        assert!(p.message.contains("not an IPv4 address"), "{p:?}");
        let p = first(&GOOD.replace("os: windows", "os: plan9"));
        assert!(p.message.contains("plan9"), "{p:?}");
    }

    #[test]
    fn malformed_yaml_and_empty_hosts() {
        let e = parse("cluster: [\n").unwrap_err();
        assert!(e.problems[0].pos.line >= 1, "{e}");
        let s = GOOD.split("hosts:").next().unwrap().to_string() + "hosts: []\n";
        let p = first(&s);
        assert!(p.message.contains("empty"), "{p:?}");
    }

    #[test]
    fn windows_hosts_need_a_version_and_credentials_for_https() {
        let e = parse(&GOOD.replace("  kubernetes_version: 1.7.16\n", ""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "inv.yaml:2:9: cluster.kubernetes_version is required: host win01 is a Windows node"
            ),
            "{e}"
        );
        let p = first(&GOOD.replace("1.7.16", "1.sixteen"));
        assert_eq!((p.pos.line, p.pos.column), (6, 23), "{p:?}");
        assert!(p.message.contains("not a Kubernetes release"), "{p:?}");
        let https = GOOD.replace("http://10.0.0.10:8080", "https://10.0.0.10:6443");
        // (without `identity: shared` the release decides, in os/windows/k8s)
        let shared = https.replace(
            "  kubernetes_version: 1.7.16\n",
            "  kubernetes_version: 1.7.16\n  identity: shared\n",
        );
        let p = first(&shared);
        assert_eq!(p.pos.line, 5, "{p:?}");
        assert!(p.message.contains("without cluster.kubeconfig"), "{p:?}");
        assert!(p.hint.contains("embedded credentials"), "{p:?}");
        // Linux only: neither is needed
        let linux = https
            .split("  - name: win01")
            .next()
            .unwrap()
            .replace("  kubernetes_version: 1.7.16\n", "");
        assert!(parse(&linux).is_ok());
    }

    #[test]
    fn a_kubeconfig_that_points_at_files_is_refused_with_its_own_line() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubelet.kubeconfig");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.10:6443\n    certificate-authority: /etc/kubernetes/pki/ca.crt\nusers:\n- name: u\n  user:\n    token: abc\n",
        )
        .unwrap();
        let inv = GOOD.replace(
            "http://10.0.0.10:8080\n",
            "https://10.0.0.10:6443\n  kubeconfig: kubelet.kubeconfig\n",
        );
        let e = Inventory::parse(&dir.path().join("inv.yaml"), &inv)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":6:15: kubeconfig "), "{e}");
        assert!(
            e.contains("kubelet.kubeconfig:7:28: clusters[0].cluster.certificate-authority refers to the file \"/etc/kubernetes/pki/ca.crt\""),
            "{e}"
        );
        assert!(e.contains("fix: use certificate-authority-data"), "{e}");
        let e = Inventory::parse(
            &dir.path().join("inv.yaml"),
            &inv.replace("kubelet.kubeconfig", "missing"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }

    #[test]
    fn basic_over_http_refused() {
        let s = GOOD.replace(
            "    pod_cidr: 192.168.1.0/24\n",
            "    pod_cidr: 192.168.1.0/24\n    winrm: { auth: basic, tls: false }\n",
        );
        let p = first(&s);
        assert!(p.message.contains("Basic"), "{p:?}");
    }

    #[test]
    fn bastions_validated_with_positions() {
        let with = |b: &str| {
            GOOD.replace(
                "    role: control-plane\n",
                &format!("    role: control-plane\n    ssh:\n      bastion: {b}\n"),
            )
        };
        let inv = parse(&with("{ address: 10.0.0.5, user: ops, port: 2222 }")).unwrap();
        let Connection::Ssh(s) = &inv.hosts[0].connection else {
            panic!("ssh")
        };
        let b = s.bastion.as_ref().expect("bastion");
        assert_eq!(
            (b.address.as_str(), b.port, b.user.as_deref()),
            ("10.0.0.5", Some(2222), Some("ops"))
        );
        let bad = with("{ address: \"bad host!\" }");
        let line = bad.lines().position(|l| l.contains("bastion:")).unwrap() + 1;
        let p = first(&bad);
        assert_eq!((p.pos.line, p.pos.column), (line, 27), "{p:?}");
        assert!(p.message.contains("bastion address"), "{p:?}");
        // a key file that cannot be read: found before connecting, at the
        // bastion's line
        let unread = with("{ address: 10.0.0.5, identity: /nonexistent/bastion-key }");
        let inv = parse(&unread).unwrap();
        let e = inv
            .check_credentials(&inv.hosts.iter().collect::<Vec<_>>())
            .expect_err("an unreadable bastion key");
        let p = &e.problems[0];
        assert_eq!(p.pos.line, line, "{p:?}");
        assert!(
            p.message
                .contains("bastion identity file /nonexistent/bastion-key cannot be read"),
            "{p:?}"
        );
        let p = first(&with("{ address: 10.0.0.5, port: 0 }"));
        assert!(p.message.contains("port 0"), "{p:?}");
        let p = first(&with("{ address: 10.0.0.5, proxy: x }"));
        assert!(p.message.contains("unknown field"), "{p:?}");
        assert_eq!(p.pos.line, line, "{p:?}");
        // winrm hosts take one too
        let s = GOOD.replace(
            "    pod_cidr: 192.168.1.0/24\n",
            "    pod_cidr: 192.168.1.0/24\n    winrm: { bastion: { address: jump.example } }\n",
        );
        let inv = parse(&s).unwrap();
        let Connection::WinRm(w) = &inv.hosts[1].connection else {
            panic!("winrm")
        };
        assert_eq!(w.bastion.as_ref().unwrap().address, "jump.example");
    }
}
