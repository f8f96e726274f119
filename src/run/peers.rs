//! A host outside `--limit`, in `up` and `plan`: the run computes the whole
//! cluster, so it knows when the hosts it changes leave another without a
//! route it needs (a new node, a moved one). `up` says so and fails that
//! host — never a silent success — unless `--with-peer-routes` asked it to
//! make just those route changes; `plan` lists them.
//!
//! In `reset` of hosts removed from the inventory, every other node drops
//! its routes to their blocks in the same run (`crate::removal`): `reset`
//! makes those changes, `plan --reset` lists them.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Describe, Diff};
use crate::mode::Mode;
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;

/// `None`: nothing to say about this host.
pub(super) async fn peers<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    work: Result<Diff<O::Action>, Conflict>,
    refused: Option<HostError>,
    mut r: HostReport,
) -> Option<HostReport> {
    // A conflict on a host outside the limit is its own business: it shows
    // when it is run.
    let d = work.ok()?;
    if d.changes() == 0 {
        return None;
    }
    r.notes = vec![match ctx.mode {
        Mode::Reset | Mode::PlanReset => {
            "outside --limit: its routes to the removed hosts being reset".into()
        }
        _ => "outside --limit".into(),
    }];
    if matches!(ctx.mode, Mode::Plan | Mode::PlanReset) {
        r.actions = step::reports_of(&d, ActionStatus::Planned);
        r.status = HostStatus::Pending;
        return Some(r);
    }
    if ctx.mode == Mode::Up && !ctx.opts.with_peer_routes {
        let missing = d.actions().map(|a| a.describe()).collect();
        r.actions = step::reports_of(&d, ActionStatus::Skipped);
        return Some(r.failed(HostError::PeerRoutes(missing)));
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
