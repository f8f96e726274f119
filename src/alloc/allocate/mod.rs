//! The allocation itself, as stages over one working set ([`Work`]), in
//! order:
//! 1. `removed`: hosts removed from the inventory, remembered until `reset`
//!    reaches them;
//! 2. `claims`: each host's claim (its node's record, its pin, the state
//!    file or the registry), or a dispute;
//!    (`stale`: registry entries the nodes contradict are dropped);
//! 3. `moved`: blocks nobody may be given (removed hosts', other
//!    operators'), and hosts of this inventory at a new address;
//! 4. `collisions`: two claims on one block settled or disputed;
//! 5. `blocks`: new blocks for the hosts without one;
//! 6. `frozen`: what disputed hosts claim is frozen, and the allocation is
//!    written out.

mod blocks;
mod claims;
mod collisions;
#[cfg(test)]
pub(super) mod fixture;
mod frozen;
mod moved;
mod removed;
mod stale;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::identity::cluster_id;
use super::{AllocError, Allocation, Frozen, NodeRecord, Observed, Registered, Source};
use crate::inventory::{Host, Inventory};
use crate::state::{Removed, State};

fn key(h: &Host) -> String {
    h.name.to_ascii_lowercase()
}

/// A host's claim on a block before collisions are settled.
#[derive(Debug, Clone, Copy)]
struct Claim {
    net: Ipv4Net,
    source: Source,
}

/// What the stages share: the inputs, and what each stage found. Hosts are
/// named by their index in the inventory.
struct Work<'a> {
    inv: &'a Inventory,
    state: &'a State,
    observed: &'a Observed,
    cluster_id: String,
    /// The cluster's registry as the nodes reported it, by host.
    registry: BTreeMap<String, Registered>,
    notes: Vec<String>,
    /// Hosts removed from the inventory that `reset` has not reached.
    removed: BTreeMap<String, Removed>,
    /// Each host's claim (`None`: none yet, or given up).
    claims: Vec<Option<Claim>>,
    /// Hosts that did not answer and whose block nothing names.
    unknown: Vec<usize>,
    /// Blocks nobody may be given, with why.
    reserved: Vec<(Ipv4Net, String)>,
    /// Hosts of this inventory at a new address: their former address.
    moved: BTreeMap<usize, Ipv4Addr>,
    /// Hosts of this inventory at a new address that is not proven theirs:
    /// the address the cluster knows them at, which every other node keeps.
    refused: BTreeMap<usize, Ipv4Addr>,
    /// Hosts whose block cannot be decided, with why.
    disputes: BTreeMap<usize, String>,
    frozen: Frozen,
}

impl<'a> Work<'a> {
    fn new(
        inv: &'a Inventory,
        state: &'a State,
        observed: &'a Observed,
    ) -> Result<Work<'a>, AllocError> {
        let mut notes = Vec::new();
        let registry = super::registry::read(inv, observed);
        let cluster_id = cluster_id(inv, state, observed, &mut notes)?;
        Ok(Work {
            inv,
            state,
            observed,
            cluster_id,
            registry,
            notes,
            removed: BTreeMap::new(),
            claims: vec![None; inv.hosts.len()],
            unknown: Vec::new(),
            reserved: Vec::new(),
            moved: BTreeMap::new(),
            refused: BTreeMap::new(),
            disputes: BTreeMap::new(),
            frozen: Frozen::default(),
        })
    }

    /// What `h`'s node records (`None`: it did not answer, or nobody asked).
    fn record(&self, h: &Host) -> Option<&'a NodeRecord> {
        self.observed.as_ref().and_then(|o| o.get(&key(h)))
    }

    /// Every stage up to new blocks: what decides whether the allocation
    /// can be made at all.
    fn settle(&mut self) -> Result<(), AllocError> {
        removed::removed(self);
        claims::claims(self);
        stale::drop_contradicted(self);
        moved::reserve(self);
        collisions::settle(self);
        blocks::assign(self)
    }
}

/// Allocate every host's pod CIDR: see the module's documentation.
pub fn allocate(
    inv: &Inventory,
    state: &State,
    observed: &Observed,
) -> Result<Allocation, AllocError> {
    super::registry::same_lock_host(inv, observed).map_err(AllocError)?;
    let mut w = Work::new(inv, state, observed)?;
    w.settle()?;
    frozen::freeze(&mut w);
    Ok(frozen::allocation(w))
}

/// Whether the inventory and the state file, without asking any node, give
/// every host a block (the cluster CIDR has room): what a remote command
/// checks before it connects to anything. The allocation it runs with is
/// made later, once, from what the nodes record.
pub fn validate(inv: &Inventory, state: &State) -> Result<(), AllocError> {
    Work::new(inv, state, &None)?.settle()
}

#[cfg(test)]
mod tests {
    use super::fixture::{inv, state};
    use super::*;

    #[test]
    fn validation_refuses_what_allocation_refuses_and_nothing_else() {
        let i = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let s = state(&[("a", "198.19.1.0/24", "198.18.1.2")]);
        assert!(validate(&i, &s).is_ok());
        let mut full = i.clone();
        full.cluster.cluster_cidr = "198.19.1.0/24".parse().unwrap();
        let e = validate(&full, &s).unwrap_err();
        assert_eq!(e.0, allocate(&full, &s, &None).unwrap_err().0);
        assert!(e.0.contains("no free /24 block left for host b"), "{e}");
    }
}
