//! The cluster step's decision: the pod CIDR allocation from what the nodes
//! record (`plan` counting hosts not asked yet as new nodes), its notes,
//! `verify`'s whole-mesh check, and `up`'s ledger entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Ctx;
use crate::alloc::{self, Allocation, Node, NodeRecord};

/// The allocation every host continues with.
pub(super) struct Decision {
    pub allocation: Result<Arc<Allocation>, String>,
    /// Lower-case host name → its node.
    pub nodes: BTreeMap<String, Node>,
    /// `verify`: the whole mesh's failed checks, by lower-case host name.
    pub mesh: BTreeMap<String, Vec<crate::verify::Check>>,
}

/// The allocation from what the nodes record, its notes said, and (`up`)
/// recorded in the ledger before any host changes. Also: why kwinctl could
/// not record it. `plan` plans the `unverified` hosts as new nodes.
pub(super) fn decide(
    ctx: &Ctx,
    mut records: BTreeMap<String, NodeRecord>,
    unverified: &[String],
) -> (Decision, Option<String>) {
    let cl = &ctx.cluster;
    if ctx.mode == crate::mode::Mode::Plan {
        for n in super::plan::as_new_nodes(&mut records, unverified) {
            ctx.reporter.say(&format!("note: {n}"));
        }
    }
    let observed = Some(records);
    match alloc::allocate(&cl.inventory, &cl.state, &observed) {
        Ok(a) => {
            let mesh = super::verify::mesh(ctx, observed.as_ref().expect("records"), &a);
            for n in &a.notes {
                ctx.reporter.say(&format!("note: {n}"));
            }
            let internal = super::ledger::record(ctx.mode, &cl.state, &cl.state_path, &a).err();
            let nodes = alloc::nodes(&cl.inventory, &a)
                .into_iter()
                .map(|n| (n.name.to_ascii_lowercase(), n))
                .collect();
            let d = Decision {
                allocation: Ok(Arc::new(a)),
                nodes,
                mesh,
            };
            (d, internal)
        }
        Err(e) => {
            let d = Decision {
                allocation: Err(e.0),
                nodes: BTreeMap::new(),
                mesh: BTreeMap::new(),
            };
            (d, None)
        }
    }
}
