//! `check` on an l2bridge inventory refuses each Windows binary the profile
//! needs that has no `windows.binaries` entry (one `file:line:col` error per
//! host and binary), and the fix it proposes is one `check` then accepts:
//! the entry with its URL (once its SHA-256 is filled in), or
//! `preinstalled: true`. An imported Ansible inventory, filled in, is
//! refused the same way; the release examples of other hints are releases
//! `check` accepts.

use crate::common;

use std::path::Path;

use common::{kwinctl, text, write};

const KUBECONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/example.kubeconfig"
);

/// An l2bridge inventory (Kubernetes 1.34.2) of a control plane and two
/// Windows hosts, with these `defaults.windows.binaries` lines.
fn inventory(dir: &Path, binaries: &[String]) -> String {
    let mut t = format!(
        "cluster:\n  name: b\n  cluster_cidr: 10.244.0.0/16\n  service_cidr: 10.96.0.0/12\n  \
         api_server: https://10.0.0.10:6443\n  kubeconfig: {KUBECONFIG}\n  \
         kubernetes_version: \"1.34.2\"\n  containerd_version: \"2.1.3\"\n"
    );
    if !binaries.is_empty() {
        t += "defaults:\n  windows:\n    binaries:\n";
        for b in binaries {
            t += &format!("      {b}\n");
        }
    }
    t += "hosts:\n  - name: cp1\n    os: linux\n    role: control-plane\n    address: 10.0.0.10\n  \
          - name: win1\n    os: windows\n    address: 10.0.0.11\n  \
          - name: win2\n    os: windows\n    address: 10.0.0.12\n";
    let p = dir.join("inv.yaml");
    write(&p, &t);
    p.to_string_lossy().into_owned()
}

const NEEDED: [&str; 5] = [
    "kubelet",
    "kube-proxy",
    "containerd",
    "cni-plugins",
    "kube-log-runner",
];

/// The entries the fix lines propose, by binary: (url form, preinstalled form).
fn proposals(err: &str) -> Vec<(String, String, String)> {
    err.lines()
        .filter(|l| l.trim_start().starts_with("fix: add `"))
        .map(|l| {
            let add = l.split("add `").nth(1).unwrap().split('`').next().unwrap();
            let pre = l
                .rsplit("already, `")
                .next()
                .unwrap()
                .split('`')
                .next()
                .unwrap();
            let name = add.split(':').next().unwrap().to_string();
            (name, add.to_string(), pre.to_string())
        })
        .collect()
}

#[test]
fn check_names_each_missing_l2bridge_binary_and_proposes_an_accepted_fix() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(dir.path(), &[]);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    // one error per host and binary, at the host's line
    for (host, line) in [("win1", 14), ("win2", 17)] {
        for b in NEEDED {
            let want =
                format!("inv.yaml:{line}:5: {host}: windows.binaries.{b} is missing: the l2bridge");
            assert!(err.contains(&want), "{want}\n{err}");
        }
    }
    let fixes = proposals(&err);
    assert_eq!(fixes.len(), 10, "{err}");

    // the preinstalled form of every fix: accepted
    let mut pre: Vec<String> = fixes.iter().map(|(_, _, p)| p.clone()).collect();
    pre.sort();
    pre.dedup();
    assert_eq!(pre.len(), 5, "{pre:?}");
    let inv = inventory(dir.path(), &pre);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // the url form, once its SHA-256 is filled in (FILL-IN alone is refused
    // as the placeholder it is): accepted
    let mut urls: Vec<String> = fixes.iter().map(|(_, a, _)| a.clone()).collect();
    urls.sort();
    urls.dedup();
    let inv = inventory(dir.path(), &urls);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("FILL-IN"),
        "{}",
        text(&o)
    );
    let filled: Vec<String> = urls
        .iter()
        .map(|u| u.replace("FILL-IN", &"ab".repeat(32)))
        .collect();
    let inv = inventory(dir.path(), &filled);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // each names the release's own files
    assert!(
        filled
            .iter()
            .any(|u| u.contains("dl.k8s.io/v1.34.2/bin/windows/amd64/kubelet.exe")),
        "{filled:?}"
    );
    assert!(
        filled
            .iter()
            .any(|u| u.contains("containerd-2.1.3-windows")),
        "{filled:?}"
    );

    // an entry of the host's own counts: with kubelet only in win2's own
    // entries, only win1 is refused for it
    let no_kubelet: Vec<String> = pre
        .iter()
        .filter(|p| !p.starts_with("kubelet:"))
        .cloned()
        .collect();
    let inv = inventory(dir.path(), &no_kubelet);
    let t = std::fs::read_to_string(&inv).unwrap().replace(
        "    address: 10.0.0.12\n",
        "    address: 10.0.0.12\n    windows:\n      binaries:\n        kubelet: { preinstalled: true }\n",
    );
    write(Path::new(&inv), &t);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains(": win1: windows.binaries.kubelet is missing"),
        "{err}"
    );
    assert_eq!(err.matches(" is missing").count(), 1, "{err}");
}

#[test]
fn preinstalled_takes_no_url_path_or_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let mut bins: Vec<String> = NEEDED
        .iter()
        .map(|b| format!("{b}: {{ preinstalled: true }}"))
        .collect();
    bins[0] = "kubelet: { preinstalled: true, url: \"https://dl.invalid/kubelet.exe\" }".into();
    let inv = inventory(dir.path(), &bins);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "inv.yaml:12:32: windows.binaries.kubelet is preinstalled but also names a url"
        ),
        "{err}"
    );
    assert!(err.contains("fix: keep `kubelet: { preinstalled: true }` alone"));
    // `preinstalled: false` is an ordinary entry: it needs its url or path
    bins[0] = "kubelet: { preinstalled: false }".into();
    let inv = inventory(dir.path(), &bins);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("inv.yaml:12:16: windows.binaries.kubelet names neither a url nor a path"),
        "{err}"
    );
    assert_eq!(err.matches("names neither").count(), 1, "said once: {err}");
}

#[test]
fn an_imported_windows_inventory_without_binaries_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (inv, _) = crate::cli_import::import(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ansible/hosts.ini"),
        dir.path(),
    );
    let s = std::fs::read_to_string(&inv).unwrap();
    let release = s
        .lines()
        .find(|l| l.trim_start().starts_with("kubernetes_version: FILL-IN"))
        .and_then(|l| l.split("e.g. \"").nth(1))
        .and_then(|l| l.split('"').next())
        .unwrap()
        .to_string();
    crate::cli_import::fill(&inv);
    let s = std::fs::read_to_string(&inv)
        .unwrap()
        .replace(
            "api_server: http://10.0.0.10:8080",
            "api_server: https://10.0.0.10:6443",
        )
        .replace(
            "kubernetes_version: \"1.7.16\"",
            &format!("kubernetes_version: \"{release}\"\n  kubeconfig: {KUBECONFIG}"),
        );
    write(&inv, &s);
    // the containerd release its hint proposes
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let cv = err
        .split("e.g. containerd_version: \"")
        .nth(1)
        .unwrap_or_else(|| panic!("{err}"))
        .split('"')
        .next()
        .unwrap();
    let s = s.replace(
        "  kubeconfig:",
        &format!("  containerd_version: \"{cv}\"\n  kubeconfig:"),
    );
    write(&inv, &s);
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let windows: Vec<&str> = s
        .lines()
        .filter(|l| l.trim_start().starts_with("- name: "))
        .map(|l| l.trim_start().trim_start_matches("- name: ").trim())
        .filter(|n| err.contains(&format!(" {n}: windows.binaries.kubelet is missing")))
        .collect();
    assert!(windows.len() >= 2, "every Windows host is named: {err}");
    for n in &windows {
        for b in ["kubelet", "kube-proxy", "containerd", "cni-plugins"] {
            assert!(
                err.contains(&format!("{n}: windows.binaries.{b} is missing")),
                "{n} {b}: {err}"
            );
        }
    }
}

/// The release examples of the hints for a value that is not a release
/// are ones `check` accepts.
#[test]
fn release_examples_in_hints_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let pre: Vec<String> = NEEDED
        .iter()
        .map(|b| format!("{b}: {{ preinstalled: true }}"))
        .collect();
    let inv = inventory(dir.path(), &pre);
    let good = std::fs::read_to_string(&inv).unwrap();
    let example = |err: &str| -> String {
        err.split("e.g. \"")
            .nth(1)
            .unwrap_or_else(|| panic!("no example: {err}"))
            .split('"')
            .next()
            .unwrap()
            .to_string()
    };
    for (key, value) in [
        ("kubernetes_version", "1.34.2"),
        ("containerd_version", "2.1.3"),
    ] {
        let from = format!("{key}: \"{value}\"");
        let bad = good.replace(&from, &format!("{key}: \"not-a-release\""));
        write(Path::new(&inv), &bad);
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if key == "containerd_version" {
            // no release fits every Kubernetes release: none is proposed
            assert!(!err.contains("e.g. \""), "{err}");
            continue;
        }
        let v = example(&err);
        write(
            Path::new(&inv),
            &good.replace(&from, &format!("{key}: \"{v}\"")),
        );
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(o.status.code(), Some(0), "{key} {v}: {}", text(&o));
    }
    // log_runner_version
    let bad = good.replace(
        "  containerd_version:",
        "  log_runner_version: \"x\"\n  containerd_version:",
    );
    write(Path::new(&inv), &bad);
    let err = String::from_utf8_lossy(&kwinctl(&["check", "-i", &inv]).stderr).into_owned();
    let v = example(&err);
    write(
        Path::new(&inv),
        &bad.replace(
            "log_runner_version: \"x\"",
            &format!("log_runner_version: \"{v}\""),
        ),
    );
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "log_runner_version {v}: {}",
        text(&o)
    );
}
