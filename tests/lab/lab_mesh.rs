//! A whole-cluster `reset` leaves nothing of kwinctl's on any host, and
//! `verify` checks the whole mesh from the nodes' own tables: the sequence
//! of issue #39 (reset, the same machines brought up again under new names
//! as an Ansible import does, a control plane left without its routes to a
//! Windows block while an old registry entry said that block was another
//! operator's).

use crate::common;

use common::lab::{Lab, require_root};
use common::{failed_checks, host, kwinctl, summary, text};

/// What kwinctl keeps on a Linux lab host: /etc/kwinctl's files (the
/// folder itself is the lab's mount), its unit, and its routes.
fn linux_leftovers(lab: &Lab, h: &str) -> String {
    let o = lab.exec(
        h,
        "ls -A /etc/kwinctl 2>/dev/null; ls /etc/systemd/system 2>/dev/null | grep -i kwinctl; \
         ip -4 route show proto 198",
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// What kwinctl keeps on a simulated Windows host: files under
/// C:\k\kwinctl, its records, its tasks (the startup task, the detached
/// task), the detached task's scripts and results, and what a push keeps
/// in C:\ProgramData\kwinctl\push (winsim's `<state>.push/`, apart from
/// winsim's own log).
pub(crate) fn windows_leftovers(lab: &Lab, h: &str) -> Vec<String> {
    let d = lab.win_state_json(h);
    let mut left: Vec<String> = d["files"]
        .as_object()
        .map(|f| {
            f.keys()
                .filter(|p| p.to_ascii_lowercase().contains("\\kwinctl\\"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    for k in ["pod_cidr", "cluster"] {
        if !d[k].is_null() {
            left.push(format!("{k}: {}", d[k]));
        }
    }
    let tasks = serde_json::to_string(&d["tasks"]).unwrap_or_default();
    if tasks.to_ascii_lowercase().contains("kwinctl") {
        left.push(format!("tasks: {tasks}"));
    }
    if !d["detached_task"].is_null() {
        left.push(format!("detached task: {}", d["detached_task"]));
    }
    if d["detached"].as_object().is_some_and(|r| !r.is_empty()) {
        left.push(format!("detached results: {}", d["detached"]));
    }
    let push = std::path::PathBuf::from(format!("{}.push", lab.win_state(h).display()));
    for e in std::fs::read_dir(push).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "log.jsonl" {
            left.push(format!(r"C:\ProgramData\kwinctl\push\{name}"));
        }
    }
    left
}

/// The lab's inventory with every host renamed (`from` → `to`), as a new
/// file beside it (its own state file).
fn renamed(lab: &Lab, names: &[(&str, &str)]) -> String {
    let mut s = std::fs::read_to_string(lab.inventory()).unwrap();
    for (from, to) in names {
        s = s.replace(&format!("name: {from}\n"), &format!("name: {to}\n"));
    }
    let p = lab.dir().join("imported.yaml");
    std::fs::write(&p, s).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_whole_reset_leaves_nothing_and_verify_checks_the_mesh_after_a_rename() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let blocks = lab.exec("h1", "cat /etc/kwinctl/cluster.blocks");
    let blocks = String::from_utf8_lossy(&blocks.stdout).to_string();
    assert!(blocks.contains("win1 "), "{blocks}");

    // 1. the whole cluster reset: nothing of kwinctl's is left anywhere
    let o = kwinctl(&["reset", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("is a first bring-up"), "{}", text(&o));
    for h in ["h1", "h2"] {
        assert_eq!(linux_leftovers(&lab, h), "", "{h} keeps kwinctl's files");
    }
    assert_eq!(windows_leftovers(&lab, "win1"), Vec::<String>::new());
    assert!(
        !lab.dir().join("inventory.kwinctl-state.json").exists(),
        "the state file is gone"
    );
    // a second reset has nothing to remove
    let o = kwinctl(&["reset", "-i", &i, "--yes", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // 2. the same machines under new names (an Ansible import), with the
    // registry an older kwinctl's reset left on the control plane: the
    // entries of the old names are dropped, and the mesh is whole
    let names = [
        ("h1", "k8s-cp01"),
        ("h2", "lin-node01"),
        ("win1", "win-node01"),
    ];
    let j = renamed(&lab, &names);
    let plant = format!(
        "printf '%s' '{blocks}' > /etc/kwinctl/cluster.blocks && echo 7 > /etc/kwinctl/cluster.gen"
    );
    assert!(lab.exec("h1", &plant).status.success());
    let o = kwinctl(&["up", "-i", &j]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("a former name of the same machine"),
        "{}",
        text(&o)
    );
    let o = kwinctl(&["verify", "-i", &j]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 3. what the newcomer was left with: the old registry entry for the
    // Windows machine, and the control plane without its route to it
    let st: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("imported.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    let wb = st["pod_cidrs"]["win-node01"].as_str().unwrap().to_string();
    let win = lab.ip("win1");
    let old = format!("win1 {wb} {win}\n");
    let broken = format!(
        "printf '%s' '{old}' >> /etc/kwinctl/cluster.blocks && ip route del {wb} via {win}"
    );
    assert!(lab.exec("h1", &broken).status.success());
    let o = kwinctl(&["verify", "-i", &j, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let cp = host(&s, "k8s-cp01");
    let failed = failed_checks(cp);
    assert!(
        failed.iter().any(|c| c.contains(&format!(
            "k8s-cp01 has no route to win-node01's block {wb} via {win}"
        ))),
        "{failed:?}\n{}",
        text(&o)
    );
    // 4. up repairs it; verify passes, and the control plane routes the
    // Windows pods' block again (what verify --pods reaches them over)
    let o = kwinctl(&["up", "-i", &j]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &j]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        lab.routes("h1").contains(&format!("{wb} via {win}")),
        "{}",
        lab.routes("h1")
    );
}
