//! HNS objects both the l2bridge profile's actions and its boot task
//! name: the node's L2Bridge network (with the placeholder network created
//! before it) and the host endpoint, and the addresses of a pod CIDR they
//! use. Shared vocabulary: no profile's code is needed to read them.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;

use crate::alloc::Node;

/// The one-time placeholder network: the first L2Bridge network creates the
/// external vSwitch (the host's address moves, the network blips, docs/research/kubernetes.md#g1/M1);
/// with this one in place `cbr0` can be re-created without another blip
/// (docs/research/kubernetes.md#g1 quoting daschott; docs/research/microsoft-sdn.md#m1 CreateExternalNetwork).
pub const PLACEHOLDER: &str = "External";
pub const PLACEHOLDER_SUBNET: &str = "192.168.255.0/30";
pub const PLACEHOLDER_GATEWAY: &str = "192.168.255.1";
/// Addresses of a node's pod CIDR: P+1 is the HNS network's reserved
/// gateway (docs/research/flannel.md#f1 `subnet.IP + 1`), P+2 the host endpoint and the pods'
/// gateway (docs/research/flannel.md#f1, docs/research/cni-plugins.md#c1 "needs to be x.2"), pods from P+3 (docs/research/cni-plugins.md#c4, k8s #74766).
pub fn nth(net: Ipv4Net, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()) + n)
}

/// The host endpoint's name for `network` (flannel's `cbr0_ep`, docs/research/flannel.md#f1).
pub fn endpoint_name(network: &str) -> String {
    format!("{network}_ep")
}

/// The node's HNS L2Bridge network, and the placeholder network created
/// before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HnsNet {
    pub name: String,
    pub subnet: Ipv4Net,
    /// P+1, reserved (docs/research/flannel.md#f1).
    pub gateway: Ipv4Addr,
    /// The network card the vSwitch takes.
    pub adapter: String,
    pub placeholder: String,
    pub placeholder_subnet: String,
    pub placeholder_gateway: String,
}

/// The host endpoint: P+2 in the host compartment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostEp {
    pub network: String,
    pub name: String,
    pub ip: Ipv4Addr,
    pub prefix: u8,
}

impl HnsNet {
    pub fn of(node: &Node, network: &str, adapter: &str) -> HnsNet {
        HnsNet {
            name: network.into(),
            subnet: node.pod_cidr,
            gateway: nth(node.pod_cidr, 1),
            adapter: adapter.into(),
            placeholder: PLACEHOLDER.into(),
            placeholder_subnet: PLACEHOLDER_SUBNET.into(),
            placeholder_gateway: PLACEHOLDER_GATEWAY.into(),
        }
    }
}

impl HostEp {
    pub fn of(node: &Node, network: &str) -> HostEp {
        HostEp {
            network: network.into(),
            name: endpoint_name(network),
            ip: nth(node.pod_cidr, 2),
            prefix: node.pod_cidr.prefix_len(),
        }
    }
}
