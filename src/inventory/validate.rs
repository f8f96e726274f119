//! The rules that turn the raw inventory into the validated model: every
//! problem is collected with its position and a fix.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde_saphyr::Spanned;

use super::raw::{RawCluster, RawDefaults, RawHost, RawInventory};
use super::*;

/// The first line of a YAML error, without the parser's own
/// `error: line L column C:` prefix (we print the position ourselves).
pub(super) fn first_line(s: &str) -> String {
    let mut l = s.lines().next().unwrap_or("invalid YAML").trim();
    l = l.strip_prefix("error: ").unwrap_or(l);
    if l.starts_with("line ")
        && let Some((_, rest)) = l.split_once(": ")
    {
        l = rest;
    }
    l.to_string()
}

pub(super) fn yaml_hint(msg: &str) -> String {
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

pub(super) struct Validator {
    pub(super) base: PathBuf,
    pub(super) problems: Vec<Problem>,
}

impl Validator {
    pub(super) fn problem(
        &mut self,
        pos: Pos,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.problems.push(Problem {
            pos,
            message: message.into(),
            hint: hint.into(),
        });
    }

    pub(super) fn path(&self, s: &str) -> PathBuf {
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

    pub(super) fn inventory(&mut self, path: &Path, raw: RawInventory) -> Option<Inventory> {
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
                            k.to_string(),
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
            let known_hosts = o.known_hosts.or(d.known_hosts).map(|s| self.path(&s.value));
            let bastion = o.bastion.or(d.bastion).and_then(|b| self.bastion(&b));
            return Some(Connection::Ssh(SshSettings {
                user: o.user.or(d.user),
                port: o.port.or(d.port),
                identity,
                known_hosts,
                bastion,
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
            bastion: o.bastion.or(d.bastion).and_then(|b| self.bastion(&b)),
        }))
    }
}
