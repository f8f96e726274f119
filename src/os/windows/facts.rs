//! Windows facts: build, Hyper-V, Docker, adapters, routing, the HNS
//! network, routes, images, files and services, as the PowerShell probe
//! (`templates/probe.ps1.j2`, beside this file) reports them: one line
//! `KWINCTL-FACTS {json}` (PowerShell's ConvertTo-Json). The simulated host
//! (`winsim/winsim.py`, `facts()`) prints the same JSON.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::probe::{FactsError, Reach};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adapter {
    pub name: String,
    pub index: u32,
    #[serde(default)]
    pub ipv4: Vec<Ipv4Addr>,
    #[serde(default)]
    pub forwarding: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    pub name: String,
    pub driver: String,
    #[serde(default)]
    pub subnet: Option<Ipv4Net>,
    #[serde(default)]
    pub gateway: Option<Ipv4Addr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WinRoute {
    pub dst: Ipv4Net,
    #[serde(default)]
    pub via: Option<Ipv4Addr>,
    pub index: u32,
    #[serde(default)]
    pub persistent: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFact {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    pub name: String,
    /// Running, Stopped, …
    pub status: String,
    /// Automatic, Manual, Disabled
    pub start: String,
    /// The service's command line (ImagePath).
    pub binpath: String,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub depends: Vec<String>,
    /// Restart-on-failure configured.
    #[serde(default)]
    pub restart: bool,
}

/// What `<binary> --version` printed (kubelet.exe: `Kubernetes v1.16.15`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionFact {
    pub path: String,
    #[serde(default)]
    pub output: String,
}

/// A scheduled task of kwinctl's (`\kwinctl\<name>`), the wrapper that runs
/// a binary older than `--windows-service`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFact {
    pub name: String,
    /// Ready, Running, Disabled, …
    pub state: String,
    /// kwinctl writes the service's fingerprint into it.
    #[serde(default)]
    pub description: String,
    /// Whether the binary (`C:\k\<name>.exe`) is running.
    #[serde(default)]
    pub running: bool,
}

/// The Windows version an image is built on (`docker inspect`'s
/// `OsVersion`, e.g. `10.0.14393.1884`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageOs {
    pub image: String,
    #[serde(default)]
    pub os_version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowsFacts {
    pub hostname: String,
    /// e.g. "10.0.14393"
    pub build: String,
    pub hyperv_module: bool,
    /// Empty when Docker is not installed.
    pub docker_version: String,
    pub adapters: Vec<Adapter>,
    /// The Routing role service is installed.
    pub routing_installed: bool,
    pub switches: Vec<Switch>,
    pub networks: Vec<Network>,
    pub routes: Vec<WinRoute>,
    pub images: Vec<String>,
    pub files: Vec<FileFact>,
    pub services: Vec<Service>,
    /// kwinctl's scheduled tasks of those names.
    #[serde(default)]
    pub tasks: Vec<TaskFact>,
    /// `--version` of the binaries present.
    #[serde(default)]
    pub versions: Vec<VersionFact>,
    /// The OS version of the pause image, when it is present.
    #[serde(default)]
    pub image_os: Vec<ImageOs>,
    /// The pod CIDR kwinctl recorded on the host (C:\k\kwinctl\pod-cidr.txt).
    #[serde(default)]
    pub pod_cidr: Option<Ipv4Net>,
    /// The cluster kwinctl recorded beside it (C:\k\kwinctl\cluster.txt):
    /// "name id".
    #[serde(default)]
    pub cluster: Option<String>,
    /// Reachability of other nodes' addresses (`Test-Connection`), when asked.
    #[serde(skip)]
    pub reach: BTreeMap<Ipv4Addr, Reach>,
}

#[derive(Deserialize)]
struct Raw {
    v: u32,
    os: String,
    #[serde(default)]
    reach: Vec<String>,
    #[serde(flatten)]
    facts: WindowsFacts,
}

/// (major, minor, build) of a Windows version string.
pub fn parse_build(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.trim().split('.').map(|p| p.parse::<u32>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => Some((a, b, c)),
        _ => None,
    }
}

impl WindowsFacts {
    /// Parse a probe's stdout (the facts line in it).
    pub fn parse_output(stdout: &str, stderr: &str) -> Result<WindowsFacts, FactsError> {
        WindowsFacts::parse(crate::wire::facts_json(stdout, stderr)?)
    }

    pub fn parse(json: &str) -> Result<WindowsFacts, FactsError> {
        let raw: Raw =
            serde_json::from_str(json).map_err(|e| FactsError::Invalid(e.to_string()))?;
        if raw.v != 1 || raw.os != "windows" {
            return Err(FactsError::Invalid(format!(
                "expected a version 1 windows probe, got version {} os {:?}",
                raw.v, raw.os
            )));
        }
        if parse_build(&raw.facts.build).is_none() {
            return Err(FactsError::Invalid(format!(
                "build {:?} is not a Windows version",
                raw.facts.build
            )));
        }
        let mut facts = raw.facts;
        facts.reach = crate::probe::parse_reach(&raw.reach)?;
        if facts.cluster.is_some() && facts.recorded_cluster().is_none() {
            return Err(FactsError::Invalid(format!(
                r"C:\k\kwinctl\cluster.txt holds {:?}, not a cluster name and id",
                crate::text::clip(facts.cluster.as_deref().unwrap_or(""), 64)
            )));
        }
        Ok(facts)
    }

    /// The cluster recorded on the node: (name, id).
    pub fn recorded_cluster(&self) -> Option<(String, String)> {
        let (name, id) = self.cluster.as_deref()?.trim().split_once(' ')?;
        (crate::inventory::valid_name(name)
            && !id.is_empty()
            && id.chars().all(|c| c.is_ascii_alphanumeric()))
        .then(|| (name.to_string(), id.to_string()))
    }

    /// A freshly installed Windows Server of `build` (14393: 2016, 17763:
    /// 2019) with Hyper-V, Docker and two adapters: what `render` diffs
    /// against.
    pub fn fresh(address: Ipv4Addr, adapter: Option<&str>, build: u32) -> WindowsFacts {
        WindowsFacts {
            hostname: String::new(),
            build: format!("10.0.{build}"),
            hyperv_module: true,
            docker_version: "1.12.2-cs2-ws-beta".into(),
            adapters: vec![
                Adapter {
                    name: adapter.unwrap_or("Ethernet").to_string(),
                    index: 4,
                    ipv4: vec![address],
                    forwarding: false,
                },
                Adapter {
                    name: "Ethernet 2".into(),
                    index: 5,
                    ipv4: vec![],
                    forwarding: false,
                },
            ],
            routing_installed: false,
            switches: vec![],
            networks: vec![],
            routes: vec![],
            images: vec![],
            files: vec![],
            services: vec![],
            tasks: vec![],
            versions: vec![],
            image_os: vec![],
            pod_cidr: None,
            cluster: None,
            reach: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const SAMPLE: &str = r#"{"v":1,"os":"windows","hostname":"WIN01","build":"10.0.14393",
      "hyperv_module":true,"docker_version":"17.06.2-ee-16",
      "adapters":[{"name":"Ethernet","index":4,"ipv4":["10.0.0.11"],"forwarding":true},
                  {"name":"vEthernet (HNSTransparent)","index":9,"ipv4":["192.168.1.1"],"forwarding":true}],
      "routing_installed":true,
      "switches":[{"name":"KubeProxySwitch","type":"Internal"}],
      "networks":[{"name":"kwinctl","driver":"transparent","subnet":"192.168.1.0/24","gateway":"192.168.1.1"}],
      "routes":[{"dst":"192.168.0.0/24","via":"10.0.0.10","index":4,"persistent":true}],
      "images":["apprenda/pause:latest"],
      "files":[{"path":"C:\\k\\kubelet.exe","sha256":"ab"}],
      "services":[{"name":"kubelet","status":"Running","start":"Automatic","binpath":"C:\\k\\kubelet.exe --windows-service",
                   "env":["CONTAINER_NETWORK=kwinctl"],"depends":["docker"],"restart":true}],
      "pod_cidr":"192.168.1.0/24","cluster":"demo 0a1b"}"#;

    #[test]
    fn parses_a_probe() {
        let f = WindowsFacts::parse(SAMPLE).unwrap();
        assert_eq!(f.adapters[1].name, "vEthernet (HNSTransparent)");
        assert_eq!(f.networks[0].subnet.unwrap().to_string(), "192.168.1.0/24");
        assert_eq!(f.services[0].depends, ["docker"]);
        assert_eq!(parse_build(&f.build), Some((10, 0, 14393)));
        assert_eq!(f.recorded_cluster(), Some(("demo".into(), "0a1b".into())));
    }

    #[test]
    fn bad_facts_are_errors() {
        for bad in [
            "",
            &SAMPLE[..200],
            &SAMPLE.replace(r#""os":"windows""#, r#""os":"linux""#),
            &SAMPLE.replace("10.0.14393", "ten"),
            &SAMPLE.replace(r#""index":4,"ipv4""#, r#""index":"four","ipv4""#),
            &SAMPLE.replace("192.168.0.0/24", "nope"),
            &SAMPLE.replace("demo 0a1b", "demo"),
        ] {
            assert!(WindowsFacts::parse(bad).is_err(), "{bad}");
        }
    }
}
