//! `reset`: undo what `up` created, re-probe in the same call and confirm
//! it is gone.

use std::ops::ControlFlow;

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
    let mut r = match super::converge::held_back(ctx, &d, refused, r) {
        ControlFlow::Continue(r) => r,
        ControlFlow::Break(done) => return done,
    };
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
