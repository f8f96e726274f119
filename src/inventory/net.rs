//! Address arithmetic of the inventory: which addresses can be a node's,
//! overlapping networks, how many blocks fit.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::validate;

/// Whether an address can be a node's: not unspecified, broadcast,
/// multicast, loopback or link-local (none is routable between nodes).
pub fn routable_node_address(a: &Ipv4Addr) -> bool {
    !(a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_loopback()
        || a.is_link_local())
}

/// `ADDR cannot be a node address (…)`: `check`'s words, for `init` too.
pub fn not_a_node_address(a: &Ipv4Addr) -> String {
    format!("{a} {}", validate::NOT_A_NODE_ADDRESS)
}
pub fn nets_overlap(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// How many `prefix`-sized blocks fit in `net`.
pub fn block_count(net: &Ipv4Net, prefix: u8) -> u64 {
    if prefix < net.prefix_len() {
        return 0;
    }
    1u64 << (prefix - net.prefix_len())
}
