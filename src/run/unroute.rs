//! `reset` of a host removed from the inventory, on every other node: the
//! routes to its block go in the same run (and, on Linux, boot.sh is
//! written again without them), so no node keeps a route to a block nobody
//! holds any more. `plan --reset` lists them.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::mode::Mode;
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;

/// `None`: nothing to remove on this host.
pub(super) async fn unroute<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    work: Result<Diff<O::Action>, Conflict>,
    refused: Option<HostError>,
    mut r: HostReport,
) -> Option<HostReport> {
    let d = work.ok()?;
    if d.changes() == 0 {
        return None;
    }
    r.notes = vec!["outside --limit: its routes to the removed hosts being reset".into()];
    if ctx.mode == Mode::PlanReset {
        r.actions = step::reports_of(&d, ActionStatus::Planned);
        r.status = HostStatus::Pending;
        return Some(r);
    }
    if ctx.interrupt.is_set() {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return Some(r.interrupted(true));
    }
    if let Some(e) = refused {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return Some(r.failed(e));
    }
    if let Some((failed, max)) = ctx.max_fail_reached() {
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return Some(r.not_started(failed, max));
    }
    if let Err(e) = step::apply(ctx, s, node, ops, &d, &[], &mut r).await {
        return Some(r.failed(e));
    }
    r.status = HostStatus::Changed;
    Some(r)
}
