//! Windows facts as fixture files (`tests/fixtures/windows/*.json`), each
//! the JSON the probe (`templates/probe.ps1.j2`) prints after
//! `KWINCTL-FACTS `, read by the real parser for the unit tests:
//!
//! - `fresh.json`: a fresh Windows Server 2019 (probe with the l2bridge
//!   part): two network cards, Hyper-V, nothing of kwinctl's;
//! - `transparent-converged.json`: what `up` leaves on `win01` of the
//!   example inventory `transparent.yaml` (beside them; Kubernetes 1.10,
//!   Windows Server 2016, Docker's transparent network);
//! - `l2bridge-converged.json`: the same for `win01` of `l2bridge.yaml`
//!   (Kubernetes 1.30, containerd 1.7, Windows Server 2019), whose kubelet
//!   also holds a client certificate of its own (`kubelet_client`).
//!
//! What keeps them honest: the converged ones diff to nothing against
//! their desired state (`converged_node_has_nothing_to_do`, `…a converged
//! host has nothing to do`, and the runner's
//! `a_windows_hosts_event_agrees_with_the_summary`, where `up` against a
//! host answering with the l2bridge fixture changes nothing); the tests
//! here check their keys against the probe template and the parser;
//! `winsim/tests/test_facts_fixtures.py` (and, with root,
//! `lab_facts`) checks them against what the simulator prints. A fact
//! added to the probe, the parser or winsim but not to the fixtures fails
//! one of them.

use serde_json::Value;

use super::WindowsFacts;

pub const FRESH: &str = include_str!("../../../tests/fixtures/windows/fresh.json");
pub const TRANSPARENT_CONVERGED: &str =
    include_str!("../../../tests/fixtures/windows/transparent-converged.json");
pub const L2BRIDGE_CONVERGED: &str =
    include_str!("../../../tests/fixtures/windows/l2bridge-converged.json");

/// The example inventory `tests/fixtures/windows/<name>.yaml`
/// (`transparent`, `l2bridge`) with `extra` (lines of `cluster:`) added.
pub fn inventory(name: &str, extra: &str) -> crate::inventory::Inventory {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/windows/{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen("  kubeconfig:", &format!("{extra}  kubeconfig:"), 1);
    crate::inventory::Inventory::parse(&path, &text).unwrap()
}

/// The desired state of `host` in that inventory.
pub fn desired(name: &str, extra: &str, host: &str) -> super::WindowsDesired {
    let inv = inventory(name, extra);
    let h = inv.hosts.iter().find(|h| h.name == host).unwrap();
    super::WindowsDesired::of(&inv, h, &Default::default()).unwrap()
}

fn load(json: &str) -> WindowsFacts {
    WindowsFacts::parse(json).expect("a fixture the parser reads")
}

/// A fresh Windows Server 2019 (10.0.17763), node address 10.0.0.11.
pub fn fresh() -> WindowsFacts {
    load(FRESH)
}

/// A fresh Windows Server 2016 (10.0.14393) with Docker: the transparent
/// profile's starting point (`fresh()` with the build and Docker changed).
pub fn fresh_2016() -> WindowsFacts {
    let mut f = fresh();
    f.build = "10.0.14393".into();
    f.ubr = Some(1884);
    f.docker_version = "17.06.2-ee-16".into();
    f
}

pub fn transparent_converged() -> WindowsFacts {
    load(TRANSPARENT_CONVERGED)
}

pub fn l2bridge_converged() -> WindowsFacts {
    load(L2BRIDGE_CONVERGED)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const PROBE: &str = include_str!("templates/probe.ps1.j2");

    type Keys = BTreeSet<String>;

    fn keys(v: &Value) -> Keys {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// Every object key anywhere inside `v`.
    fn nested_keys(v: &Value, out: &mut Keys) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    out.insert(k.clone());
                    nested_keys(x, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| nested_keys(x, out)),
            _ => {}
        }
    }

    /// The keys a piece of the template gives an `[ordered]@{…}` (`key =`
    /// at a line's start or after `{` or `;`; `$variables` are not keys).
    fn template_keys(text: &str) -> Keys {
        let re = regex::Regex::new(r"(?m)(?:^|[{;])\s*([a-z][a-z0-9_]*) = ").unwrap();
        re.captures_iter(text).map(|c| c[1].to_string()).collect()
    }

    /// The probe's top-level facts outside and inside `{% if l2bridge %}`,
    /// and the text that builds each (up to the next fact).
    fn probe_facts() -> (Keys, Keys, Vec<(String, String)>) {
        let (common, l2) = PROBE.split_once("{% if l2bridge %}").unwrap();
        let re = regex::Regex::new(r"(?m)^\$facts\.([a-z0-9_]+) = ").unwrap();
        let names = |t: &str| -> Keys { re.captures_iter(t).map(|c| c[1].to_string()).collect() };
        let mut top = template_keys(PROBE.lines().find(|l| l.starts_with("$facts =")).unwrap());
        top.extend(names(common));
        let starts: Vec<(usize, String)> = re
            .captures_iter(PROBE)
            .map(|c| (c.get(0).unwrap().start(), c[1].to_string()))
            .collect();
        let blocks = starts
            .iter()
            .enumerate()
            .map(|(i, (at, name))| {
                let end = starts.get(i + 1).map_or(PROBE.len(), |n| n.0);
                (name.clone(), PROBE[*at..end].to_string())
            })
            .collect();
        (top, names(l2), blocks)
    }

    fn all() -> [(&'static str, &'static str, bool); 3] {
        [
            ("fresh", FRESH, true),
            ("transparent-converged", TRANSPARENT_CONVERGED, false),
            ("l2bridge-converged", L2BRIDGE_CONVERGED, true),
        ]
    }

    #[test]
    fn fixture_keys_are_the_probe_templates() {
        let (common, l2, blocks) = probe_facts();
        for (name, json, with_l2) in all() {
            let v: Value = serde_json::from_str(json).unwrap();
            let mut want = common.clone();
            if with_l2 {
                want.extend(l2.iter().cloned());
            }
            assert_eq!(keys(&v), want, "{name}.json's facts against probe.ps1.j2's");
        }
        // the keys inside each list of objects, over all fixtures
        let fixtures: Vec<Value> = all()
            .iter()
            .map(|f| serde_json::from_str(f.1).unwrap())
            .collect();
        for (fact, text) in &blocks {
            let mut inside = Keys::new();
            fixtures
                .iter()
                .filter_map(|v| v.get(fact))
                .for_each(|x| nested_keys(x, &mut inside));
            let structured = fixtures
                .iter()
                .filter_map(|v| v.get(fact))
                .any(|x| x.is_object() || x.as_array().is_some_and(|a| !a.is_empty()));
            let in_template = template_keys(text);
            if structured || !in_template.is_empty() {
                assert_eq!(inside, in_template, "the keys of {fact}'s entries");
            }
        }
    }

    /// The parser reads every key of the fixtures and knows no key they
    /// lack: serialised back, a parsed fixture has the same keys, but for
    /// the envelope (`v`, `os`, `reach`, read beside the facts) and a
    /// service's `failure_actions` (the registry value, which the parser
    /// turns into `restart`).
    #[test]
    fn parser_and_fixtures_know_the_same_facts() {
        let (_, l2, _) = probe_facts();
        for (name, json, with_l2) in all() {
            let sent: Value = serde_json::from_str(json).unwrap();
            let back = serde_json::to_value(load(json)).unwrap();
            let mut want = keys(&sent);
            want.retain(|k| !["v", "os", "reach"].contains(&k.as_str()));
            if !with_l2 {
                // (the transparent probe has no l2bridge part: the parser's
                // defaults stand in)
                want.extend(l2.iter().cloned());
            }
            assert_eq!(keys(&back), want, "{name}.json");
            let (mut sent_keys, mut back_keys) = (Keys::new(), Keys::new());
            nested_keys(&sent["services"], &mut sent_keys);
            nested_keys(&back["services"], &mut back_keys);
            if !sent_keys.is_empty() {
                sent_keys.remove("failure_actions");
                sent_keys.insert("restart".into());
                assert_eq!(back_keys, sent_keys, "{name}.json services");
            }
            for fact in [
                "adapters",
                "routes",
                "files",
                "tasks",
                "firewall",
                "hns_networks",
            ] {
                let (mut a, mut b) = (Keys::new(), Keys::new());
                nested_keys(&sent[fact], &mut a);
                nested_keys(&back[fact], &mut b);
                assert_eq!(a, b, "{name}.json {fact}");
            }
        }
    }

    /// `WindowsFacts::fresh`, what `render` diffs against, is the fresh
    /// fixture but for what a probe reads and `render` cannot know.
    #[test]
    fn render_s_fresh_host_is_the_fresh_fixture() {
        let mut f = fresh();
        assert!(f.services.is_empty() && f.files.is_empty());
        // the name, update revision and boot time of a real host; no Docker
        // on a fresh 2019 (render assumes one: the transparent profile needs
        // it); the Containers feature not yet installed (render assumes it
        // is, to show the whole l2bridge script)
        f.hostname = String::new();
        f.ubr = None;
        f.boot_time = String::new();
        f.docker_version = "1.12.2-cs2-ws-beta".into();
        f.containers_feature = "Installed".into();
        let rendered = WindowsFacts::fresh("10.0.0.11".parse().unwrap(), None, None, 17763);
        assert_eq!(f, rendered);
    }
}
