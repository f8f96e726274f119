//! The l2bridge facts fixture against what a real `up` leaves: a simulated
//! Windows Server 2019 brought up over WinRM until `up` has nothing to do;
//! winsim's facts of it then (its `facts()` in the host's namespace, on
//! its state) must have the keys of
//! tests/fixtures/windows/l2bridge-converged.json and its values where
//! they do not depend on the inventory. The root-free counterpart, on
//! recorded states, is winsim/tests/test_facts_fixtures.py.

use std::collections::BTreeSet;

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, summary, text};
use serde_json::Value;

const FIXTURE: &str = include_str!("../fixtures/windows/l2bridge-converged.json");

/// Prints winsim's `facts()` of a state (argv: the repository, the state
/// file, the fixture whose files, services, … the probe asks for).
const FACTS_PY: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from winsim import facts
from winsim.state import State
want = json.load(open(sys.argv[3]))
probe = {"files": [x["path"] for x in want["files"]], "services": [x["name"] for x in want["services"]],
         "tasks": [x["name"] for x in want["tasks"]], "binaries": [x["path"] for x in want["versions"]],
         "images": [x["image"] for x in want["image_os"]], "health": [x["port"] for x in want["health"]],
         "reach": [], "_block": open(sys.argv[1] + "/src/os/windows/templates/probe.ps1.j2").read()}
with State(sys.argv[2]) as d:
    print(json.dumps(facts.facts(d, probe)))
"#;

/// Every key path (`adapters[].name`) in `v`.
fn paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                paths(x, &p, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| paths(x, &format!("{at}[]"), out)),
        _ => {}
    }
}

/// The pairs of fields of each entry of a list, sorted.
fn pick(v: &Value, list: &str, fields: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = v[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let vals: Vec<String> = fields.iter().map(|f| e[f].to_string()).collect();
            vals.join(" ")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_facts_after_a_real_up_are_the_l2bridge_fixtures() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2019"], None, "1.30.4", "1.7.20", None);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    lab.reboot_windows("win1", false);
    for changes in [false, true] {
        let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(summary(&o)["changed"] == 0, changes, "{}", text(&o));
    }
    // winsim's facts of win1 now, in its namespace, for a probe asking
    // what the fixture's probe asked
    let repo = env!("CARGO_MANIFEST_DIR");
    let script = lab.dir().join("facts.py");
    std::fs::write(&script, FACTS_PY).unwrap();
    let o = lab.exec(
        "win1",
        &format!(
            "{repo}/winsim/.venv/bin/python {} {repo} {} {repo}/tests/fixtures/windows/l2bridge-converged.json",
            script.display(),
            lab.win_state("win1").display()
        ),
    );
    assert!(o.status.success(), "{}", text(&o));
    let got: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want: Value = serde_json::from_str(FIXTURE).unwrap();

    let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
    paths(&want, "", &mut a);
    paths(&got, "", &mut b);
    // winsim prints a service's `restart` beside `failure_actions`
    b.remove(".services[].restart");
    // the fixture's node holds a client certificate of its own (the fields
    // of `kubelet_client`); this lab's node runs on the shared kubeconfig,
    // so winsim reports none, as the probe would: null
    assert!(got["kubelet_client"].is_null(), "{got}");
    a.retain(|p| !p.starts_with(".kubelet_client."));
    assert_eq!(a, b, "key paths of the fixture and of winsim's facts");

    // the same where the inventory does not decide (addresses, indexes,
    // digests, fingerprints, command lines, names of the cluster differ)
    for key in [
        "tcp_dynamic_ports",
        "containers_feature",
        "containerd_pipe",
        "cni_conf_files",
        "sandbox_images",
        "health",
        "routing_state",
        "hyperv_role",
    ] {
        assert_eq!(got[key], want[key], "{key}");
    }
    for (list, fields) in [
        ("adapters", &["name", "physical"][..]),
        ("services", &["name", "status", "start"]),
        ("tasks", &["name", "state", "running"]),
        ("firewall", &["name", "enabled"]),
        ("hns_networks", &["name", "type"]),
        ("hns_endpoints", &["name", "attached"]),
    ] {
        assert_eq!(
            pick(&got, list, fields),
            pick(&want, list, fields),
            "{list}"
        );
    }
}
