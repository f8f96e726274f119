//! `plan`: probe, diff, and report what `up` would do. Changes nothing.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;

pub(super) async fn plan<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    mut r: HostReport,
) -> HostReport {
    let facts = match step::probe(ctx, s, node, ops, &[]).await {
        Ok(f) => f,
        Err(e) => return r.failed(e),
    };
    match ops.diff(&facts) {
        Err(c) => r.failed(HostError::Conflict(c)),
        Ok(d) => {
            r.notes = d.notes.clone();
            r.actions = step::reports_of(&d, ActionStatus::Planned);
            r.status = if d.changes() > 0 {
                HostStatus::Pending
            } else {
                HostStatus::Ok
            };
            r
        }
    }
}
