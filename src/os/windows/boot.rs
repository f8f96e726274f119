//! The Windows counterpart of Linux's `boot.sh`: a scheduled task at
//! startup (`\kwinctl\kwinctl-boot`, as SYSTEM) whose script puts the pods'
//! network back before kubelet runs, then starts kubelet and kube-proxy.
//!
//! Why: at startup Docker removes the transparent networks HNS no longer
//! has (moby `daemon_windows.go`: "Remove networks not present in HNS";
//! only non-default `nat` networks are re-created), and a re-created
//! network's adapter has neither the pods' gateway address nor forwarding
//! (research/windows-fidelity.md defect 20). kwinctl therefore registers
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
            fingerprint: String::new(),
        };
        let digest = serde_json::to_vec(&(&b, BOOT_VERSION)).expect("boot JSON");
        b.fingerprint = sha256_bytes(&digest)[..16].to_string();
        b
    }

    /// The task's description (the probe reads it back).
    pub fn description(&self) -> String {
        format!(
            "kwinctl: the pods' network, gateway and forwarding, then kubelet and kube-proxy [kwinctl {}]",
            self.fingerprint
        )
    }
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
