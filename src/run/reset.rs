//! `reset`: undo what `up` created, re-probe in the same call and confirm
//! it is gone.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;

pub(super) async fn reset<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    work: Result<Diff<O::Action>, Conflict>,
    refused: Option<HostError>,
    mut r: HostReport,
) -> HostReport {
    let d = match work {
        Ok(d) => d,
        Err(c) => return r.failed(HostError::Conflict(c)),
    };
    r.notes = d.notes.clone();
    if d.changes() == 0 {
        r.actions = step::reports_of(&d, ActionStatus::Ok);
        r.status = HostStatus::Ok;
        return r;
    }
    if ctx.interrupt.is_set() {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return r.interrupted(true);
    }
    if let Some(e) = refused {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return r.failed(e);
    }
    if let Some((failed, max)) = ctx.max_fail_reached() {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return r.not_started(failed, max);
    }
    let after = match step::apply(ctx, s, node, ops, &d, &[], &mut r).await {
        Ok(f) => f,
        Err(e) => return r.failed(e),
    };
    if ops.reset(node, &after).changes() > 0 {
        return r.failed(HostError::ResetIncomplete);
    }
    r.status = HostStatus::Changed;
    r
}
