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
    /// Listed by `Get-NetAdapter -Physical` (a network card, not a virtual
    /// adapter of Hyper-V or Docker).
    #[serde(default)]
    pub physical: bool,
    /// `Get-NetAdapter`'s Status: Up, Disconnected, Disabled, …
    #[serde(default)]
    pub status: String,
    /// DHCP enabled on its IPv4 interface.
    #[serde(default)]
    pub dhcp: bool,
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
    /// The network card it was created on
    /// (`com.docker.network.windowsshim.interface`), when it was named.
    #[serde(default)]
    pub interface: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WinRoute {
    pub dst: Ipv4Net,
    #[serde(default)]
    pub via: Option<Ipv4Addr>,
    pub index: u32,
    /// In the persistent store (what a reboot brings back).
    #[serde(default)]
    pub persistent: bool,
    /// In the active store (what routes now); a route only in the
    /// persistent store comes back at the next reboot.
    #[serde(default = "yes")]
    pub active: bool,
}

fn yes() -> bool {
    true
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
    /// The service's command line (ImagePath), as the service manager has it.
    pub binpath: String,
    /// Its registry environment (a null inside, which Windows PowerShell
    /// 5.1 gives for a service without one, is dropped).
    #[serde(default, deserialize_with = "strings")]
    pub env: Vec<String>,
    #[serde(default, deserialize_with = "strings")]
    pub depends: Vec<String>,
    /// Restart-on-failure configured: from `failure_actions` when the probe
    /// sends it.
    #[serde(default)]
    pub restart: bool,
    /// The registry's `FailureActions` value (base64), empty when none.
    #[serde(default, skip_serializing)]
    pub failure_actions: Option<String>,
}

/// A list of strings in which nulls are dropped (`@($null)` is one element
/// in PowerShell).
fn strings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v: Option<Vec<Option<String>>> = Deserialize::deserialize(d)?;
    Ok(v.unwrap_or_default().into_iter().flatten().collect())
}

/// Whether a service's `FailureActions` registry value restarts it: the
/// value is a SERVICE_FAILURE_ACTIONS — reset period, reboot message,
/// command, the number of actions (each 32 bits), the actions' offset, then
/// that many SC_ACTIONs (type, delay: 32 bits each); SC_ACTION_RESTART is 1
/// (Microsoft docs, SERVICE_FAILURE_ACTIONS and SC_ACTION; the value's
/// layout in the registry: B).
pub fn restarts(failure_actions: &[u8]) -> bool {
    let u32_at = |i: usize| {
        failure_actions
            .get(i..i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let Some(n) = u32_at(12) else { return false };
    (0..n.min(64) as usize).any(|k| u32_at(20 + 8 * k) == Some(1))
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
    /// It has an enabled trigger at startup (`New-ScheduledTaskTrigger
    /// -AtStartup`, class `MSFT_TaskBootTrigger`).
    #[serde(default)]
    pub at_startup: bool,
}

/// A Windows Firewall rule of kwinctl's (`kwinctl-*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FwFact {
    pub name: String,
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub description: String,
}

/// The Windows version an image is built on (`docker inspect`'s
/// `OsVersion`, e.g. `10.0.14393.1884`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageOs {
    pub image: String,
    #[serde(default)]
    pub os_version: String,
}

/// An HNS network (`Get-HnsNetwork`; l2bridge profile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnsNetwork {
    pub name: String,
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub subnets: Vec<HnsSubnet>,
    /// The node address HNS publishes on the network once the vSwitch
    /// holds it (docs/research/flannel.md#f1 polls for it).
    #[serde(default)]
    pub management_ip: Option<String>,
    /// The network card it was created on (`NetworkAdapterName`).
    #[serde(default)]
    pub adapter: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnsSubnet {
    pub prefix: String,
    #[serde(default)]
    pub gateway: Option<String>,
}

/// An HNS endpoint (`Get-HnsEndpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnsEndpoint {
    pub name: String,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub network_id: String,
    #[serde(default)]
    pub ip: Option<String>,
    /// A host vNIC holds its address (attached to the host compartment).
    #[serde(default)]
    pub attached: bool,
}

/// A health endpoint on the node (`http://127.0.0.1:PORT/healthz`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub port: u16,
    #[serde(default)]
    pub ok: bool,
}

/// The TCP dynamic (ephemeral) port range: `start` and the `count` ports
/// after it (docs/research/windows-dynamic-ports.md#dyn1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRange {
    pub start: u32,
    pub count: u32,
}

impl PortRange {
    /// Whether this range holds every port of `other` (the numbers are a
    /// host's: no overflow).
    pub fn covers(&self, other: PortRange) -> bool {
        let end = |r: &PortRange| u64::from(r.start) + u64::from(r.count);
        self.start <= other.start && end(self) >= end(&other)
    }
}

fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowsFacts {
    pub hostname: String,
    /// e.g. "10.0.14393"
    pub build: String,
    /// The update build revision (`UBR` under `HKLM:\SOFTWARE\Microsoft\
    /// Windows NT\CurrentVersion`): the `1554` of 10.0.17763.1554, what the
    /// installed cumulative update brought (docs/research/kubernetes.md#k-dsr);
    /// `None` when the probe could not read it.
    #[serde(default)]
    pub ubr: Option<u32>,
    pub hyperv_module: bool,
    /// Empty when Docker is not installed.
    pub docker_version: String,
    pub adapters: Vec<Adapter>,
    /// The Routing role service is installed.
    pub routing_installed: bool,
    /// `Get-WindowsFeature`'s InstallState of the Routing role (Installed,
    /// InstallPending — installed, waiting for a restart —, Available);
    /// empty when it could not be read.
    #[serde(default)]
    pub routing_state: String,
    /// The same for the Hyper-V role (New-VMSwitch needs the role, not only
    /// its PowerShell module).
    #[serde(default)]
    pub hyperv_role: String,
    pub switches: Vec<Switch>,
    pub networks: Vec<Network>,
    pub routes: Vec<WinRoute>,
    pub images: Vec<String>,
    pub files: Vec<FileFact>,
    pub services: Vec<Service>,
    /// kwinctl's scheduled tasks of those names.
    #[serde(default)]
    pub tasks: Vec<TaskFact>,
    /// kwinctl's own folders present (`leftovers.rs`).
    #[serde(default)]
    pub folders: Vec<String>,
    /// `--version` of the binaries present.
    #[serde(default)]
    pub versions: Vec<VersionFact>,
    /// The OS version of the pause image, when it is present.
    #[serde(default)]
    pub image_os: Vec<ImageOs>,
    /// kwinctl's firewall rules.
    #[serde(default)]
    pub firewall: Vec<FwFact>,
    /// The pod CIDR kwinctl recorded on the host (C:\k\kwinctl\pod-cidr.txt).
    #[serde(default)]
    pub pod_cidr: Option<Ipv4Net>,
    /// The cluster kwinctl recorded beside it (C:\k\kwinctl\cluster.txt):
    /// "name id".
    #[serde(default)]
    pub cluster: Option<String>,
    /// The second line of that file: the host that keeps the cluster's
    /// lock and registry.
    #[serde(default)]
    pub lock_host: Option<String>,
    /// The kubelet's client certificate, when its certificate directory
    /// holds one (`identity/cert.rs`).
    #[serde(default)]
    pub kubelet_client: Option<crate::identity::cert::ClientCert>,
    /// l2bridge: `Get-WindowsFeature Containers`'s InstallState.
    #[serde(default)]
    pub containers_feature: String,
    #[serde(default, deserialize_with = "nullable")]
    pub hns_networks: Vec<HnsNetwork>,
    #[serde(default, deserialize_with = "nullable")]
    pub hns_endpoints: Vec<HnsEndpoint>,
    /// The files in containerd's CNI conf dir, by name.
    #[serde(default, deserialize_with = "nullable")]
    pub cni_conf_files: Vec<String>,
    /// Images in containerd's `k8s.io` namespace.
    #[serde(default, deserialize_with = "nullable")]
    pub sandbox_images: Vec<String>,
    #[serde(default)]
    pub containerd_pipe: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub health: Vec<Health>,
    /// l2bridge: the TCP dynamic port range; `None` when netsh's answer
    /// could not be read.
    #[serde(default)]
    pub tcp_dynamic_ports: Option<PortRange>,
    /// When the host last started (Win32_OperatingSystem.LastBootUpTime).
    #[serde(default)]
    pub boot_time: String,
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

pub use super::refs::{normalise_image, parse_build};

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
        for s in &mut facts.services {
            if let Some(b64) = s.failure_actions.take() {
                let bytes =
                    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &b64)
                        .map_err(|e| {
                            FactsError::Invalid(format!(
                                "service {}: FailureActions is not base64: {e}",
                                crate::text::clip(&s.name, 64)
                            ))
                        })?;
                s.restart = restarts(&bytes);
            }
        }
        if facts.cluster.is_some() && facts.recorded_cluster().is_none() {
            return Err(FactsError::Invalid(format!(
                r"C:\k\kwinctl\cluster.txt holds {:?}, not a cluster name and id",
                crate::text::clip(facts.cluster.as_deref().unwrap_or(""), 64)
            )));
        }
        Ok(facts)
    }

    /// The lock host recorded on the node (lower case; `None`: none, or
    /// not a host name).
    pub fn recorded_lock_host(&self) -> Option<String> {
        let h = self.lock_host.as_deref()?.trim();
        crate::inventory::valid_name(h).then(|| h.to_ascii_lowercase())
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
    /// 2019) with Hyper-V, Docker and two network cards (the routable one,
    /// and one for the transparent network): what `render` diffs against.
    pub fn fresh(
        address: Ipv4Addr,
        adapter: Option<&str>,
        transparent: Option<&str>,
        build: u32,
    ) -> WindowsFacts {
        WindowsFacts {
            hostname: String::new(),
            build: format!("10.0.{build}"),
            ubr: None,
            hyperv_module: true,
            docker_version: "1.12.2-cs2-ws-beta".into(),
            adapters: vec![
                Adapter {
                    name: adapter.unwrap_or("Ethernet").to_string(),
                    index: 4,
                    ipv4: vec![address],
                    forwarding: false,
                    physical: true,
                    status: "Up".into(),
                    dhcp: false,
                },
                Adapter {
                    name: transparent.unwrap_or("Ethernet 2").to_string(),
                    index: 5,
                    ipv4: vec![],
                    forwarding: false,
                    physical: true,
                    status: "Up".into(),
                    dhcp: true,
                },
            ],
            routing_installed: false,
            routing_state: "Available".into(),
            hyperv_role: "Installed".into(),
            switches: vec![],
            networks: vec![],
            routes: vec![],
            images: vec![],
            files: vec![],
            services: vec![],
            tasks: vec![],
            folders: vec![],
            versions: vec![],
            image_os: vec![],
            firewall: vec![],
            pod_cidr: None,
            cluster: None,
            lock_host: None,
            // (a host with the Containers feature already installed and
            // rebooted: `render` shows the whole l2bridge script)
            kubelet_client: None,
            containers_feature: "Installed".into(),
            hns_networks: vec![],
            hns_endpoints: vec![],
            cni_conf_files: vec![],
            sandbox_images: vec![],
            containerd_pipe: false,
            health: vec![],
            // Windows' default (docs/research/windows-dynamic-ports.md#dyn1)
            tcp_dynamic_ports: Some(PortRange {
                start: 49152,
                count: 16384,
            }),
            boot_time: String::new(),
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

    /// `sc.exe failure kubelet reset= 86400 actions=
    /// restart/10000/restart/10000/restart/10000`, as the registry keeps it.
    fn failure_blob(kind: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [86400u32, 0, 0, 3, 20] {
            b.extend(v.to_le_bytes());
        }
        for _ in 0..3 {
            b.extend(kind.to_le_bytes());
            b.extend(10000u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn recovery_is_read_from_the_registry_value_not_localized_text() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        assert!(restarts(&failure_blob(1)));
        // SC_ACTION_NONE, SC_ACTION_REBOOT, SC_ACTION_RUN_COMMAND
        for kind in [0, 2, 3] {
            assert!(!restarts(&failure_blob(kind)), "{kind}");
        }
        assert!(!restarts(&[]) && !restarts(&failure_blob(1)[..12]));
        let with =
            |fa: &str| SAMPLE.replace(r#""restart":true"#, &format!(r#""failure_actions":"{fa}""#));
        let f = WindowsFacts::parse(&with(&b64(&failure_blob(1)))).unwrap();
        assert!(f.services[0].restart);
        let f = WindowsFacts::parse(&with(&b64(&failure_blob(0)))).unwrap();
        assert!(!f.services[0].restart);
        let f = WindowsFacts::parse(&with("")).unwrap();
        assert!(!f.services[0].restart);
        assert!(WindowsFacts::parse(&with("not base64!")).is_err());
    }

    #[test]
    fn a_service_without_an_environment_parses() {
        // Windows PowerShell 5.1: @((Get-ItemProperty …).Environment) of a
        // service without one is @($null), one element (docs/research/windows-transparent.md#defect-13)
        let f = WindowsFacts::parse(
            &SAMPLE.replace(r#""env":["CONTAINER_NETWORK=kwinctl"]"#, r#""env":[null]"#),
        )
        .unwrap();
        assert!(f.services[0].env.is_empty());
        let f = WindowsFacts::parse(
            &SAMPLE.replace(r#""env":["CONTAINER_NETWORK=kwinctl"]"#, r#""env":null"#),
        )
        .unwrap();
        assert!(f.services[0].env.is_empty());
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
