//! The transparent profile's part of a node's desired state: the card its
//! Docker network takes, and Docker as the runtime kubelet waits for.

use serde::Serialize;

use crate::inventory::Host;
use crate::os::windows::DEFAULT_NETWORK;
use crate::os::windows::desired::Shape;

/// The profile's own desired state.
#[derive(Debug, Clone, Serialize)]
pub struct TransparentDesired {
    /// The card the transparent network takes, when the inventory names it
    /// (`windows.transparent_adapter`); otherwise preflight picks the only
    /// fit one.
    pub transparent_adapter: Option<String>,
}

/// The network's default name, and Docker (not kwinctl's to install) as
/// the runtime kubelet waits for.
pub fn shape() -> Shape {
    Shape {
        network: DEFAULT_NETWORK,
        runtime: "docker",
        runtime_services: vec![],
    }
}

pub fn of(host: &Host) -> TransparentDesired {
    TransparentDesired {
        transparent_adapter: host.windows.transparent_adapter.clone(),
    }
}
