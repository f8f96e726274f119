//! What real Windows Server does that kwinctl's scripts must allow for,
//! on the simulated Windows host (winsim/README.md names the source of
//! each behaviour): the service manager's own copy of a service's
//! configuration, dependents stopped with the service they depend on, a
//! service without an environment, recovery settings on a host in another
//! language.

use crate::common;

use common::lab::{Lab, require_root};
use common::{actions, host, kwinctl, summary, text, write};

fn set_win_state(lab: &Lab, name: &str, key: &str, value: serde_json::Value) {
    let mut ws = lab.win_state_json(name);
    ws[key] = value;
    write(&lab.win_state(name), &ws.to_string());
}

fn up(lab: &Lab) -> serde_json::Value {
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    summary(&o)
}

/// A kubelet service someone created before (`sc create`, nssm: other
/// dependencies, no Environment value) on a host whose language is not
/// English: kwinctl reconfigures it through the service manager, a second
/// `up` has nothing to do, and changing kubelet's command line restarts
/// kube-proxy too, which Stop-Service -Force stopped with it.
#[test]
fn services_are_changed_through_the_service_manager_and_dependents_restarted() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    set_win_state(&lab, "win1", "locale", "de-DE".into());
    set_win_state(
        &lab,
        "win1",
        "services",
        serde_json::json!({"kubelet": {
            "status": "Stopped", "start": "Automatic", "display": "kubelet",
            "binpath": "C:\\k\\kubelet.exe --foreign-flag", "depends": ["RpcSs"], "restart": false,
        }}),
    );
    let s = up(&lab);
    let listed = host(&s, "win1")["actions"].to_string();
    assert!(
        listed.contains("reconfigure and restart service kubelet"),
        "{listed}"
    );
    let ws = lab.win_state_json("win1");
    let kubelet = &ws["services"]["kubelet"];
    // the service manager's copy (what it starts, what the probe reads)
    assert!(
        kubelet["binpath"]
            .as_str()
            .unwrap()
            .contains("--windows-service"),
        "{kubelet}"
    );
    assert_eq!(kubelet["depends"], serde_json::json!(["docker"]));
    assert_eq!(kubelet.get("registry"), None, "{kubelet}");
    // nothing left to do: the probe reads the new configuration, recovery
    // from the registry value (the German `sc qfailure` text has no RESTART)
    let s = up(&lab);
    assert_eq!(s["changed"], 0, "{s}");

    // another pause image changes kubelet's command line only
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(
        lab.inventory(),
        &inv.replacen(
            "  kubeconfig: ",
            "  pause_image: lab.invalid/pause:v2\n  kubeconfig: ",
            1,
        ),
    );
    let s = up(&lab);
    let changed: Vec<String> = actions(host(&s, "win1"), "changed");
    assert_eq!(
        changed,
        [
            "pull image lab.invalid/pause:v2",
            "reconfigure and restart service kubelet"
        ],
        "{s}"
    );
    let ws = lab.win_state_json("win1");
    for b in ["kubelet", "kube-proxy"] {
        assert_eq!(ws["services"][b]["status"], "Running", "{b}: {ws}");
    }
    let o = kwinctl(&["verify", "-i", &lab.inv(), "--reach", "none"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The lines `##### <call>` of every run record of win1, in order.
fn recorded_calls(lab: &Lab) -> Vec<String> {
    let runs = lab.dir().join("inventory.kwinctl-runs");
    let mut dirs: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        if let Ok(log) = std::fs::read_to_string(d.join("win1.log")) {
            out.extend(
                log.lines()
                    .filter_map(|l| l.strip_prefix("##### "))
                    .map(str::to_string),
            );
        }
    }
    out
}

/// A role install, an image pull and a download take longer than one
/// remote call usually does: each runs in a call of its own with its own
/// budget (a 3 s `--timeout` covers the rest), the run record names the
/// action of each call, and the download offers TLS 1.2 (winsim's server,
/// like dl.k8s.io, takes nothing older; Windows Server 2016's .NET offers
/// SSL 3 and TLS 1.0 unless told).
#[test]
fn long_actions_run_with_their_own_budget() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    set_win_state(
        &lab,
        "win1",
        "durations",
        serde_json::json!({"enable_routing": 3.5, "pull_image": 3.5}),
    );
    let start = std::time::Instant::now();
    let o = kwinctl(&["up", "-i", &lab.inv(), "--timeout", "3", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(start.elapsed().as_secs() >= 7, "{:?}", start.elapsed());
    let calls = recorded_calls(&lab);
    for want in [
        ": enable routing (Routing role",
        ": pull image apprenda/pause",
        r": download C:\k\kubelet.exe from https://",
        r": download C:\k\kube-proxy.exe from https://",
    ] {
        assert!(
            calls
                .iter()
                .any(|c| c.starts_with("apply ") && c.contains(want)),
            "{want}: {calls:?}"
        );
    }
    // the small kubeconfig upload goes with the short actions
    assert!(
        calls.iter().all(|c| !c.contains(r"C:\k\config")),
        "{calls:?}"
    );
}

/// New-VMSwitch needs the Hyper-V role, not only its PowerShell module: a
/// host without it is refused before anything changes. A Routing role
/// whose install waits for a restart is reported ("reboot required"), not
/// installed again on every run.
#[test]
fn roles_missing_or_waiting_for_a_restart() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    set_win_state(&lab, "win1", "hyperv_role", "Available".into());
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = host(&summary(&o), "win1")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        e.contains("the Hyper-V role is Available, not installed")
            && e.contains("nothing was changed"),
        "{e}"
    );
    assert_eq!(
        lab.win_state_json("win1")["switches"],
        serde_json::json!([])
    );

    set_win_state(&lab, "win1", "hyperv_role", "Installed".into());
    set_win_state(&lab, "win1", "routing_needs_restart", true.into());
    up(&lab);
    assert_eq!(
        lab.win_state_json("win1")["routing_state"],
        "InstallPending"
    );
    let s = up(&lab);
    assert_eq!(s["changed"], 0, "{s}");
    let notes = host(&s, "win1")["notes"].to_string();
    assert!(
        notes.contains("reboot required: the Routing role"),
        "{notes}"
    );
    // after the restart: installed, nothing said
    lab.reboot_windows("win1", false);
    let s = up(&lab);
    assert_eq!(s["changed"], 0, "{s}");
    assert!(
        !host(&s, "win1")["notes"]
            .to_string()
            .contains("reboot required"),
        "{s}"
    );
}

/// A boot task whose startup trigger was removed (in the Task Scheduler
/// console, by a policy) is still registered and Ready, but would not run
/// at the next boot (docs/research/windows-tasks.md#bt-trigger): `verify`
/// says so, `up` installs it again and nothing else, and the host then
/// comes back from a reboot with its network.
#[test]
fn a_boot_task_that_lost_its_startup_trigger_is_found_and_installed_again() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    up(&lab);
    let mut ws = lab.win_state_json("win1");
    assert_eq!(ws["tasks"]["kwinctl-boot"]["startup"], true, "{ws}");
    ws["tasks"]["kwinctl-boot"]["startup"] = false.into();
    write(&lab.win_state("win1"), &ws.to_string());

    let o = kwinctl(&["verify", "-i", &lab.inv()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("kwinctl-boot"), "{}", text(&o));

    let s = up(&lab);
    let changed: Vec<String> = actions(host(&s, "win1"), "changed");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(
        changed[0].contains("startup task kwinctl-boot"),
        "{changed:?}"
    );
    assert_eq!(
        lab.win_state_json("win1")["tasks"]["kwinctl-boot"]["startup"],
        true
    );
    // what the task is for: after a reboot that drops the pods' network,
    // it is back and nothing is left to do
    lab.reboot_windows("win1", true);
    let o = kwinctl(&["verify", "-i", &lab.inv()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
