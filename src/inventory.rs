//! Inventory: the YAML model, defaults and validation.
//!
//! Every error names `file:line:column` and says how to fix it. Parsing keeps
//! source positions (serde-saphyr's `Spanned`) for every value a validation
//! rule can point at, so semantic errors (duplicates, overlaps) point at the
//! offending value, not just at the file.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::Deserialize;
use serde_saphyr::Spanned;

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

// ---------------------------------------------------------------- raw model

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInventory {
    cluster: RawCluster,
    #[serde(default)]
    defaults: RawDefaults,
    hosts: Spanned<Vec<Spanned<RawHost>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Spanned<String>,
    cluster_cidr: Spanned<String>,
    #[serde(default)]
    node_prefix: Option<Spanned<u8>>,
    service_cidr: Spanned<String>,
    api_server: Spanned<String>,
    #[serde(default)]
    kubeconfig: Option<Spanned<String>>,
    #[serde(default)]
    pause_image: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    #[serde(default)]
    ssh: Option<RawSsh>,
    #[serde(default)]
    winrm: Option<RawWinRm>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSsh {
    user: Option<String>,
    port: Option<u16>,
    identity: Option<Spanned<String>>,
    known_hosts: Option<Spanned<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWinRm {
    user: Option<String>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    port: Option<u16>,
    tls: Option<bool>,
    auth: Option<Spanned<String>>,
    ca_file: Option<Spanned<String>>,
    cert_sha256: Option<Spanned<String>>,
    allow_basic_over_http: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: Spanned<String>,
    os: Spanned<String>,
    #[serde(default)]
    role: Option<Spanned<String>>,
    address: Spanned<String>,
    #[serde(default)]
    pod_cidr: Option<Spanned<String>>,
    #[serde(default)]
    ssh: Option<RawSsh>,
    #[serde(default)]
    winrm: Option<RawWinRm>,
    #[serde(default)]
    windows: Option<RawWindows>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindows {
    #[serde(default)]
    binaries: BTreeMap<String, RawBinary>,
    #[serde(default)]
    adapter: Option<String>,
    #[serde(default)]
    network_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBinary {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
}

// ---------------------------------------------------------- validated model

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    ControlPlane,
    Worker,
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    pub cluster_cidr: Ipv4Net,
    pub node_prefix: u8,
    pub service_cidr: Ipv4Net,
    pub api_server: String,
    pub kubeconfig: Option<PathBuf>,
    pub pause_image: String,
}

#[derive(Debug, Clone)]
pub struct SshSettings {
    /// `None`: from `~/.ssh/config`, else root.
    pub user: Option<String>,
    /// `None`: from `~/.ssh/config`, else 22.
    pub port: Option<u16>,
    /// Explicit key file; `None` means ssh-agent and then `~/.ssh/config`.
    pub identity: Option<PathBuf>,
    pub known_hosts: PathBuf,
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

#[derive(Debug, Clone, Default)]
pub struct WindowsSettings {
    pub binaries: BTreeMap<String, Binary>,
    pub adapter: Option<String>,
    pub network_name: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub os: Os,
    pub role: Role,
    pub address: Ipv4Addr,
    pub pod_cidr: Option<Ipv4Net>,
    pub connection: Connection,
    pub windows: WindowsSettings,
    /// Where the host's entry starts in the inventory file.
    pub pos: Pos,
}

#[derive(Debug, Clone)]
pub struct Inventory {
    pub path: PathBuf,
    pub cluster: Cluster,
    pub hosts: Vec<Host>,
}

pub const DEFAULT_PAUSE_IMAGE: &str = "mcr.microsoft.com/k8s/core/pause:1.2.0";

impl Inventory {
    /// Read and validate an inventory file.
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        let text = std::fs::read_to_string(path).map_err(|e| InventoryError {
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

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
    }

    /// Check what connecting needs from the operator's machine (key files,
    /// password variables), before anything is contacted.
    pub fn check_credentials(&self, hosts: &[&Host]) -> Result<(), InventoryError> {
        let mut problems = Vec::new();
        for h in hosts {
            match &h.connection {
                Connection::Ssh(s) => {
                    if let Some(id) = &s.identity
                        && let Err(e) = std::fs::File::open(id)
                    {
                        problems.push(Problem {
                            pos: h.pos,
                            message: format!(
                                "host {}: identity file {} cannot be read: {e}",
                                h.name,
                                id.display()
                            ),
                            hint: "point ssh.identity at a readable private key, or remove it to use ssh-agent".into(),
                        });
                    }
                }
                Connection::WinRm(w) => match &w.password {
                    PasswordSource::Env(var) => {
                        if std::env::var_os(var).is_none() {
                            problems.push(Problem {
                                pos: h.pos,
                                message: format!(
                                    "host {}: the WinRM password variable {var} is not set",
                                    h.name
                                ),
                                hint: format!("export {var}=... before running kwinctl"),
                            });
                        }
                    }
                    PasswordSource::File(p) => {
                        if let Err(e) = std::fs::read_to_string(p) {
                            problems.push(Problem {
                                pos: h.pos,
                                message: format!(
                                    "host {}: the WinRM password file {} cannot be read: {e}",
                                    h.name,
                                    p.display()
                                ),
                                hint: "point winrm.password_file at a readable file".into(),
                            });
                        }
                    }
                },
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InventoryError {
                file: self.path.clone(),
                problems,
            })
        }
    }
}

/// The first line of a YAML error, without the parser's own
/// `error: line L column C:` prefix (we print the position ourselves).
fn first_line(s: &str) -> String {
    let mut l = s.lines().next().unwrap_or("invalid YAML").trim();
    l = l.strip_prefix("error: ").unwrap_or(l);
    if l.starts_with("line ")
        && let Some((_, rest)) = l.split_once(": ")
    {
        l = rest;
    }
    l.to_string()
}

fn yaml_hint(msg: &str) -> String {
    if msg.contains("unknown field") {
        "remove the key or fix its spelling; see the inventory format in README.md".into()
    } else if [
        "invalid u8",
        "invalid u16",
        "invalid type: string",
        "expected u",
    ]
    .iter()
    .any(|t| msg.contains(t))
    {
        "this key takes a whole number (a port, a prefix length)".into()
    } else if msg.contains("invalid type") {
        "wrong type for this key; see the inventory format in README.md".into()
    } else if msg.contains("missing field") {
        "add the missing key; see the inventory format in README.md".into()
    } else {
        "fix the YAML at that position; see the inventory format in README.md".into()
    }
}

struct Validator {
    base: PathBuf,
    problems: Vec<Problem>,
}

impl Validator {
    fn problem(&mut self, pos: Pos, message: impl Into<String>, hint: impl Into<String>) {
        self.problems.push(Problem {
            pos,
            message: message.into(),
            hint: hint.into(),
        });
    }

    fn path(&self, s: &str) -> PathBuf {
        expand_path(&self.base, s)
    }

    fn net(&mut self, s: &Spanned<String>, what: &str) -> Option<Ipv4Net> {
        match s.value.trim().parse::<Ipv4Net>() {
            Ok(n) if n.network() != n.addr() => {
                self.problem(
                    s.into(),
                    format!("{what} {} has host bits set", s.value),
                    format!("write it as {}", n.trunc()),
                );
                None
            }
            Ok(n) => Some(n),
            Err(_) => {
                self.problem(
                    s.into(),
                    format!("{what} {:?} is not an IPv4 CIDR", s.value),
                    "write it as address/prefix, e.g. 192.168.0.0/16",
                );
                None
            }
        }
    }

    fn inventory(&mut self, path: &Path, raw: RawInventory) -> Option<Inventory> {
        let cluster = self.cluster(&raw.cluster);
        let defaults = raw.defaults;
        let mut hosts = Vec::new();
        if raw.hosts.value.is_empty() {
            self.problem(
                (&raw.hosts).into(),
                "the host list is empty",
                "add at least one host under `hosts:`",
            );
        }
        let mut names: HashMap<String, Pos> = HashMap::new();
        let mut addrs: HashMap<Ipv4Addr, (String, Pos)> = HashMap::new();
        for h in &raw.hosts.value {
            let Some(host) = self.host(h, &defaults) else {
                continue;
            };
            let lname = host.name.to_ascii_lowercase();
            let npos = Pos::from(&h.value.name);
            if let Some(prev) = names.get(&lname) {
                self.problem(
                    npos,
                    format!(
                        "duplicate host name {:?} (first used at line {})",
                        host.name, prev.line
                    ),
                    "give every host a unique name (names are compared without case)",
                );
            } else {
                names.insert(lname, npos);
            }
            let apos = Pos::from(&h.value.address);
            if let Some((other, prev)) = addrs.get(&host.address) {
                self.problem(
                    apos,
                    format!(
                        "duplicate address {} (host {other} at line {} has it too)",
                        host.address, prev.line
                    ),
                    "every host needs its own routable address",
                );
            } else {
                addrs.insert(host.address, (host.name.clone(), apos));
            }
            hosts.push((host, h));
        }
        let cluster = cluster?;
        // Cross-checks against the cluster networks.
        let mut pins: Vec<(Ipv4Net, String, Pos)> = Vec::new();
        for (host, raw_host) in &hosts {
            let apos = Pos::from(&raw_host.value.address);
            if cluster.cluster_cidr.contains(&host.address) {
                self.problem(
                    apos,
                    format!(
                        "host {} address {} is inside the cluster CIDR {}",
                        host.name, host.address, cluster.cluster_cidr
                    ),
                    "the routable address must be on the node network, outside cluster_cidr: fix the address or pick another cluster_cidr",
                );
            }
            if cluster.service_cidr.contains(&host.address) {
                self.problem(
                    apos,
                    format!(
                        "host {} address {} is inside the service CIDR {}",
                        host.name, host.address, cluster.service_cidr
                    ),
                    "pick a service_cidr that does not contain node addresses",
                );
            }
            if let (Some(pin), Some(rp)) = (host.pod_cidr, &raw_host.value.pod_cidr) {
                let ppos = Pos::from(rp);
                if pin.prefix_len() != cluster.node_prefix {
                    self.problem(
                        ppos,
                        format!(
                            "host {} pod_cidr {pin} is a /{}, but node_prefix is {}",
                            host.name,
                            pin.prefix_len(),
                            cluster.node_prefix
                        ),
                        format!("pin a /{} block", cluster.node_prefix),
                    );
                } else if !cluster.cluster_cidr.contains(&pin) {
                    self.problem(
                        ppos,
                        format!(
                            "host {} pod_cidr {pin} is outside the cluster CIDR {}",
                            host.name, cluster.cluster_cidr
                        ),
                        "pin a block inside cluster_cidr, or remove the pin to have one assigned",
                    );
                } else if let Some((_, other, opos)) =
                    pins.iter().find(|(n, _, _)| nets_overlap(n, &pin))
                {
                    self.problem(
                        ppos,
                        format!(
                            "host {} pod_cidr {pin} overlaps host {other}'s pin (line {})",
                            host.name, opos.line
                        ),
                        "pin each host to its own block",
                    );
                } else {
                    pins.push((pin, host.name.clone(), ppos));
                }
                if pin.contains(&host.address) {
                    self.problem(
                        ppos,
                        format!("host {} pod_cidr {pin} contains its own address", host.name),
                        "pod CIDRs must not contain node addresses",
                    );
                }
            }
        }
        let blocks = block_count(&cluster.cluster_cidr, cluster.node_prefix);
        if (hosts.len() as u64) > blocks {
            self.problem(
                (&raw.cluster.cluster_cidr).into(),
                format!(
                    "{} hosts do not fit in cluster CIDR {}: it holds {blocks} /{} blocks",
                    hosts.len(),
                    cluster.cluster_cidr,
                    cluster.node_prefix
                ),
                "use a larger cluster_cidr or a longer node_prefix",
            );
        }
        Some(Inventory {
            path: path.to_path_buf(),
            cluster,
            hosts: hosts.into_iter().map(|(h, _)| h).collect(),
        })
    }

    fn cluster(&mut self, c: &RawCluster) -> Option<Cluster> {
        let name_ok = valid_name(&c.name.value);
        if !name_ok {
            self.problem(
                (&c.name).into(),
                format!("cluster name {:?} is not a valid name", c.name.value),
                "use letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)",
            );
        }
        let cluster_cidr = self.net(&c.cluster_cidr, "cluster_cidr");
        let service_cidr = self.net(&c.service_cidr, "service_cidr");
        let node_prefix = c.node_prefix.as_ref().map(|p| p.value).unwrap_or(24);
        let mut ok = name_ok && cluster_cidr.is_some() && service_cidr.is_some();
        if let Some(cc) = cluster_cidr {
            let ppos = c
                .node_prefix
                .as_ref()
                .map(Pos::from)
                .unwrap_or((&c.cluster_cidr).into());
            if node_prefix < cc.prefix_len() || node_prefix > 30 {
                self.problem(
                    ppos,
                    format!(
                        "node_prefix {node_prefix} must be between the cluster CIDR's /{} and 30",
                        cc.prefix_len()
                    ),
                    "the seed uses a /16 cluster CIDR with node_prefix 24",
                );
                ok = false;
            }
            if let Some(sc) = service_cidr
                && nets_overlap(&cc, &sc)
            {
                self.problem(
                    (&c.service_cidr).into(),
                    format!("service_cidr {sc} overlaps cluster_cidr {cc}"),
                    "pick separate ranges for pods and services",
                );
                ok = false;
            }
        }
        let api = c.api_server.value.trim();
        if !(api.starts_with("https://") || api.starts_with("http://")) || api.len() < 10 {
            self.problem(
                (&c.api_server).into(),
                format!("api_server {api:?} is not a URL"),
                "write it as https://HOST:PORT",
            );
            ok = false;
        }
        let kubeconfig = c.kubeconfig.as_ref().map(|k| self.path(&k.value));
        let pause_image = c
            .pause_image
            .as_ref()
            .map(|p| p.value.clone())
            .unwrap_or_else(|| DEFAULT_PAUSE_IMAGE.to_string());
        if !ok {
            return None;
        }
        Some(Cluster {
            name: c.name.value.clone(),
            cluster_cidr: cluster_cidr?,
            node_prefix,
            service_cidr: service_cidr?,
            api_server: api.to_string(),
            kubeconfig,
            pause_image,
        })
    }

    fn host(&mut self, sh: &Spanned<RawHost>, defaults: &RawDefaults) -> Option<Host> {
        let h = &sh.value;
        let pos = Pos::from(sh);
        let mut ok = true;
        if !valid_name(&h.name.value) {
            self.problem(
                (&h.name).into(),
                format!("host name {:?} is not a valid name", h.name.value),
                "use letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)",
            );
            ok = false;
        }
        let os = match h.os.value.to_ascii_lowercase().as_str() {
            "linux" => Some(Os::Linux),
            "windows" => Some(Os::Windows),
            other => {
                self.problem(
                    (&h.os).into(),
                    format!("os {other:?} is not supported"),
                    "use `linux` or `windows`",
                );
                None
            }
        };
        let role = match h.role.as_ref().map(|r| r.value.as_str()) {
            None | Some("worker") => Role::Worker,
            Some("control-plane") => Role::ControlPlane,
            Some(other) => {
                self.problem(
                    h.role.as_ref().unwrap().into(),
                    format!("role {other:?} is not known"),
                    "use `control-plane` or `worker`",
                );
                ok = false;
                Role::Worker
            }
        };
        let address = match h.address.value.trim().parse::<Ipv4Addr>() {
            Ok(a) if a.is_unspecified() || a.is_broadcast() || a.is_multicast() => {
                self.problem(
                    (&h.address).into(),
                    format!("address {a} cannot be a node address"),
                    "use the node's routable unicast IPv4 address",
                );
                None
            }
            Ok(a) => Some(a),
            Err(_) => {
                self.problem(
                    (&h.address).into(),
                    format!("address {:?} is not an IPv4 address", h.address.value),
                    "use the node's routable IPv4 address, e.g. 10.0.0.11 (names are not resolved)",
                );
                None
            }
        };
        let pod_cidr = match &h.pod_cidr {
            Some(p) => self.net(p, "pod_cidr").map(Some),
            None => Some(None),
        };
        let connection = os.and_then(|os| self.connection(os, h, defaults, pos));
        let windows = h
            .windows
            .as_ref()
            .map(|w| WindowsSettings {
                binaries: w
                    .binaries
                    .iter()
                    .map(|(k, b)| {
                        (
                            k.clone(),
                            Binary {
                                url: b.url.clone(),
                                path: b.path.as_deref().map(|p| self.path(p)),
                                sha256: b.sha256.clone(),
                            },
                        )
                    })
                    .collect(),
                adapter: w.adapter.clone(),
                network_name: w.network_name.clone(),
            })
            .unwrap_or_default();
        if !ok {
            return None;
        }
        Some(Host {
            name: h.name.value.clone(),
            os: os?,
            role,
            address: address?,
            pod_cidr: pod_cidr?,
            connection: connection?,
            windows,
            pos,
        })
    }

    fn connection(
        &mut self,
        os: Os,
        h: &RawHost,
        defaults: &RawDefaults,
        pos: Pos,
    ) -> Option<Connection> {
        // Linux always uses SSH; Windows uses WinRM unless an ssh block is given.
        if os == Os::Linux || h.ssh.is_some() {
            let d = defaults.ssh.clone().unwrap_or_default();
            let o = h.ssh.clone().unwrap_or_default();
            let identity = o.identity.or(d.identity).map(|s| self.path(&s.value));
            let known_hosts = o
                .known_hosts
                .or(d.known_hosts)
                .map(|s| self.path(&s.value))
                .unwrap_or_else(|| self.path("~/.ssh/known_hosts"));
            return Some(Connection::Ssh(SshSettings {
                user: o.user.or(d.user),
                port: o.port.or(d.port),
                identity,
                known_hosts,
            }));
        }
        let d = defaults.winrm.clone().unwrap_or_default();
        let o = h.winrm.clone().unwrap_or_default();
        let tls = o.tls.or(d.tls).unwrap_or(true);
        let auth_s = o.auth.or(d.auth);
        let auth = match auth_s.as_ref().map(|a| a.value.to_ascii_lowercase()) {
            None => WinRmAuth::Ntlm,
            Some(a) if a == "ntlm" => WinRmAuth::Ntlm,
            Some(a) if a == "basic" => WinRmAuth::Basic,
            Some(a) if a == "kerberos" => WinRmAuth::Kerberos,
            Some(a) => {
                self.problem(
                    auth_s.as_ref().unwrap().into(),
                    format!("winrm auth {a:?} is not known"),
                    "use ntlm, basic or kerberos",
                );
                return None;
            }
        };
        let allow_basic_over_http = o
            .allow_basic_over_http
            .or(d.allow_basic_over_http)
            .unwrap_or(false);
        if auth == WinRmAuth::Basic && !tls && !allow_basic_over_http {
            self.problem(
                pos,
                format!(
                    "host {}: WinRM Basic auth over plain HTTP would send the password in clear",
                    h.name.value
                ),
                "use tls: true, or auth: ntlm, or set allow_basic_over_http: true if you accept that",
            );
            return None;
        }
        let password = match (
            o.password_env.or(d.password_env),
            o.password_file.or(d.password_file),
        ) {
            (Some(_), Some(f)) => {
                self.problem(
                    (&f).into(),
                    "give either password_env or password_file, not both",
                    "remove one of them",
                );
                return None;
            }
            (Some(e), None) => PasswordSource::Env(e.value),
            (None, Some(f)) => PasswordSource::File(self.path(&f.value)),
            (None, None) => PasswordSource::Env("KWINCTL_WINRM_PASSWORD".into()),
        };
        let cert_sha256 = o.cert_sha256.or(d.cert_sha256).map(|s| {
            let clean: String = s
                .value
                .chars()
                .filter(|c| *c != ':')
                .collect::<String>()
                .to_ascii_lowercase();
            if clean.len() != 64 || !clean.chars().all(|c| c.is_ascii_hexdigit()) {
                self.problem(
                    (&s).into(),
                    "cert_sha256 is not a SHA-256 fingerprint",
                    "give 64 hex digits (colons allowed), e.g. from `openssl x509 -noout -fingerprint -sha256`",
                );
            }
            clean
        });
        Some(Connection::WinRm(WinRmSettings {
            user: o.user.or(d.user).unwrap_or_else(|| "Administrator".into()),
            password,
            port: o.port.or(d.port).unwrap_or(if tls { 5986 } else { 5985 }),
            tls,
            auth,
            ca_file: o.ca_file.or(d.ca_file).map(|s| self.path(&s.value)),
            cert_sha256,
            allow_basic_over_http,
        }))
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

pub fn nets_overlap(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// How many `prefix`-sized blocks fit in `net`.
pub fn block_count(net: &Ipv4Net, prefix: u8) -> u64 {
    if prefix < net.prefix_len() {
        return 0;
    }
    1u64 << (prefix - net.prefix_len())
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

    const GOOD: &str = "\
cluster:
  name: demo
  cluster_cidr: 192.168.0.0/16
  service_cidr: 10.96.0.0/12
  api_server: https://10.0.0.10:6443
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
        assert_eq!(inv.hosts[0].pos.line, 7);
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let p = first(&GOOD.replace("    role: control-plane\n", "    rol: control-plane\n"));
        assert_eq!(p.pos.line, 9, "{p:?}");
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
            text.contains("inv.yaml:11:11: duplicate host name"),
            "{text}"
        );
        assert!(
            text.contains("inv.yaml:13:14: duplicate address 10.0.0.10"),
            "{text}"
        );
    }

    #[test]
    fn pin_outside_cluster_and_wrong_size() {
        let p = first(&GOOD.replace("192.168.1.0/24", "10.200.1.0/24"));
        assert!(p.message.contains("outside the cluster CIDR"), "{p:?}");
        assert_eq!(p.pos.line, 14);
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
    fn basic_over_http_refused() {
        let s = GOOD.replace(
            "    pod_cidr: 192.168.1.0/24\n",
            "    pod_cidr: 192.168.1.0/24\n    winrm: { auth: basic, tls: false }\n",
        );
        let p = first(&s);
        assert!(p.message.contains("Basic"), "{p:?}");
    }
}
