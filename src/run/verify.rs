//! `verify`: a host passes when the diff finds nothing to do, every
//! checked peer answered its ping (both from the one probe), and the whole
//! mesh, as the nodes record it, has its routes ([`mesh`]). Changes
//! nothing.

use std::collections::BTreeMap;

use super::{Ctx, step};
use crate::alloc::{Allocation, Node, NodeRecord};
use crate::diff::{Conflict, Diff};
use crate::mode::Mode;
use crate::os::NodeOps;
use crate::outcome::{HostReport, HostStatus};
use crate::verify::{Check, Pinged};

#[allow(clippy::too_many_arguments)]
pub(super) fn verify<O: NodeOps>(
    ops: &O,
    node: &Node,
    facts: &O::Facts,
    work: Result<Diff<O::Action>, Conflict>,
    probed: &[Pinged],
    mesh: &[Check],
    ca: Option<&crate::identity::issuer::Anchor>,
    mut r: HostReport,
) -> HostReport {
    if let Ok(d) = &work {
        r.notes = d.notes.clone();
    }
    let mut failed = step::check(ops, node, &work, facts, probed, &mut r, false, ca);
    // the mesh's findings: one the host's own checks already fail takes
    // the mesh's words (they name the node whose block it is)
    for c in mesh {
        match r.checks.iter_mut().find(|o| o.name == c.name && !o.pass) {
            Some(o) => o.detail = c.detail.clone(),
            None => {
                r.checks.push(c.clone());
                failed = true;
            }
        }
    }
    if failed {
        r.status = HostStatus::Failed;
    }
    r
}

/// `verify`: the mesh's failed checks from what the nodes that answered
/// record (see [`crate::mesh`]), by lower-case host name; nothing for the
/// other commands.
pub(super) fn mesh(
    ctx: &Ctx,
    records: &BTreeMap<String, NodeRecord>,
    a: &Allocation,
) -> BTreeMap<String, Vec<Check>> {
    if ctx.mode != Mode::Verify {
        return BTreeMap::new();
    }
    let inv = &ctx.cluster.inventory;
    let members: Vec<crate::mesh::Member> = inv
        .hosts
        .iter()
        .filter_map(|h| {
            Some(crate::mesh::Member {
                name: &h.name,
                address: h.address,
                record: records.get(&h.name.to_ascii_lowercase())?,
            })
        })
        .collect();
    // blocks of hosts this run did not ask: the registry's others, the
    // removed hosts
    let held: Vec<ipnet::Ipv4Net> = a
        .registry
        .iter()
        .filter(|e| !records.contains_key(&e.host))
        .map(|e| e.pod_cidr)
        .chain(a.state.removed.values().map(|r| r.pod_cidr))
        .collect();
    let id = a.state.cluster_id.clone().unwrap_or_default();
    crate::mesh::failures(&members, (&inv.cluster.name, &id), &held)
}
