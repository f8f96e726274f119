//! The l2bridge profile's rows: its range, command lines by release, builds,
//! containerd and pause, and README's matrix.

use std::collections::BTreeMap;

use super::*;

fn m(s: &str) -> Minor {
    Minor::parse(s).unwrap()
}

/// The flag name of an argument (`--a=b` → `--a`).
fn flag(a: &str) -> &str {
    a.split('=').next().unwrap()
}

fn values() -> Values<'static> {
    Values {
        ip: "10.0.0.11",
        node_name: "win01",
        pause_image: "registry.k8s.io/pause:3.10.2",
        kubeconfig: Some(r"C:\k\config"),
        proxy_kubeconfig: r"C:\k\config",
        bootstrap: false,
        api_server: "https://10.0.0.10:6443",
        log_dir: r"C:\k\logs",
        log_file: "",
        cluster_dns: "10.96.0.10",
        cluster_domain: "cluster.local",
        taints: "",
        network: "kwinctl",
        proxy_adapter: "vEthernet (KubeProxySwitch)",
        host_endpoint: "cbr0_ep",
    }
}

fn l2_args(c: Component, v: &str) -> Vec<String> {
    invocation(c, m(v), Profile::L2Bridge, &values())
        .unwrap()
        .args
}

#[test]
fn the_l2bridge_profile_runs_1_24_to_1_36_and_says_why_not_elsewhere() {
    assert_eq!(
        profile_range(Profile::L2Bridge),
        (m("1.24"), Some(m("1.36")))
    );
    for n in 24..=36 {
        assert_eq!(
            refusal(Minor::new(1, n), Profile::L2Bridge, true),
            None,
            "1.{n}"
        );
    }
    let e = refusal(m("1.23"), Profile::L2Bridge, true).unwrap();
    assert!(e.contains("starts at Kubernetes 1.24"), "{e}");
    let e = refusal(m("1.37"), Profile::L2Bridge, true).unwrap();
    assert!(e.contains("end at Kubernetes 1.36"), "{e}");
    // the transparent profile still ends at 1.23
    assert!(refusal(m("1.24"), Profile::Transparent, true).is_some());
}

#[test]
fn l2bridge_command_lines_follow_the_releases() {
    use Component::{KubeProxy, Kubelet};
    let has = |a: &[String], f: &str| a.iter().any(|x| flag(x) == f);
    for v in [
        "1.24", "1.26", "1.27", "1.30", "1.33", "1.34", "1.35", "1.36",
    ] {
        let k = l2_args(Kubelet, v);
        let p = l2_args(KubeProxy, v);
        let n = m(v);
        assert_eq!(k[0], "--windows-service", "{v}: {k:?}");
        assert!(k.contains(&"--node-ip=10.0.0.11".to_string()), "{v}");
        assert!(
            k.contains(
                &"--container-runtime-endpoint=npipe:////./pipe/containerd-containerd".to_string()
            ),
            "{v}"
        );
        assert!(k.contains(&"--cgroups-per-qos=false".to_string()), "{v}");
        assert!(k.contains(&"--resolv-conf=".to_string()), "{v}");
        assert!(
            !has(&k, "CONTAINER_NETWORK") && !has(&k, "--enable-cri"),
            "{v}"
        );
        // removed flags never appear where they are gone
        assert_eq!(has(&k, "--container-runtime"), n <= m("1.26"), "{v}");
        assert_eq!(
            has(&k, "--pod-infra-container-image"),
            n <= m("1.26"),
            "{v}"
        );
        assert!(!(n >= m("1.34") && has(&k, "--pod-infra-container-image")));
        assert_eq!(has(&k, "--log-dir"), n <= m("1.25"), "{v}");
        assert!(k.iter().all(|a| !a.starts_with("--network-plugin")), "{v}");
        assert!(inv_env(Kubelet, v).is_empty(), "{v}");
        assert!(p.contains(&"--proxy-mode=kernelspace".to_string()), "{v}");
        assert!(p.contains(&"--network-name=kwinctl".to_string()), "{v}");
        assert!(
            p.contains(&"--root-hnsendpoint-name=cbr0_ep".to_string()),
            "{v}"
        );
        assert!(p.contains(&"--enable-dsr=true".to_string()), "{v}");
        // the WinDSR gate only where it is off by default (1.33 beta, 1.34 GA)
        assert_eq!(
            p.contains(&"--feature-gates=WinDSR=true".to_string()),
            n <= m("1.32"),
            "{v}"
        );
        assert!(inv_env(KubeProxy, v).is_empty(), "{v}");
    }
}

fn inv_env(c: Component, v: &str) -> Vec<String> {
    invocation(c, m(v), Profile::L2Bridge, &values())
        .unwrap()
        .env
}

#[test]
fn l2bridge_builds_containerd_and_pause() {
    let p = Profile::L2Bridge;
    // no build is refused for the docs' support list alone: nothing in the
    // kubelet or containerd checks the build; the plan notes it instead
    let cv = |s: &str| ContainerdVersion::parse(s).unwrap();
    for (v, b) in [
        ("1.24", 17763),
        ("1.35", 17763),
        ("1.24", 26100),
        ("1.34", 26100),
    ] {
        assert_eq!(build_refusal(m(v), p, b), None, "{v} {b}");
    }
    let n = build_note(m("1.35"), p, 17763, Some(cv("2.2.0"))).unwrap();
    assert!(n.contains("only Windows Server 2022 and 2025"), "{n}");
    let n = build_note(m("1.34"), p, 26100, Some(cv("1.7.28"))).unwrap();
    assert!(
        n.contains("from 1.35 on") && !n.contains("exact build"),
        "{n}"
    );
    let n = build_note(m("1.30"), p, 26100, Some(cv("1.7.13"))).unwrap();
    assert!(
        n.contains("from 1.35 on") && n.contains("by the exact build"),
        "{n}"
    );
    assert_eq!(build_note(m("1.35"), p, 26100, Some(cv("2.2.0"))), None);
    assert_eq!(build_note(m("1.30"), p, 20348, Some(cv("1.6.28"))), None);
    assert_eq!(build_refusal(m("1.35"), p, 20348), None);
    // 2022 is not in the transparent profile's table
    assert!(build_refusal(m("1.23"), Profile::Transparent, 20348).is_some());
    for b in [17763, 20348, 26100] {
        assert_eq!(
            default_pause(m("1.30"), b),
            Some("registry.k8s.io/pause:3.10.2")
        );
    }
    assert_eq!(fresh_build(m("1.30"), p), 17763);
    assert_eq!(fresh_build(m("1.35"), p), 20348);
    assert_eq!(containerd_refusal(m("1.24"), cv("1.6.4")), None);
    assert!(containerd_refusal(m("1.24"), cv("1.6.3")).is_some());
    assert!(containerd_refusal(m("1.24"), cv("2.0.0")).is_some());
    assert_eq!(containerd_refusal(m("1.31"), cv("2.0.0")), None);
    assert_eq!(containerd_refusal(m("1.35"), cv("1.7.28")), None);
    let e = containerd_refusal(m("1.36"), cv("1.7.30")).unwrap();
    assert!(e.contains("2.2.0+, 2.3.0+"), "{e}");
    assert!(containerd_refusal(m("1.37"), cv("2.3.0")).is_some());
}

/// k8s.yaml's containerd table agrees, for every Kubernetes release
/// 1.24–1.36, with the facts of containerd's RELEASES.md vendored in
/// docs/research/containerd-releases.tsv (docs/research/containerd.md#d1):
/// the same oldest patch release of the same release lines, each taken at
/// its minimum, refused one patch below it, and any other line refused.
#[test]
fn the_containerd_table_is_containerd_s_release_table() {
    let tsv = include_str!("../../../../docs/research/containerd-releases.tsv");
    let vendored: BTreeMap<Minor, Vec<String>> = tsv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("kubernetes\t") && !l.is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3, "{l}");
            let mut mins: Vec<String> = cols[1].split(' ').map(String::from).collect();
            mins.sort();
            (m(cols[0]), mins)
        })
        .collect();
    let cv = |s: &str| ContainerdVersion::parse(s).unwrap();
    let lines = ["1.5", "1.6", "1.7", "2.0", "2.1", "2.2", "2.3", "2.4"];
    for n in 24..=36 {
        let mv = Minor::new(1, n);
        let want = vendored
            .get(&mv)
            .unwrap_or_else(|| panic!("containerd-releases.tsv has no row for {mv}"));
        let row = TABLE
            .containerd
            .iter()
            .find(|r| covers(&r.since, Some(&r.until), mv))
            .unwrap_or_else(|| panic!("k8s.yaml has no containerd row for {mv}"));
        let mut have = row.minimum.clone();
        have.sort();
        assert_eq!(&have, want, "Kubernetes {mv}: k8s.yaml vs RELEASES.md");
        for min in want {
            assert_eq!(containerd_refusal(mv, cv(min)), None, "{mv} + {min}");
            let (line, patch) = min.rsplit_once('.').unwrap();
            let patch: u32 = patch.parse().unwrap();
            if patch > 0 {
                let below = format!("{line}.{}", patch - 1);
                assert!(
                    containerd_refusal(mv, cv(&below)).is_some(),
                    "{mv} + {below}"
                );
            }
        }
        for line in lines {
            if !want.iter().any(|w| w.starts_with(&format!("{line}."))) {
                let v = format!("{line}.99");
                assert!(containerd_refusal(mv, cv(&v)).is_some(), "{mv} + {v}");
            }
        }
    }
}

/// One README cell of the l2bridge matrix.
fn l2_cell(m: Minor, build: u32) -> String {
    if let Some(why) = build_refusal(m, Profile::L2Bridge, build) {
        panic!("{why}")
    }
    let pause = format!("`{}`", default_pause(m, build).unwrap());
    match build_note(m, Profile::L2Bridge, build, None) {
        Some(_) => format!("{pause}, not in the docs' list"),
        None => pause,
    }
}

/// containerd/platforms' table (docs/research/containerd.md#d9): a host
/// before 2022 needs the exact build; a 2022 host runs 2022's images; a
/// 2025 host 2022's and 2025's; without the table (Docker, containerd
/// before 1.7.20) the exact build everywhere.
#[test]
fn images_a_host_runs_follow_containerds_table() {
    for (host, image, table, runs) in [
        (17763, 17763, true, true),
        (17763, 20348, true, false),
        (20348, 17763, true, false),
        (20348, 20348, true, true),
        (20348, 26100, true, false),
        (26100, 20348, true, true),
        (26100, 26100, true, true),
        (26100, 17763, true, false),
        (26100, 20348, false, false),
    ] {
        assert_eq!(
            image_runs(host, image, table),
            runs,
            "{host} {image} {table}"
        );
    }
    let cv = |s: &str| ContainerdVersion::parse(s).unwrap();
    assert!(!containerd_has_table(cv("1.7.19")));
    assert!(containerd_has_table(cv("1.7.20")) && containerd_has_table(cv("2.0.0")));
}

/// README's l2bridge matrix (releases × builds, with containerd) is what the
/// code does.
#[test]
fn the_readme_l2bridge_table_matches_the_code() {
    let mut t = String::from(
        "| Kubernetes | containerd | Windows Server 2019 (17763) | Windows Server 2022 (20348) | Windows Server 2025 (26100) |\n|---|---|---|---|---|\n",
    );
    for n in 24..=36 {
        let mv = Minor::new(1, n);
        let row = TABLE
            .containerd
            .iter()
            .find(|r| covers(&r.since, Some(&r.until), mv))
            .unwrap();
        let cd: Vec<String> = row.minimum.iter().map(|v| format!("{v}+")).collect();
        t += &format!(
            "| 1.{n} | {} | {} | {} | {} |\n",
            cd.join(", "),
            l2_cell(mv, 17763),
            l2_cell(mv, 20348),
            l2_cell(mv, 26100)
        );
    }
    let readme = include_str!("../../../../docs/windows.md");
    assert!(
        readme.contains(&t),
        "README.md's l2bridge table differs from the code; it should read:\n{t}"
    );
}

/// Where klog's file flags are gone (1.26 on, PR #112120), kubelet and
/// kube-proxy run behind kube-log-runner, whose rotation flags appear only
/// where the runner has them (1.34 on, PR #127667); 1.24 and 1.25 keep
/// klog's --log-dir and no wrapper.
#[test]
fn kube_log_runner_wraps_the_services_where_klog_writes_no_files() {
    let p = Profile::L2Bridge;
    for n in 24..=36 {
        let v = Minor::new(1, n);
        for c in [Component::Kubelet, Component::KubeProxy] {
            let args = invocation(c, v, p, &values()).unwrap().args;
            let klog = args.iter().any(|a| flag(a) == "--log-dir");
            let runner = log_runner(c, v, v, p, &values());
            assert_eq!(klog, n <= 25, "1.{n} {}: {args:?}", c.name());
            assert_eq!(runner.is_some(), n >= 26, "1.{n} {}", c.name());
            let Some(r) = runner else { continue };
            assert_eq!(
                r[0],
                format!(r"-log-file=C:\k\logs\{}.log", c.name()),
                "1.{n}"
            );
            let rotation = ["-log-file-size", "-log-file-age", "-flush-interval"];
            for f in rotation {
                assert_eq!(
                    r.iter().any(|a| flag(a) == f),
                    n >= 34,
                    "1.{n} {}: {f} in {r:?}",
                    c.name()
                );
            }
            assert_eq!(log_runner_rotates(v, p), n >= 34, "1.{n}");
            // every runner flag is a row in range, single-dash, with a value
            for a in &r {
                let row = TABLE
                    .flags
                    .iter()
                    .find(|x| x.component == Component::LogRunner && x.name == flag(a))
                    .unwrap_or_else(|| panic!("1.{n}: {a} is not a kube-log-runner row"));
                assert!(row.exists_in(v) && a.contains('='), "1.{n}: {a}");
            }
        }
    }
    // the transparent profile (up to 1.10, refused from 1.11) never wraps
    let t = log_runner(
        Component::Kubelet,
        m("1.23"),
        m("1.23"),
        Profile::Transparent,
        &values(),
    );
    assert_eq!(t, None);
    // a 1.34 runner in front of a 1.30 kubelet rotates; a 1.30 runner in
    // front of a 1.34 kubelet does not (the runner's release decides)
    let flags = |k: &str, r: &str| {
        log_runner(Component::Kubelet, m(k), m(r), p, &values())
            .unwrap()
            .iter()
            .any(|a| flag(a) == "-log-file-size")
    };
    assert!(flags("1.30", "1.34"));
    assert!(!flags("1.34", "1.30"));
    // and the kubelet's release decides whether there is a wrapper at all
    assert_eq!(
        log_runner(Component::Kubelet, m("1.25"), m("1.34"), p, &values()),
        None
    );
}
