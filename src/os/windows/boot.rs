//! The Windows counterpart of Linux's `boot.sh`: a scheduled task at
//! startup (`\kwinctl\kwinctl-boot`, as SYSTEM) whose script puts the pods'
//! network back before kubelet runs, then starts kubelet and kube-proxy.
//!
//! Why: at startup Docker removes the transparent networks HNS no longer
//! has (moby `daemon_windows.go`: "Remove networks not present in HNS";
//! only non-default `nat` networks are re-created), and a re-created
//! network's adapter has neither the pods' gateway address nor forwarding
//! (docs/research/windows-transparent.md#defect-20). kwinctl therefore registers
//! kubelet and kube-proxy to start on demand (a native service's start mode
//! Manual, a wrapper task without a trigger) and this task starts them
//! once the network is back: nothing starts them before it.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::hash::sha256_bytes;

/// The boot task's name (in [`super::TASK_PATH`]).
pub const BOOT_TASK: &str = "kwinctl-boot";

/// Bump when the boot script's template changes, so hosts get the new one.
const BOOT_VERSION: &str = "kwinctl-boot-1";

/// The l2bridge boot script's own version: 2 repairs only its own routes, in
/// both stores, and its task is stopped before and started after each
/// install (docs/windows-boot-task.md). The transparent script is unchanged,
/// so its hosts keep their task.
const L2BRIDGE_BOOT_VERSION: &str = "kwinctl-boot-l2bridge-2";

/// What the boot script restores and starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootSpec {
    pub network: String,
    pub subnet: Ipv4Net,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    /// The card the network takes.
    pub interface: String,
    /// The network's adapter (named by build).
    pub adapter: String,
    pub node_address: Ipv4Addr,
    /// The routable adapter's name, when the inventory names it.
    pub routable_adapter: Option<String>,
    /// Native services to start, in order.
    pub services: Vec<String>,
    /// kwinctl's wrapper tasks to start, in order.
    pub tasks: Vec<String>,
    /// The profile's own part (its JSON is flattened into this one's).
    #[serde(flatten)]
    pub profile: BootProfile,
    /// A digest of everything above (and of the script's version): the
    /// task's description carries it, so a change reinstalls the task.
    pub fingerprint: String,
}

impl BootSpec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        network: &str,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
        interface: &str,
        adapter: &str,
        node_address: Ipv4Addr,
        routable_adapter: Option<&str>,
        services: Vec<String>,
        tasks: Vec<String>,
    ) -> BootSpec {
        let mut b = BootSpec {
            network: network.into(),
            subnet,
            prefix: subnet.prefix_len(),
            gateway,
            interface: interface.into(),
            adapter: adapter.into(),
            node_address,
            routable_adapter: routable_adapter.map(str::to_string),
            services,
            tasks,
            profile: BootProfile::Transparent,
            fingerprint: String::new(),
        };
        b.fingerprint = b.digest();
        b
    }

    /// The l2bridge profile's boot task: its network, host endpoint,
    /// forwarding and routes, then the services (the transparent fields say
    /// the same network in their terms).
    pub fn l2bridge(l2: L2Boot, node_address: Ipv4Addr, services: Vec<String>) -> BootSpec {
        let mut b = BootSpec::new(
            &l2.network.name,
            l2.network.subnet,
            l2.network.gateway,
            &l2.network.adapter,
            &format!("vEthernet ({})", l2.network.adapter),
            node_address,
            None,
            services,
            vec![],
        );
        b.profile = BootProfile::L2Bridge(Box::new(l2));
        b.fingerprint = b.digest();
        b
    }

    fn digest(&self) -> String {
        let mut b = self.clone();
        b.fingerprint = String::new();
        let version = match self.profile {
            BootProfile::L2Bridge(_) => L2BRIDGE_BOOT_VERSION,
            BootProfile::Transparent => BOOT_VERSION,
        };
        let digest = serde_json::to_vec(&(&b, version)).expect("boot JSON");
        sha256_bytes(&digest)[..16].to_string()
    }

    /// Whether the host's boot task is this one: kwinctl's task with this
    /// spec's fingerprint, not disabled, and started at boot. A task whose
    /// startup trigger was removed or disabled is registered and enabled
    /// but never runs again (docs/research/windows-tasks.md#bt-trigger).
    pub fn installed(&self, f: &super::facts::WindowsFacts) -> bool {
        let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        f.tasks.iter().any(|t| {
            is(&t.name, BOOT_TASK)
                && t.description == self.description()
                && !is(&t.state, "disabled")
                && t.at_startup
        })
    }

    /// The task's description (the probe reads it back).
    pub fn description(&self) -> String {
        format!(
            "kwinctl: the pods' network, gateway and forwarding, then kubelet and kube-proxy [kwinctl {}]",
            self.fingerprint
        )
    }
}

/// A boot task's profile, with that profile's own part.
///
/// Its JSON is what the two optional fields it replaced wrote, so that no
/// node's fingerprint moves: nothing for the transparent profile (its
/// fingerprints predate the l2bridge profile), and `"profile": "l2bridge",
/// "l2bridge": {...}` for that one (`boot_fingerprints_keep_todays_json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootProfile {
    Transparent,
    L2Bridge(Box<L2Boot>),
}

impl BootProfile {
    /// The l2bridge profile's own part, on that profile.
    pub fn l2(&self) -> Option<&L2Boot> {
        match self {
            BootProfile::L2Bridge(l2) => Some(l2),
            BootProfile::Transparent => None,
        }
    }
}

impl Serialize for BootProfile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            BootProfile::Transparent => s.serialize_map(Some(0))?.end(),
            BootProfile::L2Bridge(l2) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("profile", "l2bridge")?;
                m.serialize_entry("l2bridge", l2)?;
                m.end()
            }
        }
    }
}

/// A route the boot task puts back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootRoute {
    pub dst: Ipv4Net,
    pub via: Ipv4Addr,
}

/// What the boot task re-ensures on an l2bridge node (endpoints do not
/// survive a reboot, docs/research/kubernetes.md#g1; a re-created vSwitch takes routes with it, docs/research/flannel.md#f1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2Boot {
    pub network: super::hns::HnsNet,
    pub endpoint: super::hns::HostEp,
    /// Forwarding on the interfaces holding these (the vSwitch's host vNIC
    /// and the host endpoint).
    pub forwarding: Vec<Ipv4Addr>,
    pub routes: Vec<BootRoute>,
}

/// A boot task's spec as kwinctl builds one (for the action examples).
#[doc(hidden)]
pub fn example() -> BootSpec {
    BootSpec::new(
        "kwinctl",
        "192.168.1.0/24".parse().unwrap(),
        "192.168.1.1".parse().unwrap(),
        "Ethernet 2",
        "vEthernet (HNSTransparent)",
        "10.0.0.11".parse().unwrap(),
        None,
        vec!["kubelet".into(), "kube-proxy".into()],
        vec![],
    )
}

/// An l2bridge boot task's spec (for the grammar tests).
#[doc(hidden)]
pub fn example_l2bridge() -> BootSpec {
    use super::hns::{HnsNet, HostEp};
    let node = super::example_node();
    let ep = HostEp::of(&node, "cbr0");
    BootSpec::l2bridge(
        L2Boot {
            network: HnsNet::of(&node, "cbr0", "Ethernet"),
            forwarding: vec![node.address, ep.ip],
            endpoint: ep,
            routes: vec![BootRoute {
                dst: "192.168.0.0/24".parse().unwrap(),
                via: "10.0.0.10".parse().unwrap(),
            }],
        },
        node.address,
        vec!["kubelet".into(), "kube-proxy".into()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A boot task's fingerprint is a digest of its spec's JSON: a change
    /// to that JSON (a renamed field, a reordered optional one) reinstalls
    /// the task on every node of the profile at the next `up`. These are
    /// today's digests of the two examples; the transparent one is also in
    /// tests/fixtures/windows/transparent-converged.json.
    #[test]
    fn boot_fingerprints_keep_todays_json() {
        assert_eq!(example().fingerprint, "7c2833319f67f983");
        assert_eq!(example_l2bridge().fingerprint, "ceff78030c2e37de");
    }
}
