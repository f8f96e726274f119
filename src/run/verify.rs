//! `verify`: one probe with reachability; the host passes when the diff
//! finds nothing to do and every checked peer answers. Changes nothing.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::os::NodeOps;
use crate::outcome::{HostReport, HostStatus};
use crate::transport::Session;

pub(super) async fn verify<O: NodeOps>(
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
    let d = ops.diff(&facts);
    if let Ok(d) = &d {
        r.notes = d.notes.clone();
    }
    if step::check(ops, node, &d, &facts, &probed, &mut r) {
        r.status = HostStatus::Failed;
    }
    r
}
