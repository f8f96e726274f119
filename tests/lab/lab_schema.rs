//! `--output json` as a program reads it: every line of real runs on lab
//! hosts (check, plan, up with -v, verify, reset, and a command that fails
//! as a whole) validates against the published schema/events.schema.json.

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text};

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/events.schema.json");

fn validator() -> jsonschema::Validator {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(SCHEMA).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

/// Every stdout line of `args` validates; the events, in order.
fn events(v: &jsonschema::Validator, args: &[&str], code: i32) -> Vec<String> {
    let o = kwinctl(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {}", text(&o));
    let mut seen = Vec::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let e: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let errors: Vec<String> = v.iter_errors(&e).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{args:?}: {errors:?}\n{line}");
        assert_eq!(e["schema"], 1, "{line}");
        if let Some(h) = e.get("hosts") {
            assert!(h.is_array(), "`hosts` is always a list: {line}");
        }
        seen.push(e["event"].as_str().unwrap().to_string());
    }
    seen
}

#[test]
fn every_json_line_of_real_runs_matches_the_published_schema() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    let v = validator();
    let j = ["--output", "json"];
    let with = |cmd: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        a.extend(["-i".to_string(), i.clone()]);
        a.extend(j.iter().map(|s| s.to_string()));
        a
    };
    let run = |cmd: &[&str], code: i32| {
        let a = with(cmd);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        events(&v, &a, code)
    };
    assert_eq!(run(&["check"], 0), ["summary"]);
    let plan = run(&["plan"], 0);
    assert_eq!(plan.first().map(String::as_str), Some("start"));
    assert_eq!(plan.last().map(String::as_str), Some("summary"));
    let up = run(&["up", "-v"], 0);
    assert!(up.iter().any(|e| e == "phase"), "{up:?}");
    assert_eq!(up.iter().filter(|e| *e == "host").count(), 3, "{up:?}");
    run(&["verify"], 0);
    // every run's folder says who ran what, with which kwinctl, on which
    // version of the inventory
    let runs = lab.dir().join("inventory.kwinctl-runs");
    let mut dirs: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("-up-"))
        .collect();
    dirs.sort();
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dirs.last().unwrap().join("run.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["command"], "up", "{meta}");
    assert!(
        meta["kwinctl"].as_str().unwrap().contains("(git "),
        "{meta}"
    );
    assert!(
        meta["args"].as_array().unwrap().iter().any(|a| a == "-v"),
        "{meta}"
    );
    assert_eq!(
        meta["inventory_sha256"].as_str().unwrap().len(),
        64,
        "{meta}"
    );
    assert!(meta["user"].as_str().unwrap().contains('@'), "{meta}");
    // a command that fails as a whole says so in JSON too
    assert_eq!(run(&["verify", "--limit", "nosuchhost"], 2), ["error"]);
    assert_eq!(
        events(&v, &["verify", "-i", &i, "--output", "json", "--bogus"], 2),
        ["error"]
    );
    let reset = run(&["reset", "--yes", "--limit", "h2"], 0);
    assert_eq!(reset.last().map(String::as_str), Some("summary"));
}
