//! Linux facts: routes, forwarding, kwinctl's files on the host, as the probe
//! (`templates/probe.sh.j2`, beside this file) prints them: `KWF <key> <value>`
//! lines from `KWF probe linux 2` to `KWF end`, with the values raw (the routes
//! as `ip -j` prints them). Escaping them into JSON on the host took a `tr`
//! process per value, and every process there costs the host 2-3 ms on every
//! run. Anything else on stdout (motd, shell noise) is ignored.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

use crate::inventory::KubeVersion;
use crate::probe::{FactsError, Reach};
use crate::text::clip;
use crate::verify::K8sNode;
use crate::wire::LINUX_FACT;

/// [`super::ROUTE_PROTO`] as `ip` prints it: compared once per route per
/// lookup, so not formatted each time.
const ROUTE_PROTO_TEXT: &str = "198";

/// One IPv4 route from the host's main table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: Ipv4Net,
    pub via: Option<Ipv4Addr>,
    pub dev: Option<String>,
    /// `ip`'s protocol field: "kernel", "static", "198", … ("boot" when absent).
    pub proto: String,
}

impl Route {
    /// Marked as kwinctl's: `ip` prints the protocol number (or the name
    /// rt_protos gives it).
    pub fn owned(&self) -> bool {
        self.proto == ROUTE_PROTO_TEXT || self.proto == "kwinctl"
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxFacts {
    pub hostname: String,
    pub ip_forward: bool,
    pub systemd: bool,
    pub routes: Vec<Route>,
    /// The pod CIDR kwinctl recorded on the host (`/etc/kwinctl/pod-cidr`).
    pub recorded_pod_cidr: Option<Ipv4Net>,
    /// The cluster kwinctl recorded beside it (`/etc/kwinctl/cluster`):
    /// name and id.
    pub recorded_cluster: Option<(String, String)>,
    /// The host that keeps the cluster's lock, as recorded on the second
    /// line of `/etc/kwinctl/cluster` (lower case).
    pub recorded_lock_host: Option<String>,
    /// How many changing runs the cluster lock has seen on this host
    /// (`/etc/kwinctl/cluster.gen`; 0 when none).
    pub cluster_gen: u64,
    /// The cluster's registry, on the lock host (`/etc/kwinctl/cluster.blocks`).
    pub registry: Vec<crate::alloc::Registered>,
    /// sha256 of `/etc/kwinctl/boot.sh`.
    pub boot_sha: Option<String>,
    /// sha256 of the systemd unit, and whether it is enabled.
    pub unit_sha: Option<String>,
    pub unit_enabled: bool,
    /// The unit file's state as systemd says it ("enabled", "disabled",
    /// "masked", …; empty when there is none).
    pub unit_file_state: String,
    /// How the unit's last run went (systemd hosts).
    pub unit_state: Option<UnitState>,
    /// boot.sh's last error line in the journal of this boot, when the unit
    /// failed or is still trying (control characters removed).
    pub unit_journal: Option<String>,
    /// Reachability of other nodes' addresses, when the probe was asked.
    pub reach: BTreeMap<Ipv4Addr, Reach>,
    /// On the control plane when asked: the nodes kubectl sees (`None`: no
    /// kubectl, or not asked; `Some(Err)`: kubectl failed).
    pub k8s_nodes: Option<Result<Vec<K8sNode>, String>>,
    /// With the nodes: kube-apiserver's release as kubectl reports it
    /// (`v1.30.4+k3s1` read as 1.30.4; `None`: not read).
    pub api_server: Option<KubeVersion>,
}

/// `kwinctl-boot.service` as `systemctl show` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// LoadState: "loaded", "not-found", "bad-setting", "masked", …
    pub load: String,
    /// ActiveState: "active", "inactive", "activating", "failed", …
    pub active: String,
    /// SubState: "exited", "dead", "start", "auto-restart", "failed", …
    pub sub: String,
    /// Result of the last run: "success", "exit-code", "timeout", …
    pub result: String,
    /// How many times systemd restarted it (Restart=on-failure).
    pub restarts: u32,
}

impl UnitState {
    /// `<load> <active> <sub> <result> <restarts>`, each a systemd word.
    fn parse(s: &str) -> Result<UnitState, FactsError> {
        let bad = || FactsError::Invalid(format!("unit_state is {:?}", clip(&printable(s), 80)));
        let f: Vec<&str> = s.split_whitespace().collect();
        let [load, active, sub, result, restarts] = f[..] else {
            return Err(bad());
        };
        let word = |w: &str| -> Result<String, FactsError> {
            if !w.is_empty()
                && w.len() <= 40
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                Ok(w.to_string())
            } else {
                Err(bad())
            }
        };
        Ok(UnitState {
            load: word(load)?,
            active: word(active)?,
            sub: word(sub)?,
            result: word(result)?,
            restarts: restarts.parse().map_err(|_| bad())?,
        })
    }
}

#[derive(Deserialize)]
struct RawRoute {
    dst: String,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    dev: Option<String>,
    #[serde(default)]
    protocol: Option<serde_json::Value>,
}

fn sha(s: &str) -> Option<String> {
    let s = s.trim();
    (s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())).then(|| s.to_string())
}

fn parse_dst(s: &str) -> Option<Ipv4Net> {
    if s == "default" {
        return Some(Ipv4Net::default());
    }
    if s.contains('/') {
        s.parse().ok()
    } else {
        s.parse::<Ipv4Addr>()
            .ok()
            .map(|a| Ipv4Net::new(a, 32).expect("/32"))
    }
}

/// The probe's lines, by key.
#[derive(Default)]
struct Lines<'a> {
    scalars: BTreeMap<&'a str, &'a str>,
    reach: Vec<&'a str>,
    nodes: Vec<&'a str>,
    registered: Vec<&'a str>,
    ended: bool,
}

impl<'a> Lines<'a> {
    fn read(stdout: &'a str, stderr: &str) -> Result<Lines<'a>, FactsError> {
        let mut l = Lines::default();
        let mut header = None;
        for line in stdout.lines() {
            let Some(rest) = line.strip_prefix(LINUX_FACT) else {
                continue; // motd, shell noise, action markers
            };
            let rest = rest.trim_end_matches('\r');
            let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
            if l.ended {
                return Err(FactsError::Invalid(format!(
                    "a line after the probe's end: {:?}",
                    clip(line, 80)
                )));
            }
            match key {
                "probe" => header = Some(value),
                "end" => l.ended = true,
                "reach" => l.reach.push(value),
                "node" => l.nodes.push(value),
                "registered" => l.registered.push(value),
                "hostname" | "ip_forward" | "pod_cidr" | "cluster" | "lock_host"
                | "cluster_gen" | "boot_sha" | "systemd" | "unit_sha" | "unit_enabled"
                | "unit_state" | "unit_journal" | "routes" | "nodes" | "apiserver" => {
                    if l.scalars.insert(key, value).is_some() {
                        return Err(FactsError::Invalid(format!("{key} is given twice")));
                    }
                }
                other => {
                    return Err(FactsError::Invalid(format!(
                        "unknown fact {:?}",
                        clip(other, 40)
                    )));
                }
            }
        }
        match header {
            None => Err(FactsError::Missing {
                marker: "KWF probe",
                stderr: clip(stderr.trim(), 400),
            }),
            Some("linux 2") if l.ended => Ok(l),
            Some("linux 2") => Err(FactsError::Invalid(format!(
                "the probe's output stops before its end; stderr: {}",
                clip(stderr.trim(), 300)
            ))),
            Some(other) => Err(FactsError::Invalid(format!(
                "expected a version 2 linux probe, got {:?}",
                clip(other, 40)
            ))),
        }
    }

    fn get(&self, key: &str) -> Result<&'a str, FactsError> {
        self.scalars
            .get(key)
            .map(|v| v.trim())
            .ok_or_else(|| FactsError::Invalid(format!("the probe gave no {key}")))
    }

    fn opt(&self, key: &str) -> &'a str {
        self.scalars.get(key).map(|v| v.trim()).unwrap_or("")
    }
}

/// Printable characters only: values come from files on the host.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

impl LinuxFacts {
    /// Parse the Linux probe's stdout: `KWF <key> <value>` lines from
    /// `KWF probe linux 2` to `KWF end`; other lines are ignored.
    pub fn parse(stdout: &str, stderr: &str) -> Result<LinuxFacts, FactsError> {
        let l = Lines::read(stdout, stderr)?;
        let ip_forward = match l.get("ip_forward")? {
            "1" => true,
            "0" | "" => false,
            other => {
                return Err(FactsError::Invalid(format!(
                    "ip_forward is {:?}, expected 0 or 1",
                    clip(other, 40)
                )));
            }
        };
        let systemd = match l.get("systemd")? {
            "true" => true,
            "false" => false,
            other => {
                return Err(FactsError::Invalid(format!(
                    "systemd is {:?}, expected true or false",
                    clip(other, 40)
                )));
            }
        };
        let raw_routes: Vec<RawRoute> = match l.get("routes")? {
            "null" | "" => {
                return Err(FactsError::Invalid(
                    "`ip -j -4 route show` printed nothing: the host needs iproute2 with JSON \
                     output (iproute2 4.13 or later)"
                        .into(),
                ));
            }
            json => serde_json::from_str(&escape_raw_controls(json))
                .map_err(|e| FactsError::Invalid(format!("the routes `ip -j` printed: {e}")))?,
        };
        let mut routes = Vec::new();
        for r in raw_routes {
            // Non-IPv4 or special destinations (e.g. "unreachable") are skipped.
            let Some(dst) = parse_dst(&r.dst) else {
                continue;
            };
            let via =
                match r.gateway {
                    Some(g) => Some(g.parse::<Ipv4Addr>().map_err(|_| {
                        FactsError::Invalid(format!("route {dst} has gateway {g:?}"))
                    })?),
                    None => None,
                };
            let proto = match r.protocol {
                None => "boot".to_string(),
                Some(serde_json::Value::String(s)) => s,
                Some(serde_json::Value::Number(n)) => n.to_string(),
                Some(other) => {
                    return Err(FactsError::Invalid(format!(
                        "route {dst} has protocol {other}"
                    )));
                }
            };
            routes.push(Route {
                dst,
                via,
                dev: r.dev,
                proto,
            });
        }
        let recorded_pod_cidr = match l.get("pod_cidr")? {
            "" => None,
            s => Some(s.parse::<Ipv4Net>().map_err(|_| {
                FactsError::Invalid(format!(
                    "/etc/kwinctl/pod-cidr holds {:?}, not a CIDR",
                    clip(&printable(s), 64)
                ))
            })?),
        };
        let recorded_cluster = match l.opt("cluster") {
            "" => None,
            s => {
                let bad = || {
                    FactsError::Invalid(format!(
                        "/etc/kwinctl/cluster holds {:?}, not a cluster name and id",
                        clip(&printable(s), 64)
                    ))
                };
                let (name, id) = s.split_once(' ').ok_or_else(bad)?;
                if !crate::inventory::valid_name(name)
                    || id.is_empty()
                    || !id.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    return Err(bad());
                }
                Some((name.to_string(), id.to_string()))
            }
        };
        let recorded_lock_host = match l.opt("lock_host") {
            "" => None,
            s if crate::inventory::valid_name(s) => Some(s.to_ascii_lowercase()),
            s => {
                return Err(FactsError::Invalid(format!(
                    "/etc/kwinctl/cluster names {:?} as the lock host, not a host name",
                    clip(&printable(s), 64)
                )));
            }
        };
        let cluster_gen = match l.opt("cluster_gen") {
            "" => 0,
            s => s.parse().map_err(|_| {
                FactsError::Invalid(format!(
                    "/etc/kwinctl/cluster.gen holds {:?}, not a number",
                    clip(&printable(s), 32)
                ))
            })?,
        };
        let registry = l
            .registered
            .iter()
            .map(|line| {
                crate::alloc::Registered::parse(line).ok_or_else(|| {
                    FactsError::Invalid(format!(
                        "/etc/kwinctl/cluster.blocks holds {:?}, not `name cidr address`",
                        clip(&printable(line), 80)
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let reach = crate::probe::parse_reach(&l.reach)?;
        let k8s_nodes = match l.opt("nodes") {
            "" => None,
            "listed" => Some(Ok(l
                .nodes
                .iter()
                .filter_map(|line| {
                    let line: String = line
                        .chars()
                        .filter(|c| c.is_ascii_alphanumeric() || "._ -|/+".contains(*c))
                        .collect();
                    // `name|ready|os|build|podCIDR|kubeletVersion`; an older kwinctl's
                    // (and a test's) `name ready os` too
                    if line.contains('|') {
                        let f: Vec<&str> = line.split('|').map(str::trim).collect();
                        let at = |i: usize| f.get(i).copied().unwrap_or_default().to_string();
                        return (!f[0].is_empty()).then(|| K8sNode {
                            name: at(0),
                            ready: at(1) == "True",
                            os: at(2),
                            windows_build: Some(at(3)),
                            pod_cidr: Some(at(4)),
                            kubelet_version: f.get(5).map(|v| v.to_string()),
                        });
                    }
                    let mut it = line.split_whitespace();
                    Some(K8sNode {
                        name: it.next()?.to_string(),
                        ready: it.next() == Some("True"),
                        os: it.next().unwrap_or_default().to_string(),
                        windows_build: None,
                        pod_cidr: None,
                        kubelet_version: None,
                    })
                })
                .collect())),
            _ => Some(Err("kubectl get nodes failed".to_string())),
        };
        Ok(LinuxFacts {
            hostname: printable(l.get("hostname")?),
            ip_forward,
            systemd,
            routes,
            recorded_pod_cidr,
            recorded_cluster,
            recorded_lock_host,
            cluster_gen,
            registry,
            boot_sha: sha(l.get("boot_sha")?),
            unit_sha: sha(l.opt("unit_sha")),
            unit_enabled: l.opt("unit_enabled") == "enabled",
            unit_file_state: clip(&printable(l.opt("unit_enabled")), 40),
            unit_state: match l.opt("unit_state") {
                "" => None,
                s => Some(UnitState::parse(s)?),
            },
            unit_journal: l
                .scalars
                .get("unit_journal")
                .map(|j| clip(&printable(j.trim()), 400)),
            reach,
            k8s_nodes,
            api_server: KubeVersion::of_git_version(l.opt("apiserver")),
        })
    }

    /// A freshly installed host: what `render` diffs against.
    pub fn fresh(systemd: bool) -> LinuxFacts {
        LinuxFacts {
            hostname: String::new(),
            systemd,
            ..LinuxFacts::default()
        }
    }
}

/// `ip -j` writes an interface's name as it is, control characters and
/// all (a name may hold any byte but '/', NUL and whitespace), which JSON
/// does not allow raw inside a string: they are escaped here, so such a
/// device is read, not the whole host refused. (Shown later only through
/// `text::sanitize`.)
fn escape_raw_controls(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(|c| c.is_ascii_control()) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string && !escaped && c.is_ascii_control() {
            out.push_str(&format!("\\u{:04x}", c as u32));
            continue;
        }
        out.push(c);
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_name_with_control_characters_does_not_refuse_the_host() {
        let json = "[{\"dst\":\"198.19.200.0/24\",\"dev\":\"x\u{1b}[2Jy\u{7}\",\"protocol\":\"static\",\"flags\":[]}]";
        let v: Vec<RawRoute> = serde_json::from_str(&escape_raw_controls(json)).unwrap();
        assert_eq!(v[0].dev.as_deref(), Some("x\u{1b}[2Jy\u{7}"));
        // an escaped quote or backslash in a name is left as it was
        let json = r#"[{"dst":"198.19.1.0/24","dev":"a\"b\\","flags":[]}]"#;
        assert_eq!(escape_raw_controls(json), json);
    }

    const ROUTES: &str = r#"[{"dst":"default","gateway":"198.18.1.1","dev":"eth0"},{"dst":"198.18.1.0/24","dev":"eth0","protocol":"kernel","scope":"link"},{"dst":"198.19.1.0/24","gateway":"198.18.1.3","dev":"eth0","protocol":"198"},{"dst":"10.1.2.3","dev":"eth0","protocol":"static"}]"#;

    fn sample() -> String {
        format!(
            "welcome to h1!\nKWF probe linux 2\nKWF hostname h1\r\nKWF ip_forward 1\n\
             KWF pod_cidr 198.19.0.0/24\nKWF cluster lab 0a1b2c\nKWF cluster_gen 3\n\
             KWF registered h1 198.19.0.0/24 198.18.1.2\nKWF boot_sha \nKWF systemd false\n\
             KWF routes {ROUTES}\nKWF reach 198.18.1.3 ok\nKWF reach 198.18.1.4 fail\nKWF end\n"
        )
    }

    #[test]
    fn the_protocol_text_is_the_number_routes_are_marked_with() {
        assert_eq!(ROUTE_PROTO_TEXT, super::super::ROUTE_PROTO.to_string());
        let mut r = LinuxFacts::parse(&sample(), "").unwrap().routes.remove(2);
        for (proto, owned) in [
            ("198", true),
            ("kwinctl", true),
            ("1980", false),
            ("boot", false),
        ] {
            r.proto = proto.into();
            assert_eq!(r.owned(), owned, "{proto}");
        }
    }

    #[test]
    fn parses_a_probe() {
        let f = LinuxFacts::parse(&sample(), "").unwrap();
        assert_eq!(f.hostname, "h1");
        assert!(f.ip_forward);
        assert!(!f.systemd);
        assert_eq!(f.routes.len(), 4);
        assert_eq!(f.routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(f.routes[0].proto, "boot");
        assert!(f.routes[2].owned());
        assert_eq!(f.routes[3].dst.to_string(), "10.1.2.3/32");
        assert_eq!(f.recorded_pod_cidr.unwrap().to_string(), "198.19.0.0/24");
        assert_eq!(
            f.recorded_cluster,
            Some(("lab".to_string(), "0a1b2c".to_string()))
        );
        assert_eq!(f.cluster_gen, 3);
        assert_eq!(f.registry.len(), 1);
        assert_eq!(f.registry[0].line(), "h1 198.19.0.0/24 198.18.1.2");
        assert_eq!(f.boot_sha, None);
        assert_eq!(f.reach.len(), 2);
        assert_eq!(
            f.reach[&"198.18.1.4".parse::<Ipv4Addr>().unwrap()],
            Reach::NoAnswer
        );
        assert_eq!(f.k8s_nodes, None);
    }

    #[test]
    fn parses_systemd_and_nodes() {
        let sha = "a".repeat(64);
        let out = sample().replace(
            "KWF systemd false\n",
            &format!("KWF systemd true\nKWF unit_sha {sha}\nKWF unit_enabled enabled\n"),
        );
        let out = out.replace(
            "KWF end",
            "KWF nodes listed\nKWF node h1 True linux\nKWF node w\u{1b}[1m1 False windows\nKWF end",
        );
        let f = LinuxFacts::parse(&out, "").unwrap();
        assert!(f.systemd && f.unit_enabled);
        assert_eq!(f.unit_sha.as_deref(), Some(sha.as_str()));
        let nodes = f.k8s_nodes.unwrap().unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!((nodes[0].name.as_str(), nodes[0].ready), ("h1", true));
        // control characters from the host never reach the report
        assert_eq!(nodes[1].name, "w1m1");
        assert_eq!(nodes[1].os, "windows");
        assert_eq!(nodes[1].pod_cidr, None);
        // kwinctl's own format, with the build label and the pod CIDR
        let out = sample().replace(
            "KWF end",
            "KWF nodes listed\nKWF node 10.0.0.11|True|windows|10.0.20348|10.244.1.0/24|v1.30.4+k1\nKWF node 10.0.0.12|False|windows||\nKWF end",
        );
        let nodes = LinuxFacts::parse(&out, "")
            .unwrap()
            .k8s_nodes
            .unwrap()
            .unwrap();
        assert_eq!(nodes[0].windows_build.as_deref(), Some("10.0.20348"));
        assert_eq!(nodes[0].pod_cidr.as_deref(), Some("10.244.1.0/24"));
        assert!(nodes[0].ready && !nodes[1].ready);
        assert_eq!(nodes[1].windows_build.as_deref(), Some(""));
        assert_eq!(nodes[0].kubelet_version.as_deref(), Some("v1.30.4+k1"));
        assert_eq!(nodes[1].kubelet_version, None);
        assert_eq!(LinuxFacts::parse(&out, "").unwrap().api_server, None);
        // kube-apiserver's release, with a distribution's suffix
        for (line, want) in [
            ("v1.30.4+k3s1", Some("1.30.4")),
            ("v1.31.2", Some("1.31.2")),
            ("v1.31", None),
            ("1.31.2", None),
            ("v1.3\u{1b}1.2", None),
        ] {
            let o = sample().replace("KWF end", &format!("KWF apiserver {line}\nKWF end"));
            let got = LinuxFacts::parse(&o, "").unwrap().api_server;
            assert_eq!(got.map(|v| v.to_string()).as_deref(), want, "{line}");
        }
        let failed = sample().replace("KWF end", "KWF nodes failed\nKWF end");
        assert!(
            LinuxFacts::parse(&failed, "")
                .unwrap()
                .k8s_nodes
                .unwrap()
                .is_err()
        );
    }

    /// The unit's state and boot.sh's journal line: parsed, and nothing the
    /// host wrote reaches the report with its control characters.
    #[test]
    fn parses_the_units_run_and_journal_line() {
        let out = sample().replace(
            "KWF systemd false\n",
            "KWF systemd true\nKWF unit_sha \nKWF unit_enabled masked\n\
             KWF unit_state loaded failed failed exit-code 3\n\
             KWF unit_journal kwinctl-boot: gave up \u{1b}[31mafter\u{7} 2 s\r\n",
        );
        let f = LinuxFacts::parse(&out, "").unwrap();
        assert!(!f.unit_enabled);
        assert_eq!(f.unit_file_state, "masked");
        let s = f.unit_state.unwrap();
        assert_eq!(
            (
                s.load.as_str(),
                s.active.as_str(),
                s.sub.as_str(),
                s.result.as_str(),
                s.restarts
            ),
            ("loaded", "failed", "failed", "exit-code", 3)
        );
        assert_eq!(
            f.unit_journal.unwrap(),
            "kwinctl-boot: gave up [31mafter 2 s"
        );
        // absent (no systemd, or not failed)
        let f = LinuxFacts::parse(&sample(), "").unwrap();
        assert_eq!((f.unit_state, f.unit_journal), (None, None));
        for bad in [
            "loaded failed failed exit-code",
            "loaded failed failed exit-code x",
            "loaded fa\u{1b}iled failed exit-code 1",
        ] {
            let out = sample().replace("KWF end", &format!("KWF unit_state {bad}\nKWF end"));
            assert!(LinuxFacts::parse(&out, "").is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_facts_are_errors_not_panics() {
        let s = sample();
        for bad in [
            "KWF probe linux 2\n".to_string(),
            s[..s.len() / 2].to_string(),
            s.replace("KWF end\n", ""),
            s.replace("KWF end\n", "KWF end\nKWF hostname x\n"),
            s.replace("KWF ip_forward 1", "KWF ip_forward yes"),
            s.replace("KWF ip_forward 1\n", ""),
            s.replace("KWF systemd false", "KWF systemd maybe"),
            s.replace("198.18.1.3\",\"dev", "x\",\"dev"),
            s.replace("linux 2", "linux 7"),
            s.replace("198.19.0.0/24\n", "garbage\n"),
            s.replace("lab 0a1b2c", "lab"),
            s.replace("lab 0a1b2c", "l;b 0a1b2c"),
            s.replace("KWF cluster_gen 3", "KWF cluster_gen x"),
            s.replace("198.19.0.0/24 198.18.1.2", "198.19.0.0/24"),
            s.replace("198.18.1.4 fail", "198.18.1.4 maybe"),
            s.replace("KWF hostname h1", "KWF hostname h1\nKWF hostname h2"),
            s.replace("KWF hostname h1", "KWF colour blue"),
            s.replace(ROUTES, "null"),
            s.replace(ROUTES, "[{"),
        ] {
            assert!(LinuxFacts::parse(&bad, "").is_err(), "{bad}");
        }
    }

    #[test]
    fn no_probe_output_names_stderr() {
        assert!(matches!(
            LinuxFacts::parse("nothing", "sh: ip: not found"),
            Err(FactsError::Missing { stderr, .. }) if stderr.contains("ip: not found")
        ));
    }
}
