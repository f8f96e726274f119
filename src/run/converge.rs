//! `up`: probe (with reachability), diff, apply and re-probe in one remote
//! call, check. A host that needs nothing is checked from its first probe:
//! one remote call.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;

pub(super) async fn converge<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    mut r: HostReport,
) -> HostReport {
    let (probed, facts) = match step::probe_checking(ctx, s, node, ops).await {
        Ok(p) => p,
        Err(e) => return r.failed(e),
    };
    let d = match ops.diff(&facts) {
        Ok(d) => d,
        Err(c) => return r.failed(HostError::Conflict(c)),
    };
    r.notes = d.notes.clone();
    if ctx.interrupt.is_set() {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return r.interrupted(true);
    }
    if d.changes() == 0 {
        // Converged: the first probe's facts (with reachability) are the
        // verification; no second call.
        r.actions = step::reports_of(&d, ActionStatus::Ok);
        if step::check(ops, node, &Ok(d), &facts, &probed, &mut r) {
            return r.failed(HostError::VerifyFailed { changed: false });
        }
        r.status = HostStatus::Ok;
        return r;
    }
    let reach: Vec<_> = probed.iter().map(|p| p.address).collect();
    let after = match step::apply(ctx, s, node, ops, &d, &reach, &mut r).await {
        Ok(f) => f,
        Err(e) => return r.failed(e),
    };
    if step::check(ops, node, &ops.diff(&after), &after, &probed, &mut r) {
        return r.failed(HostError::VerifyFailed { changed: true });
    }
    r.status = HostStatus::Changed;
    r
}
