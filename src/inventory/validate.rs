//! Size: one Validator holds every rule; they share its list of problems
//! and the positions they point at, and each section is a method already.
//!
//! The rules that turn the raw inventory into the validated model: every
//! problem is collected with its position and a fix.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;
use serde_saphyr::Spanned;

use super::groups::{Clash, Declared, Layered, layered};
use super::raw::{RawCluster, RawDefaults, RawHost, RawInventory};
use super::validator::{Validator, dns_name};
use super::*;
use crate::text::echo;

/// The first line of a YAML error, without the parser's own
/// `error: line L column C:` prefix (we print the position ourselves).
/// A container image reference kwinctl passes on: letters, digits and
/// `._-/:@`, at most 255 characters (no quote, space or backslash can reach a
/// command line through it).
fn image_reference(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
}

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
        "remove the key or fix its spelling; see the inventory format in docs/inventory.md".into()
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
        "wrong type for this key; see the inventory format in docs/inventory.md".into()
    } else if msg.contains("missing field") {
        "add the missing key; see the inventory format in docs/inventory.md".into()
    } else {
        "fix the YAML at that position; see the inventory format in docs/inventory.md".into()
    }
}

impl Validator {
    pub(super) fn inventory(&mut self, path: &Path, raw: RawInventory) -> Option<Inventory> {
        let cluster = self.cluster(&raw.cluster);
        let defaults = raw.defaults;
        let declared = self.declared(&raw.groups, &raw.hosts.value);
        let mut clashes = Vec::new();
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
        let mut node_names: HashMap<String, String> = HashMap::new();
        for h in &raw.hosts.value {
            let Some(host) = self.host(h, &defaults, &declared, &mut clashes) else {
                continue;
            };
            let lname = host.name.to_ascii_lowercase();
            let npos = Pos::from(&h.value.name);
            if let Some(prev) = names.get(&lname) {
                self.problem(
                    npos,
                    format!(
                        "duplicate host name {} (first used at line {})",
                        echo(&host.name),
                        prev.line
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
            if host.os == Os::Windows {
                let node = host.node_name();
                if let Some(other) = node_names.get(&node) {
                    self.problem(
                        h.value.node_name.as_ref().map_or(npos, Pos::from),
                        format!("host {} registers as node {node}, as host {other} does", echo(&host.name)),
                        "give each Windows host its own node_name (two kubelets under one name overwrite one Node)",
                    );
                } else {
                    node_names.insert(node, host.name.clone());
                }
            }
            hosts.push((host, h));
        }
        self.clashes(clashes);
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
        if let Some((w, _)) = hosts.iter().find(|(h, _)| h.os == Os::Windows) {
            self.windows_cluster(&cluster, &w.name);
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
        // How a host without settings of its own would be reached.
        let mut default_connections = BTreeMap::new();
        let unknown = serde_saphyr::Location::UNKNOWN;
        let spanned = |v: &str| Spanned::new(v.to_string(), unknown, unknown);
        for os in [Os::Linux, Os::Windows] {
            let bare = RawHost {
                name: spanned("removed"),
                os: spanned(&os.to_string()),
                role: None,
                address: spanned("0.0.0.0"),
                connect: None,
                node_name: None,
                groups: None,
                pod_cidr: None,
                ssh: None,
                winrm: None,
                windows: None,
                linux: None,
            };
            let mut v = Validator {
                base: self.base.clone(),
                problems: Vec::new(),
            };
            let (_, settings) = v.membership(&bare, Some(os), Role::Worker, &declared);
            let lay = layered(&bare, &settings, &defaults, &mut Vec::new());
            if let Some(c) = v.connection(os, &bare, &lay, Pos::default())
                && v.problems.is_empty()
            {
                default_connections.insert(os, c);
            }
        }
        Some(Inventory {
            path: path.to_path_buf(),
            cluster,
            hosts: hosts.into_iter().map(|(h, _)| h).collect(),
            groups: super::groups::in_order(&declared),
            default_connections,
        })
    }

    fn cluster(&mut self, c: &RawCluster) -> Option<Cluster> {
        // `kwinctl import` leaves these for the operator
        let keys = [
            ("name", Some(&c.name)),
            ("cluster_cidr", Some(&c.cluster_cidr)),
            ("service_cidr", Some(&c.service_cidr)),
            ("api_server", c.api_server.as_ref()),
            ("kubernetes_version", c.kubernetes_version.as_ref()),
            ("kubeconfig", c.kubeconfig.as_ref()),
            ("identity", c.identity.as_ref()),
            ("pause_image", c.pause_image.as_ref()),
            ("windows_profile", c.windows_profile.as_ref()),
            ("containerd_version", c.containerd_version.as_ref()),
            ("log_runner_version", c.log_runner_version.as_ref()),
            ("dns_service_ip", c.dns_service_ip.as_ref()),
            ("dns_domain", c.dns_domain.as_ref()),
        ];
        let mut unfilled = false;
        for (key, v) in keys {
            if let Some(v) = v
                && v.value.trim() == PLACEHOLDER
            {
                self.problem(
                    v.into(),
                    format!("cluster.{key} is still {PLACEHOLDER}, the placeholder `kwinctl import` wrote"),
                    format!("replace it with the cluster's {key} (the comment beside it says what it is)"),
                );
                unfilled = true;
            }
        }
        if unfilled {
            return None;
        }
        let name_ok = valid_name(&c.name.value);
        if !name_ok {
            self.problem(
                (&c.name).into(),
                format!("cluster name {} is not a valid name", echo(&c.name.value)),
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
        let api = c.api_server.as_ref().map(|a| (a, a.value.trim()));
        if let Some((a, api)) = api
            && !api_url(api)
        {
            self.problem(
                a.into(),
                format!("api_server {} is not a URL", echo(api)),
                "write it as https://HOST:PORT (a DNS name, an IPv4 address or [an IPv6 one], then an optional :port and /path)",
            );
            ok = false;
        }
        let https = api.is_some_and(|(_, a)| a.starts_with("https://"));
        let (kubernetes_version, version_ok) = self.kubernetes_version(c);
        let kubeconfig = c.kubeconfig.as_ref().map(|k| self.path(&k.value));
        let kubeconfig_ok = self.kubeconfig(c, kubeconfig.as_deref(), https);
        ok = ok && version_ok && kubeconfig_ok;
        let pause_image = match &c.pause_image {
            Some(p) if !image_reference(&p.value) => {
                self.problem(
                    p.into(),
                    format!("pause_image {} is not an image reference", echo(&p.value)),
                    "write it as REGISTRY/REPOSITORY:TAG (letters, digits and . _ - / : @ only, at most 255)",
                );
                ok = false;
                None
            }
            p => p.as_ref().map(|p| p.value.clone()),
        };
        let windows_profile_given = self.optional(
            ("windows_profile", c.windows_profile.as_ref()),
            WindowsProfile::parse,
            "a Windows profile",
            "use `transparent` (Docker, Kubernetes 1.5 to 1.10) or `l2bridge` (containerd, 1.24 and later), or leave it out to choose by kubernetes_version",
            &mut ok,
        );
        let identity_given = self.optional(
            ("identity", c.identity.as_ref()),
            super::Identity::parse,
            "a way to give Windows nodes credentials",
            "use `bootstrap` (each node joins with a token and gets its own certificate) or `shared` (every node uses cluster.kubeconfig), or leave it out to choose by release",
            &mut ok,
        );
        let containerd_version = self.optional(
            ("containerd_version", c.containerd_version.as_ref()),
            ContainerdVersion::parse,
            "a containerd release",
            "write the release of windows.binaries.containerd's archive as MAJOR.MINOR.PATCH (`kwinctl check` then names the releases that go with kubernetes_version)",
            &mut ok,
        );
        let log_runner_version = self.optional(
            ("log_runner_version", c.log_runner_version.as_ref()),
            KubeVersion::parse,
            "a Kubernetes release",
            "write the release windows.binaries.kube-log-runner comes from, e.g. \"1.34.2\" (1.34 and later rotate their log files)",
            &mut ok,
        );
        let (dns_service_ip, dns_domain) = self.cluster_dns(c, service_cidr, &mut ok);
        let pod_check = self.pod_check(c, &mut ok);
        let api_server_sources = self.cidr_list(
            "cluster.api_server_sources",
            c.api_server_sources.as_ref(),
            &mut ok,
        );
        if !ok {
            return None;
        }
        Some(Cluster {
            name: c.name.value.clone(),
            cluster_cidr: cluster_cidr?,
            node_prefix,
            service_cidr: service_cidr?,
            api_server: api.map(|(_, a)| a.to_string()),
            kubernetes_version,
            kubeconfig,
            identity_given,
            pause_image,
            windows_profile_given,
            containerd_version,
            log_runner_version,
            dns_service_ip: dns_service_ip?,
            dns_domain,
            pod_check,
            api_server_sources,
            pos: ClusterPos::of(c),
        })
    }

    /// `cluster.pod_check`: a namespace that is a DNS label, images keyed by
    /// `linux` or a Windows build number, a start timeout of 10 s to 1 h.
    fn pod_check(&mut self, c: &RawCluster, ok: &mut bool) -> PodCheckSettings {
        let mut s = PodCheckSettings {
            namespace: "default".into(),
            images: BTreeMap::new(),
            start_timeout: std::time::Duration::from_secs(300),
        };
        let Some(p) = &c.pod_check else { return s };
        if let Some(n) = &p.namespace {
            let name = n.value.trim();
            // Kubernetes' rule (RFC 1123 label): lower case only; an
            // upper-case name is refused there, so here (never lowered)
            if name.len() > 63
                || !dns_name(name)
                || name.contains('.')
                || name.bytes().any(|b| b.is_ascii_uppercase())
            {
                self.problem(
                    n.into(),
                    format!(
                        "pod_check.namespace {} is not a namespace name",
                        echo(&n.value)
                    ),
                    "write a DNS label: lower-case letters, digits and '-', at most 63",
                );
                *ok = false;
            }
            s.namespace = name.to_string();
        }
        for (k, i) in &p.images.0 {
            let key = k.value.trim();
            if key != "linux" && key != "windows" && key.parse::<u32>().is_err() {
                self.problem(
                    k.into(),
                    format!("pod_check.images key {} is neither `linux`, `windows` nor a Windows build number", echo(&k.value)),
                    "key the image by `linux`, by the Windows build it runs on, e.g. \"17763\" (Windows Server 2019), or `windows` for nodes whose kubelet sets no build label (before 1.17)",
                );
                *ok = false;
            }
            if !image_reference(&i.value) {
                self.problem(
                    i.into(),
                    format!("pod_check.images.{key} {} is not an image reference", echo(&i.value)),
                    "write it as REGISTRY/REPOSITORY:TAG (letters, digits and . _ - / : @ only, at most 255)",
                );
                *ok = false;
            }
            s.images.insert(key.to_string(), i.value.clone());
        }
        if let Some(t) = &p.start_timeout {
            if !(10..=3600).contains(&t.value) {
                self.problem(
                    t.into(),
                    format!("pod_check.start_timeout {} is out of range", t.value),
                    "give 10 to 3600 seconds (a Windows image pull can take minutes)",
                );
                *ok = false;
            }
            s.start_timeout = std::time::Duration::from_secs(t.value);
        }
        s
    }

    /// The cluster DNS address (default: the service CIDR's 10th address,
    /// as kubeadm picks it: docs/research/kubernetes.md#cluster-dns) and
    /// domain (default `cluster.local`).
    fn cluster_dns(
        &mut self,
        c: &RawCluster,
        service_cidr: Option<Ipv4Net>,
        ok: &mut bool,
    ) -> (Option<Ipv4Addr>, String) {
        let ip = match (&c.dns_service_ip, service_cidr) {
            (Some(v), sc) => match v.value.trim().parse::<Ipv4Addr>() {
                Ok(ip)
                    if sc.is_none_or(|sc| {
                        sc.contains(&ip) && ip != sc.network() && ip != sc.broadcast()
                    }) =>
                {
                    Some(ip)
                }
                Ok(ip) => {
                    let sc = sc.expect("checked above");
                    self.problem(
                        v.into(),
                        format!("dns_service_ip {ip} is not a service address of service_cidr {sc}"),
                        format!(
                            "the cluster DNS service (kube-dns/CoreDNS) has a ClusterIP inside service_cidr: `kubectl -n kube-system get service kube-dns` shows it (kubeadm's default is {})",
                            dns_default(sc)
                        ),
                    );
                    *ok = false;
                    None
                }
                Err(_) => {
                    self.problem(
                        v.into(),
                        format!("dns_service_ip {} is not an IPv4 address", echo(&v.value)),
                        "write the cluster DNS service's ClusterIP, e.g. 10.96.0.10",
                    );
                    *ok = false;
                    None
                }
            },
            (None, sc) => sc.map(dns_default),
        };
        let domain = match &c.dns_domain {
            Some(d) => {
                let name = d.value.trim().trim_end_matches('.').to_ascii_lowercase();
                if !dns_name(&name) {
                    self.problem(
                        d.into(),
                        format!("dns_domain {} is not a DNS domain", echo(&d.value)),
                        "write the cluster's domain as kubelets' --cluster-domain takes it, e.g. cluster.local",
                    );
                    *ok = false;
                }
                name
            }
            None => DEFAULT_DNS_DOMAIN.to_string(),
        };
        (ip, domain)
    }

    fn host(
        &mut self,
        sh: &Spanned<RawHost>,
        defaults: &RawDefaults,
        declared: &BTreeMap<String, Declared>,
        clashes: &mut Vec<Clash>,
    ) -> Option<Host> {
        let h = &sh.value;
        let pos = Pos::from(sh);
        let mut ok = true;
        if !valid_name(&h.name.value) {
            self.problem(
                (&h.name).into(),
                format!("host name {} is not a valid name", echo(&h.name.value)),
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
                    format!("os {} is not supported", echo(other)),
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
                    format!("role {} is not known", echo(other)),
                    "use `control-plane` or `worker`",
                );
                ok = false;
                Role::Worker
            }
        };
        let address = match h.address.value.trim().parse::<Ipv4Addr>() {
            Ok(a) if !super::routable_node_address(&a) => {
                self.problem(
                    (&h.address).into(),
                    format!("address {a} {NOT_A_NODE_ADDRESS}"),
                    "use the node's routable unicast IPv4 address",
                );
                None
            }
            Ok(a) => Some(a),
            Err(_) => {
                self.problem(
                    (&h.address).into(),
                    format!("address {} is not an IPv4 address", echo(&h.address.value)),
                    "use the node's routable IPv4 address, e.g. 10.0.0.11 (names are not resolved)",
                );
                None
            }
        };
        let connect = match &h.connect {
            None => Some(None),
            Some(c) => match c.value.trim().parse::<Ipv4Addr>() {
                Ok(a) if !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast() => {
                    Some(Some(a))
                }
                _ => {
                    self.problem(
                        c.into(),
                        format!(
                            "connect {} is not a unicast IPv4 address",
                            echo(&c.value)
                        ),
                        "give the IPv4 address kwinctl reaches the node on, e.g. 203.0.113.7 (names are not resolved)",
                    );
                    None
                }
            },
        };
        let node_name = self.node_name(h, os);
        let pod_cidr = match &h.pod_cidr {
            Some(p) => self.net(p, "pod_cidr").map(Some),
            None => Some(None),
        };
        let (groups, settings) = self.membership(h, os, role, declared);
        let lay = layered(h, &settings, defaults, clashes);
        let connection = os.and_then(|os| self.connection(os, h, &lay, pos));
        // a Windows host's own linux: block is a mistake; for a Linux host,
        // the layered one (defaults < groups < host)
        let linux = if os == Some(Os::Windows) {
            self.linux(os, h.linux.as_ref(), None)
        } else {
            self.linux(os, Some(&lay.linux), None)
        };
        let windows = match self.windows(&lay.windows) {
            Some(w) => w,
            None => {
                ok = false;
                WindowsSettings::default()
            }
        };
        if !ok {
            return None;
        }
        Some(Host {
            name: h.name.value.clone(),
            os: os?,
            role,
            address: address?,
            connect: connect?,
            node_name: node_name?,
            pod_cidr: pod_cidr?,
            connection: connection?,
            windows,
            groups,
            linux,
            pos,
        })
    }

    /// `node_name`: a Windows host's Kubernetes node name, a lower-case DNS
    /// subdomain (what the API server accepts as a Node's name); without it
    /// the host's name in lower case must be one.
    fn node_name(&mut self, h: &RawHost, os: Option<Os>) -> Option<Option<String>> {
        let Some(n) = &h.node_name else {
            if os == Some(Os::Windows)
                && !super::valid_node_name(&h.name.value.to_ascii_lowercase())
            {
                self.problem(
                    (&h.name).into(),
                    format!(
                        "host {} cannot be a Kubernetes node name (a lower-case DNS subdomain: \
                         letters, digits, '-' and '.', at most 253 characters)",
                        echo(&h.name.value)
                    ),
                    "give the host a `node_name:` (the name its node registers as, e.g. its host name in lower case)",
                );
                return None;
            }
            return Some(None);
        };
        if os != Some(Os::Windows) {
            self.problem(
                n.into(),
                "node_name is for Windows hosts (kwinctl does not start a Linux node's kubelet)",
                "remove node_name from this host",
            );
            return None;
        }
        if !super::valid_node_name(&n.value) {
            self.problem(
                n.into(),
                format!(
                    "node_name {} is not a Kubernetes node name (a lower-case DNS subdomain: \
                     letters, digits, '-' and '.', at most 253 characters)",
                    echo(&n.value)
                ),
                "use the host name in lower case, e.g. win-01",
            );
            return None;
        }
        Some(Some(n.value.clone()))
    }

    /// The `windows:` block: values that reach scripts are bounded and plain.
    fn windows(&mut self, w: &super::raw::RawWindows) -> Option<WindowsSettings> {
        let mut ok = true;
        if let Some(a) = &w.adapter
            && (a.value.is_empty()
                || a.value.chars().count() > 256
                || a.value.chars().any(|c| c.is_control()))
        {
            self.problem(
                a.into(),
                format!("windows.adapter {} is not an adapter name", echo(&a.value)),
                "give the adapter's name as `Get-NetAdapter` shows it (at most 256 characters, no control characters)",
            );
            ok = false;
        }
        // It travels as a native argument to docker.exe (`-o
        // com.docker.network.windowsshim.interface=<name>`), and Windows
        // PowerShell 5.1 passes a `"` inside a native argument unescaped
        // (PowerShell/PowerShell#1995, fixed only in 7.3's
        // PSNativeCommandArgumentPassing): no `"` here.
        if let Some(a) = &w.transparent_adapter
            && (a.value.is_empty()
                || a.value.chars().count() > 256
                || a.value.chars().any(|c| c.is_control() || c == '"')
                || a.value.trim() != a.value)
        {
            self.problem(
                a.into(),
                format!(
                    "windows.transparent_adapter {} is not an adapter name",
                    echo(&a.value)
                ),
                "give the network card's name as `Get-NetAdapter -Physical` shows it (at most 256 characters, no control characters, no '\"', no leading or trailing space)",
            );
            ok = false;
        }
        if let (Some(a), Some(t)) = (&w.adapter, &w.transparent_adapter)
            && a.value.eq_ignore_ascii_case(&t.value)
        {
            self.problem(
                t.into(),
                format!(
                    "windows.transparent_adapter {} is the routable adapter (windows.adapter)",
                    echo(&t.value)
                ),
                "the transparent network takes its card away from the host (its address moves to a virtual adapter, and the gateway action would remove it): name a second network card",
            );
            ok = false;
        }
        if let Some(n) = &w.network_name
            && !valid_name(&n.value)
        {
            self.problem(
                n.into(),
                format!("windows.network_name {} is not a valid name", echo(&n.value)),
                "use letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)",
            );
            ok = false;
        }
        let nodeport_sources = self.cidr_list(
            "windows.nodeport_sources",
            w.nodeport_sources.as_ref(),
            &mut ok,
        );
        let taints = self.taints(w.taints.as_ref(), &mut ok);
        let cert_margin_days = match &w.cert_margin_days {
            None => DEFAULT_CERT_MARGIN_DAYS,
            Some(d) if d.value <= 3650 => d.value,
            Some(d) => {
                self.problem(
                    d.into(),
                    format!("windows.cert_margin_days {} is more than 3650", d.value),
                    "give the days a node's client certificate must still be valid for verify to pass (default 30)",
                );
                ok = false;
                DEFAULT_CERT_MARGIN_DAYS
            }
        };
        let mut binaries = BTreeMap::new();
        let mut preinstalled = Vec::new();
        for (k, entry) in w.binaries.iter() {
            let b = &entry.value;
            if let Some(p) = b.preinstalled.as_ref().filter(|p| p.value) {
                if b.url.is_some() || b.path.is_some() || b.sha256.is_some() {
                    self.problem(
                        p.into(),
                        format!(
                            "windows.binaries.{k} is preinstalled but also names a url, path or sha256"
                        ),
                        format!(
                            "keep `{k}: {{ preinstalled: true }}` alone (the node has the file), or remove preinstalled to have kwinctl place it"
                        ),
                    );
                    ok = false;
                }
                preinstalled.push(k.to_string());
                continue;
            }
            if b.url.is_some() == b.path.is_some() {
                self.problem(
                    entry.into(),
                    if b.url.is_some() {
                        format!("windows.binaries.{k} names both a url and a path")
                    } else {
                        format!("windows.binaries.{k} names neither a url nor a path")
                    },
                    format!(
                        "give `url:` with `sha256:` (the node downloads it) or `path:` (kwinctl uploads it), or `{k}: {{ preinstalled: true }}` if the node has it already"
                    ),
                );
                ok = false;
            }
            if let Some(u) = &b.url
                && (!(u.value.starts_with("https://") || u.value.starts_with("http://"))
                    || u.value.len() > 2048
                    || u.value.chars().any(|c| c.is_control() || c.is_whitespace()))
            {
                self.problem(
                    u.into(),
                    format!("windows.binaries.{k}.url {} is not a URL", echo(&u.value)),
                    "write it as https://HOST/PATH (no spaces, at most 2048 characters)",
                );
                ok = false;
            }
            binaries.insert(
                k.to_string(),
                Binary {
                    url: b.url.as_ref().map(|u| u.value.clone()),
                    path: b.path.as_deref().map(|p| self.path(p)),
                    sha256: b.sha256.clone(),
                },
            );
        }
        let binaries_source = match w.binaries_source.as_ref() {
            None => BinariesSource::Node,
            Some(s) if s.value == "node" => BinariesSource::Node,
            Some(s) if s.value == "push" => BinariesSource::Push,
            Some(s) => {
                self.problem(
                    s.into(),
                    format!("windows.binaries_source {} is not node or push", echo(&s.value)),
                    "write node (each node downloads its url: binaries) or push (kwinctl downloads them once and pushes them)",
                );
                ok = false;
                BinariesSource::Node
            }
        };
        ok.then(|| WindowsSettings {
            binaries,
            binaries_source,
            preinstalled,
            adapter: w.adapter.as_ref().map(|a| a.value.clone()),
            network_name: w.network_name.as_ref().map(|n| n.value.clone()),
            transparent_adapter: w.transparent_adapter.as_ref().map(|a| a.value.clone()),
            nodeport_sources,
            taints,
            cert_margin_days,
        })
    }

    /// A list of IPv4 CIDRs (at most 64), sorted and deduplicated.
    fn cidr_list(
        &mut self,
        key: &str,
        list: Option<&Spanned<Vec<String>>>,
        ok: &mut bool,
    ) -> Vec<Ipv4Net> {
        let mut out = Vec::new();
        let Some(list) = list else { return out };
        if list.value.len() > 64 {
            self.problem(
                list.into(),
                format!("{key} has {} entries (at most 64)", list.value.len()),
                "name whole networks (CIDRs) rather than single addresses",
            );
            *ok = false;
        }
        for s in list.value.iter().take(64) {
            match s.trim().parse::<Ipv4Net>() {
                Ok(n) if n.network() == n.addr() => out.push(n),
                Ok(n) => {
                    self.problem(
                        list.into(),
                        format!("{key}: {s} has host bits set"),
                        format!("write it as {}", n.trunc()),
                    );
                    *ok = false;
                }
                Err(_) => {
                    self.problem(
                        list.into(),
                        format!("{key}: {} is not an IPv4 CIDR", echo(s)),
                        "write each source as address/prefix, e.g. 203.0.113.0/24 (0.0.0.0/0: anyone)",
                    );
                    *ok = false;
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// `windows.taints`: `key[=value]:Effect`, as the kubelet's
    /// `--register-with-taints` parses them (at most 16).
    fn taints(&mut self, list: Option<&Spanned<Vec<String>>>, ok: &mut bool) -> Vec<String> {
        let mut out = Vec::new();
        let Some(list) = list else { return out };
        if list.value.len() > 16 {
            self.problem(
                list.into(),
                format!(
                    "windows.taints has {} entries (at most 16)",
                    list.value.len()
                ),
                "a node needs few taints: one, os=windows:NoSchedule, keeps Linux workloads away",
            );
            *ok = false;
        }
        for t in list.value.iter().take(16) {
            if valid_taint(t.trim()) {
                out.push(t.trim().to_string());
            } else {
                self.problem(
                    list.into(),
                    format!("windows.taints: {} is not a taint", echo(t)),
                    "write each as key[=value]:Effect, Effect one of NoSchedule, PreferNoSchedule, NoExecute (e.g. os=windows:NoSchedule)",
                );
                *ok = false;
            }
        }
        out.dedup();
        out
    }

    fn connection(&mut self, os: Os, h: &RawHost, lay: &Layered, pos: Pos) -> Option<Connection> {
        // Linux always uses SSH; Windows uses WinRM unless the host has an
        // ssh block of its own (a group's ssh settings do not switch it).
        if os == Os::Linux || h.ssh.is_some() {
            let s = &lay.ssh;
            let identity = s.identity.as_ref().map(|s| self.path(&s.value));
            let known_hosts = s.known_hosts.as_ref().map(|s| self.path(&s.value));
            let bastion = s.bastion.as_ref().and_then(|b| self.bastion(b));
            return Some(Connection::Ssh(SshSettings {
                user: s.user.as_ref().map(|u| u.value.clone()),
                port: s.port.as_ref().map(|p| p.value),
                identity,
                known_hosts,
                bastion,
            }));
        }
        let w = lay.winrm.clone();
        let kerberos_raw = super::kerberos::KerberosRaw {
            user: lay.winrm.user.as_ref(),
            keytab: lay.winrm.keytab.as_ref(),
            spn: lay.winrm.spn.as_ref(),
        };
        let tls = w.tls.map(|t| t.value).unwrap_or(true);
        let auth_s = w.auth;
        let auth = match auth_s.as_ref().map(|a| a.value.to_ascii_lowercase()) {
            None => WinRmAuth::Ntlm,
            Some(a) if a == "ntlm" => WinRmAuth::Ntlm,
            Some(a) if a == "basic" => WinRmAuth::Basic,
            Some(a) if a == "kerberos" => WinRmAuth::Kerberos,
            Some(a) => {
                self.problem(
                    auth_s.as_ref().unwrap().into(),
                    format!("winrm auth {} is not known", echo(&a)),
                    "use ntlm, basic or kerberos",
                );
                return None;
            }
        };
        let allow_basic_over_http = w.allow_basic_over_http.map(|a| a.value).unwrap_or(false);
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
        let kerberos = self.kerberos(kerberos_raw, auth, &h.name.value, pos)?;
        let password = match (w.password_env, w.password_file) {
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
        let cert_sha256 = w.cert_sha256.map(|s| {
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
            user: w
                .user
                .map(|u| u.value)
                .unwrap_or_else(|| "Administrator".into()),
            password,
            port: w
                .port
                .map(|p| p.value)
                .unwrap_or(if tls { 5986 } else { 5985 }),
            tls,
            auth,
            ca_file: w.ca_file.map(|s| self.path(&s.value)),
            cert_sha256,
            allow_basic_over_http,
            keytab: kerberos.keytab,
            spn_host: kerberos.spn_host,
            bastion: w.bastion.as_ref().and_then(|b| self.bastion(b)),
        }))
    }
}

/// The cluster domain kubeadm and the kubelets' documentation use.
pub const DEFAULT_DNS_DOMAIN: &str = "cluster.local";

/// kubeadm's cluster DNS address: the service CIDR's 10th address.
pub fn dns_default(service_cidr: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(service_cidr.network()) + 10)
}

/// A taint as the kubelet's `--register-with-taints` takes it:
/// `key[=value]:Effect`; the key a qualified name (an optional DNS-subdomain
/// prefix and `/`, then at most 63 of letters, digits, `-`, `_`, `.`,
/// starting and ending alphanumeric), the value a label value, the effect
/// NoSchedule, PreferNoSchedule or NoExecute.
pub(super) fn valid_taint(t: &str) -> bool {
    let Some((kv, effect)) = t.rsplit_once(':') else {
        return false;
    };
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return false;
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let name_part = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let prefix_ok = prefix.is_empty()
        || (prefix.len() <= 253
            && prefix.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            }));
    prefix_ok && name_part(name) && (value.is_empty() || name_part(value))
}

/// An API server URL: `http(s)://HOST[:PORT][/PATH]`, HOST a DNS name, an
/// IPv4 address or a bracketed IPv6 one, PATH of URL-safe characters only
/// (no space, quote, `$`, backtick or backslash: it travels into scripts).
fn api_url(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    else {
        return false;
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) if h.parse::<std::net::Ipv6Addr>().is_ok() => (h, p),
            _ => return false,
        },
        None => match authority.split_once(':') {
            Some((h, _)) => (h, &authority[h.len()..]),
            None => (authority, ""),
        },
    };
    let host_ok = authority.starts_with('[')
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'));
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let path_ok = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~/%".contains(&b));
    host_ok && port_ok && path_ok
}

/// Why an address is refused as a node's (after the address itself).
pub(super) const NOT_A_NODE_ADDRESS: &str = "cannot be a node address (unspecified, broadcast, \
     multicast, loopback and link-local addresses are not routable between nodes)";

#[cfg(test)]
mod tests {
    #[test]
    fn an_api_server_is_a_url_without_anything_a_script_would_read() {
        for good in [
            "https://198.18.9.2:6443",
            "https://k8s.example:6443/",
            "http://10.0.0.1:8080",
            "https://[2001:db8::1]:6443",
            "https://api-1.corp.example/k8s/%7Euser",
        ] {
            assert!(super::api_url(good), "{good}");
        }
        for bad in [
            "https://h:6443 x",
            "https://h:6443/$(id)",
            "https://h:6443/`id`",
            "https://h'x:6443",
            "https://h\"x:6443",
            "https://h:6443/a\\b",
            "https://h:0",
            "https://h:99999",
            "https://:6443",
            "https://[::zz]:6443",
            "ftp://h:6443",
            "https://h:6443?x=1",
        ] {
            assert!(!super::api_url(bad), "{bad}");
        }
    }
}
