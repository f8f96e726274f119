//! The contract between an action kind and the things named after it: its
//! template (`<os>/templates/<kind>.<ext>.j2`), for Windows the simulator's
//! handler (`act_<kind>` in `winsim/winsim.py`), and an example in the
//! `examples()` that the grammar test and the snapshots render. Root-free
//! and fast: a forgotten piece fails here, naming the kind.

use std::collections::BTreeSet;

use crate::render::{kind_of, template_names};

/// Templates that are not an action's.
const NOT_ACTIONS: &[&str] = &[
    "linux/prelude.sh",
    "linux/probe.sh",
    "linux/boot.sh",
    "linux/boot.service",
    "linux/set_routes.sh",
    "linux/del_routes.sh",
    "linux/lock.sh",
    "linux/unlock.sh",
    "linux/clear_cluster.sh",
    "linux/renew.sh",
    "linux/lock_break.sh",
    "linux/lock_read.sh",
    "linux/mutex.sh",
    "linux/lock_clock.sh",
    "linux/lock_write.sh",
    "linux/registry.sh",
    "linux/read_files.sh",
    "windows/prelude.ps1",
    "windows/probe.ps1",
    "windows/start_script.ps1",
    "windows/boot_script.ps1",
    "windows/read_files.ps1",
    "windows/hns.ps1",
    "windows/restart_computer.ps1",
    "windows/detach_start.ps1",
    "windows/detach_task.ps1",
    "windows/detach_result.ps1",
];

fn kinds<A: serde::Serialize>(examples: &[A]) -> BTreeSet<String> {
    examples.iter().map(kind_of).collect()
}

fn templates_of(os: &str, ext: &str) -> BTreeSet<String> {
    template_names()
        .filter(|n| !NOT_ACTIONS.contains(n))
        .filter_map(|n| n.strip_prefix(&format!("{os}/")))
        .filter_map(|n| n.strip_suffix(&format!(".{ext}")))
        .map(str::to_string)
        .collect()
}

fn same(os: &str, kinds: BTreeSet<String>, templates: BTreeSet<String>) {
    let no_template: Vec<_> = kinds.difference(&templates).collect();
    let no_kind: Vec<_> = templates.difference(&kinds).collect();
    assert!(
        no_template.is_empty() && no_kind.is_empty(),
        "{os}: kinds without a template: {no_template:?}; templates without a kind \
         (an action, or a name in NOT_ACTIONS): {no_kind:?}"
    );
}

#[test]
fn every_action_kind_has_a_template_and_every_template_a_kind() {
    same(
        "linux",
        kinds(&super::linux::action::examples()),
        templates_of("linux", "sh"),
    );
    same(
        "windows",
        kinds(&super::windows::examples::examples()),
        templates_of("windows", "ps1"),
    );
    for n in NOT_ACTIONS {
        assert!(crate::os::renderer().has(n), "{n} is listed but missing");
    }
}

#[test]
fn every_windows_action_kind_has_a_simulator_handler() {
    let winsim = concat!(env!("CARGO_MANIFEST_DIR"), "/winsim/winsim.py");
    // `kinds` needs no third-party module: the system's python3 will do.
    let out = std::process::Command::new("python3")
        .args([winsim, "kinds"])
        .output()
        .expect("python3 runs winsim.py kinds");
    assert!(out.status.success(), "{out:?}");
    let handled: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let missing: Vec<String> = kinds(&super::windows::examples::examples())
        .difference(&handled)
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "winsim/winsim.py has no act_<kind> for {missing:?}"
    );
}
