//! `plan`: report what `up` would do. Changes nothing.

use crate::alloc::Node;
use crate::diff::{Conflict, Describe, Diff};
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};

pub(super) fn plan<A: Describe>(
    _node: &Node,
    work: Result<Diff<A>, Conflict>,
    mut r: HostReport,
) -> HostReport {
    match work {
        Err(c) => r.failed(HostError::Conflict(c)),
        Ok(d) => {
            r.notes = d.notes.clone();
            r.actions = super::step::reports_of(&d, ActionStatus::Planned);
            r.status = if d.changes() > 0 {
                HostStatus::Pending
            } else {
                HostStatus::Ok
            };
            r
        }
    }
}
