//! The vSwitch blip (issue 41, item 1): creating a Windows node's first HNS
//! network moves its address onto the new external vSwitch, and the host's
//! connections drop for seconds. winsim models it with the knob
//! `vswitch_blackout` (winsim/blip.py); kwinctl runs that step detached from
//! its connection (a scheduled task that records its result on the host),
//! reconnects, reads the result and goes on: one `up` converges a fresh
//! node, over WinRM and over SSH. See docs/windows.md, "The vSwitch blip".

use crate::common;
use crate::lab_mesh::windows_leftovers;
use crate::lab_windows::set_win_state;

use common::lab::{Lab, require_root};
use common::{count, host, kwinctl, summary, text, write};

/// How long the simulated host's connections stay cut, in seconds: longer
/// than kwinctl's look at the result (every 2 s), so that it meets the cut.
const BLACKOUT: f64 = 6.0;

/// A fresh l2bridge node (the Containers feature in place) whose first
/// vSwitch cuts its connections for [`BLACKOUT`] seconds.
fn fresh_node_that_blips() -> Lab {
    let lab = Lab::up_l2bridge(1, &["2022"], Some("Installed"), "1.30.4", "1.7.20", None);
    set_win_state(
        &lab,
        "win1",
        "vswitch_blackout",
        serde_json::json!(BLACKOUT),
    );
    lab
}

/// One `up` converges the node, the step that made the vSwitch ran
/// detached, the host did cut connections (`cut`: a log line that says
/// so), a second `up` changes nothing and `verify` passes.
fn converges_in_one_up(lab: &Lab, cut: impl Fn(&Lab) -> bool) {
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let r = host(&s, "win1");
    assert_eq!(r["status"], "changed", "{s}");
    assert_eq!(count(r, "failed"), 0, "{s}");
    let st = lab.win_state_json("win1");
    assert!(st["vswitch"].is_object(), "{st}");
    // the network was made by the detached task, whose result was read
    let runs = st["detached"].as_object().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "{st}");
    let run = runs.values().next().unwrap();
    assert_eq!(run["state"], "done", "{st}");
    assert!(run["action"]["kind"] == "ensure_hns_network", "{st}");
    assert!(st["blackout_from"].as_f64().is_some(), "{st}");
    assert!(
        cut(lab),
        "the host never cut a connection: the test did not test the blip"
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

fn winsim_log(lab: &Lab) -> String {
    std::fs::read_to_string(lab.dir().join("hosts").join("win1").join("winsim.log"))
        .unwrap_or_default()
}

#[test]
fn one_up_converges_a_fresh_node_while_the_vswitch_cuts_winrm() {
    if !require_root() {
        return;
    }
    let lab = fresh_node_that_blips();
    converges_in_one_up(&lab, |lab| {
        winsim_log(lab).contains("vSwitch blip: resetting")
    });
}

#[test]
fn one_up_converges_a_fresh_node_while_the_vswitch_cuts_ssh() {
    if !require_root() {
        return;
    }
    let lab = fresh_node_that_blips();
    lab.win_ssh("win1", "cmd");
    converges_in_one_up(&lab, |lab| {
        lab.win_ssh_sessions("win1")
            .iter()
            .any(|e| e["outcome"] == "connection dropped (vSwitch blip)")
    });
}

/// The detached step's result never comes (winsim's knob
/// `detach_loses_result`: the task hangs): after `--detach-wait` the host
/// fails with what to check and that a rerun resumes, exit 1; the rerun
/// converges.
#[test]
fn a_detached_step_without_a_result_fails_the_host_and_a_rerun_converges() {
    if !require_root() {
        return;
    }
    let lab = fresh_node_that_blips();
    set_win_state(&lab, "win1", "detach_loses_result", serde_json::json!(true));
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json", "--detach-wait", "15"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["win1"]), "{s}");
    let e = host(&s, "win1")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for part in [
        "no result from win1 within --detach-wait 15s",
        r"\kwinctl\kwinctl-detached",
        ".result",
        "run `kwinctl up` again: it resumes",
    ] {
        assert!(e.contains(part), "no {part:?} in: {e}");
    }
    // the actions after it were not run, and say so
    assert!(count(host(&s, "win1"), "skipped") > 0, "{s}");
    // the task did its work (only its result is missing): the rerun finds
    // the network there and goes on from it
    set_win_state(
        &lab,
        "win1",
        "detach_loses_result",
        serde_json::json!(false),
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `reset` leaves nothing of kwinctl's machinery (issue 39, item 2): the
/// detached task that made the vSwitch, its script and result, and the
/// pushed copy of kubelet.exe (the inventory gives a local path, so `up`
/// pushes it) are there after `up` and gone after `reset`.
#[test]
fn a_reset_removes_the_detached_task_its_results_and_the_pushed_copies() {
    if !require_root() {
        return;
    }
    let lab = fresh_node_that_blips();
    let local = lab.dir().join("dl").join("v1.30.4").join("kubelet.exe");
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let start = inv.find("        kubelet: {").unwrap();
    let end = start + inv[start..].find('\n').unwrap();
    let inv = format!(
        "{}        kubelet: {{ path: {} }}{}",
        &inv[..start],
        local.display(),
        &inv[end..]
    );
    write(lab.inventory(), &inv);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let left = windows_leftovers(&lab, "win1").join("\n");
    for part in [
        "detached task:",
        "detached results:",
        r"C:\ProgramData\kwinctl\push\",
    ] {
        assert!(left.contains(part), "no {part:?} before reset in: {left}");
    }
    let o = kwinctl(&["reset", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(windows_leftovers(&lab, "win1"), Vec::<String>::new());
    // a second reset has nothing to remove
    let o = kwinctl(&["reset", "-i", &i, "--yes", "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}
