//! Actions that cut the host's network while they run: the first HNS
//! network on a card creates the external vSwitch and moves the node's
//! address onto it, and the host's connections drop for seconds
//! (docs/research/vswitch-blip.md#vb1). Such an action runs in a scheduled
//! task of its own, detached from kwinctl's connection, and records its
//! result in a file on the host; kwinctl reconnects and reads it
//! (`run/detach.rs`; docs/windows.md, "The vSwitch blip").

use minijinja::context;

use super::action::WinAction;
use super::script::{ScriptHost, action, prelude};
use super::{KWINCTL_DIR, TASK_PATH};
use crate::diff::Describe;
use crate::os::Detached;
use crate::render::Renderer;
use crate::wire::sim_header;

/// The scheduled task a detached action runs in (one at a time).
pub const DETACH_TASK: &str = "kwinctl-detached";

/// Where the task's script and its result are kept.
pub fn detach_dir() -> String {
    format!(r"{KWINCTL_DIR}\detached")
}

/// The script the task runs: the prelude, the action (its id 0), and its
/// lines written to `<token>.result` (with `KWD end`).
pub fn task_script(r: &Renderer, h: &ScriptHost, a: &WinAction, token: &str) -> String {
    r.render(
        "windows/detach_task.ps1",
        context! {
            prelude => prelude(r, h),
            id => 0,
            body => action(r, a).trim_end(),
            result => format!(r"{}\{token}.result", detach_dir()),
        },
    )
}

/// Whether the action may cut the host's connections: creating an HNS
/// L2Bridge network (the first one creates the external vSwitch; kwinctl's
/// action creates the placeholder first, so that is this action).
pub fn cuts_connection(a: &WinAction) -> bool {
    matches!(a, WinAction::EnsureHnsNetwork { .. })
}

/// The scripts of a detached action: the one that starts its task (the
/// action's id in its result is 0) and the one that reads its result.
/// `token` names the result file (letters, digits and `-`).
pub fn scripts(r: &Renderer, h: &ScriptHost, a: &WinAction, token: &str) -> Detached {
    let dir = detach_dir();
    let task_script = task_script(r, h, a, token);
    let mut v = serde_json::to_value(a).expect("action JSON");
    v["id"] = 0.into();
    let header = serde_json::json!({"kind": "detach_start", "token": token, "action": v});
    let start = sim_header(
        &serde_json::json!({"kind": "prelude", "address": h.address.to_string(), "adapter": h.adapter}),
    ) + &sim_header(&header)
        + &r.render(
            "windows/detach_start.ps1",
            context! {
                token, dir, task_script, id => 0, task => DETACH_TASK,
                description => format!("kwinctl: {} (detached from kwinctl's connection)", a.describe()),
            },
        );
    let result = sim_header(&serde_json::json!({"kind": "detach_result", "token": token}))
        + &r.render(
            "windows/detach_result.ps1",
            context! { token, dir, task => DETACH_TASK },
        );
    let check = format!(
        r"the scheduled task {TASK_PATH}{DETACH_TASK}, its result {dir}\{token}.result, and that the node answers at {}",
        h.address
    );
    Detached {
        start,
        result,
        check,
    }
}
