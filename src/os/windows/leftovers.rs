//! What kwinctl's own machinery leaves on a Windows host besides the
//! network it sets up: the copies a push keeps (`transfer/windows.rs`:
//! `<sha256>` and an interrupted run's `<sha256>.part`) and the detached
//! task with its scripts and results (`detach.rs`). The probe reports
//! them; `reset` removes them, whatever the profile, so that a reset node
//! keeps nothing of kwinctl's (docs/operations.md, "What `reset` removes").

use super::action::WinAction;
use super::detach::{DETACH_TASK, detach_dir};
use super::facts::WindowsFacts;
use crate::diff::Item;

/// kwinctl's own folders the probe looks for.
pub fn folders() -> Vec<String> {
    vec![
        crate::transfer::windows::DIR.to_string(),
        detach_dir(),
        // the kubelet's certificates (reset: src/os/windows/join.rs)
        crate::identity::cert::CERT_DIR.to_string(),
    ]
}

/// The reset's items: the detached task first (a task still running would
/// keep its folder's files open), then the folders present.
pub fn reset_items(f: &WindowsFacts) -> Vec<Item<WinAction>> {
    let mut items = Vec::new();
    if f.tasks
        .iter()
        .any(|t| t.name.eq_ignore_ascii_case(DETACH_TASK))
    {
        items.push(Item {
            key: format!("detached task {DETACH_TASK}"),
            action: Some(WinAction::RemoveTask {
                name: DETACH_TASK.into(),
            }),
        });
    }
    for dir in folders()
        .into_iter()
        .filter(|d| d != crate::identity::cert::CERT_DIR)
    {
        let present = f.folders.iter().any(|x| x.eq_ignore_ascii_case(&dir));
        items.push(Item {
            key: format!("folder {dir}"),
            action: present.then_some(WinAction::RemoveFolder { path: dir }),
        });
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Describe;
    use crate::os::windows::facts::TaskFact;
    use crate::os::windows::fixtures;

    #[test]
    fn reset_removes_the_detached_task_then_the_folders_present() {
        let mut f = fixtures::fresh();
        assert!(reset_items(&f).iter().all(|i| i.action.is_none()));
        f.tasks.push(TaskFact {
            name: DETACH_TASK.into(),
            state: "Ready".into(),
            description: "kwinctl: detached".into(),
            running: false,
            at_startup: false,
        });
        f.folders = vec![r"c:\programdata\kwinctl\push".into(), detach_dir()];
        let a: Vec<String> = reset_items(&f)
            .iter()
            .filter_map(|i| i.action.as_ref().map(|a| a.describe()))
            .collect();
        assert_eq!(
            a,
            [
                "stop and delete scheduled task kwinctl-detached and its start script",
                r"remove the folder C:\ProgramData\kwinctl\push and all in it",
                r"remove the folder C:\k\kwinctl\detached and all in it",
            ]
        );
    }
}
