//! `up`: the version skew policy judged before any Windows host changes
//! (the rules: `crate::upgrade::skew`).

use std::collections::BTreeSet;

use super::Ctx;
use crate::upgrade::skew::{ControlView, Judged};

/// `up`: why the Windows hosts that change may not get the declared
/// release (the version skew policy, `upgrade/skew.rs`); a policy not
/// checked is said as a note.
pub(super) fn refused(
    ctx: &Ctx,
    control: Option<&ControlView>,
    changing: &BTreeSet<String>,
) -> Option<String> {
    if ctx.mode != crate::mode::Mode::Up {
        return None;
    }
    let inv = &ctx.cluster.inventory;
    let windows: Vec<_> = inv
        .hosts
        .iter()
        .filter(|h| {
            h.os == crate::inventory::Os::Windows && changing.contains(&h.name.to_ascii_lowercase())
        })
        .map(|h| (h.name.clone(), h.address))
        .collect();
    let declared = inv.cluster.kubernetes_version;
    match crate::upgrade::skew::judge(declared, control, &windows, ctx.opts.allow_downgrade) {
        Judged::Allowed => None,
        Judged::NotChecked(note) => {
            ctx.reporter.say(&format!("note: {note}"));
            None
        }
        Judged::Refused(why) => Some(why),
    }
}
