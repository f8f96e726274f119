//! `up`: apply the diff and re-probe in one remote call, then check. A host
//! that needs nothing is checked from its first probe: one remote call.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;
use crate::verify::Pinged;

#[allow(clippy::too_many_arguments)]
pub(super) async fn converge<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    facts: &O::Facts,
    work: Result<Diff<O::Action>, Conflict>,
    probed: &[Pinged],
    refused: Option<HostError>,
    mut r: HostReport,
) -> HostReport {
    let d = match work {
        Ok(d) => d,
        Err(c) => return r.failed(HostError::Conflict(c)),
    };
    r.notes = d.notes.clone();
    if d.changes() == 0 {
        // Converged: the first probe's facts (with reachability) are the
        // verification; no second call.
        r.actions = step::reports_of(&d, ActionStatus::Ok);
        if step::check(ops, node, &Ok(d), facts, probed, &mut r) {
            return r.failed(HostError::VerifyFailed { changed: false });
        }
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
    let reach: Vec<_> = probed.iter().map(|p| p.address).collect();
    let after = match step::apply(ctx, s, node, ops, &d, &reach, &mut r).await {
        Ok(f) => f,
        Err(e) => return r.failed(e),
    };
    if step::check(ops, node, &ops.diff(node, &after), &after, probed, &mut r) {
        return r.failed(HostError::VerifyFailed { changed: true });
    }
    r.status = HostStatus::Changed;
    r
}
