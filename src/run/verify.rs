//! `verify`: a host passes when the diff finds nothing to do and every
//! checked peer answered its ping (both from the one probe). Changes
//! nothing.

use super::step;
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::os::NodeOps;
use crate::outcome::{HostReport, HostStatus};
use crate::verify::Pinged;

pub(super) fn verify<O: NodeOps>(
    ops: &O,
    node: &Node,
    facts: &O::Facts,
    work: Result<Diff<O::Action>, Conflict>,
    probed: &[Pinged],
    mut r: HostReport,
) -> HostReport {
    if let Ok(d) = &work {
        r.notes = d.notes.clone();
    }
    if step::check(ops, node, &work, facts, probed, &mut r) {
        r.status = HostStatus::Failed;
    }
    r
}
