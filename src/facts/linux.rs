//! Linux facts: routes, forwarding, kwinctl's files on the host.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

use super::{FactsError, ROUTE_PROTO, Reach};

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
    pub fn owned(&self) -> bool {
        self.proto == ROUTE_PROTO.to_string() || self.proto == "kwinctl"
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
    /// sha256 of `/etc/kwinctl/boot.sh`.
    pub boot_sha: Option<String>,
    /// sha256 of the systemd unit, and whether it is enabled.
    pub unit_sha: Option<String>,
    pub unit_enabled: bool,
    /// Reachability of other nodes' addresses, when the probe was asked.
    pub reach: BTreeMap<Ipv4Addr, Reach>,
    /// On the control plane when asked: the nodes kubectl sees (`None`: no
    /// kubectl, or not asked; `Some(Err)`: kubectl failed).
    pub k8s_nodes: Option<Result<Vec<K8sNode>, String>>,
}

/// A node as `kubectl get nodes` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sNode {
    pub name: String,
    pub ready: bool,
    pub os: String,
}

#[derive(Deserialize)]
struct RawLinux {
    v: u32,
    os: String,
    hostname: String,
    ip_forward: String,
    systemd: bool,
    routes: Vec<RawRoute>,
    pod_cidr: String,
    boot_sha: String,
    unit_sha: String,
    unit_enabled: String,
    reach: Vec<String>,
    #[serde(default)]
    nodes: Option<serde_json::Value>,
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

fn sha(s: String) -> Option<String> {
    let s = s.trim().to_string();
    (s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())).then_some(s)
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

impl LinuxFacts {
    pub fn parse(json: &str) -> Result<LinuxFacts, FactsError> {
        let raw: RawLinux =
            serde_json::from_str(json).map_err(|e| FactsError::Invalid(e.to_string()))?;
        if raw.v != 1 || raw.os != "linux" {
            return Err(FactsError::Invalid(format!(
                "expected a version 1 linux probe, got version {} os {:?}",
                raw.v, raw.os
            )));
        }
        let ip_forward = match raw.ip_forward.trim() {
            "1" => true,
            "0" | "" => false,
            other => {
                return Err(FactsError::Invalid(format!(
                    "ip_forward is {other:?}, expected 0 or 1"
                )));
            }
        };
        let mut routes = Vec::new();
        for r in raw.routes {
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
        let recorded_pod_cidr = match raw.pod_cidr.trim() {
            "" => None,
            s => Some(s.parse::<Ipv4Net>().map_err(|_| {
                FactsError::Invalid(format!("/etc/kwinctl/pod-cidr holds {s:?}, not a CIDR"))
            })?),
        };
        let reach = super::parse_reach(&raw.reach)?;
        Ok(LinuxFacts {
            hostname: raw.hostname,
            ip_forward,
            systemd: raw.systemd,
            routes,
            recorded_pod_cidr,
            boot_sha: sha(raw.boot_sha),
            unit_sha: sha(raw.unit_sha),
            unit_enabled: raw.unit_enabled.trim() == "enabled",
            reach,
            k8s_nodes: match raw.nodes {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::Array(v)) => Some(Ok(v
                    .iter()
                    .filter_map(|l| {
                        let mut it = l.as_str()?.split_whitespace();
                        Some(K8sNode {
                            name: it.next()?.to_string(),
                            ready: it.next() == Some("True"),
                            os: it.next().unwrap_or_default().to_string(),
                        })
                    })
                    .collect())),
                Some(other) => Some(Err(format!("kubectl get nodes failed ({other})"))),
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{FACTS_MARKER, facts_json};

    pub const SAMPLE: &str = r#"{"v":1,"os":"linux","hostname":"h1","ip_forward":"1","systemd":false,
      "routes":[{"dst":"default","gateway":"198.18.1.1","dev":"eth0"},
                {"dst":"198.18.1.0/24","dev":"eth0","protocol":"kernel","scope":"link"},
                {"dst":"198.19.1.0/24","gateway":"198.18.1.3","dev":"eth0","protocol":"198"},
                {"dst":"10.1.2.3","dev":"eth0","protocol":"static"}],
      "pod_cidr":"198.19.0.0/24\n","boot_sha":"","unit_sha":"","unit_enabled":"",
      "reach":["198.18.1.3 ok","198.18.1.4 fail"]}"#;

    #[test]
    fn parses_a_probe() {
        let f = LinuxFacts::parse(SAMPLE).unwrap();
        assert!(f.ip_forward);
        assert_eq!(f.routes.len(), 4);
        assert_eq!(f.routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(f.routes[0].proto, "boot");
        assert!(f.routes[2].owned());
        assert_eq!(f.routes[3].dst.to_string(), "10.1.2.3/32");
        assert_eq!(f.recorded_pod_cidr.unwrap().to_string(), "198.19.0.0/24");
        assert_eq!(f.reach.len(), 2);
        assert_eq!(
            f.reach[&"198.18.1.4".parse::<Ipv4Addr>().unwrap()],
            Reach::NoAnswer
        );
    }

    #[test]
    fn bad_facts_are_errors_not_panics() {
        for bad in [
            "",
            "{",
            &SAMPLE[..SAMPLE.len() / 2],
            r#"{"v":1}"#,
            &SAMPLE.replace(r#""ip_forward":"1""#, r#""ip_forward":"yes""#),
            &SAMPLE.replace(r#""gateway":"198.18.1.3""#, r#""gateway":"x""#),
            &SAMPLE.replace(r#""v":1"#, r#""v":7"#),
            &SAMPLE.replace("198.19.0.0/24\\n", "garbage"),
            &SAMPLE.replace("198.18.1.4 fail", "198.18.1.4 maybe"),
        ] {
            assert!(LinuxFacts::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finds_the_marker_among_noise() {
        let out = format!("welcome!\n{FACTS_MARKER}{{\"a\":1}}\n");
        assert_eq!(facts_json(&out, "").unwrap(), "{\"a\":1}");
        assert!(matches!(
            facts_json("nothing", "sh: ip: not found"),
            Err(FactsError::Missing(m)) if m.contains("ip: not found")
        ));
    }
}
