//! The table's shape, the ranges it implies, and the command lines built from
//! it for the releases the issue names (1.5, 1.9, 1.10, 1.14, 1.16, 1.23,
//! and the refused 1.24 and 1.26).

use super::*;

const PLACEHOLDERS: &[&str] = &[
    "{ip}",
    "{node_name}",
    "{pause_image}",
    "{log_file}",
    "{kubeconfig}",
    "{proxy_kubeconfig}",
    "{api_server}",
    "{log_dir}",
    "{network}",
    "{proxy_adapter}",
    "{host_endpoint}",
    "{cluster_dns}",
    "{cluster_domain}",
    "{taints}",
];

fn values(kubeconfig: bool) -> Values<'static> {
    Values {
        ip: "10.0.0.11",
        node_name: "win01",
        pause_image: "apprenda/pause",
        kubeconfig: kubeconfig.then_some(r"C:\k\config"),
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

fn m(s: &str) -> Minor {
    Minor::parse(s).unwrap()
}

fn args(c: Component, v: &str, kc: bool) -> Vec<String> {
    invocation(c, m(v), Profile::Transparent, &values(kc))
        .unwrap()
        .args
}

/// The flag name of an argument (`--a=b` → `--a`).
fn flag(a: &str) -> &str {
    a.split('=').next().unwrap()
}

#[test]
fn the_table_is_well_formed_and_every_boundary_has_a_source() {
    let t = &*TABLE;
    assert!(t.flags.len() >= 20);
    let mut seen = std::collections::BTreeSet::new();
    for r in &t.flags {
        // (a flag may have a row per profile, never two in one profile)
        for p in [Profile::Transparent, Profile::L2Bridge] {
            if r.profiles.is_empty() || r.profiles.contains(&p) {
                assert!(
                    seen.insert((p.name(), r.component.name(), r.name.clone())),
                    "{} {} twice in {}",
                    r.component.name(),
                    r.name,
                    p.name()
                );
            }
        }
        let lo = minor(&r.since);
        if let Some(u) = &r.until {
            assert!(lo <= minor(u), "{}: since after until", r.name);
        }
        for (what, src) in [("since", &r.since_source), ("until", &r.until_source)] {
            assert!(
                src.starts_with("V:") || src.starts_with("B:"),
                "{} {}: the {what} source must say V: or B: — {src:?}",
                r.component.name(),
                r.name
            );
        }
        // flags start with a dash (kube-log-runner's with one: Go's flag package)
        assert_eq!(r.env, !r.name.starts_with('-'), "{}", r.name);
        if r.env {
            assert!(r.value.is_some(), "{}: an env row needs a value", r.name);
        }
        let mut v = r.value.clone().unwrap_or_default();
        for p in PLACEHOLDERS {
            v = v.replace(p, "");
        }
        assert!(!v.contains('{'), "{}: unknown placeholder in {v:?}", r.name);
        if r.missing == Missing::Refuse && r.until.is_some() {
            assert!(
                r.until_reason.is_some() || r.when != When::Always,
                "{}: a refusing row that ends needs an until_reason",
                r.name
            );
        }
    }
    for b in &t.windows_builds {
        minor(&b.since);
        b.until.as_deref().map(minor);
        assert!(b.since_source.starts_with("V:") || b.since_source.starts_with("B:"));
    }
    for p in &t.pause_images {
        assert!(
            p.default_for.builds.iter().all(|b| p.builds.contains(b)),
            "{} is the default for builds {:?} but has no image for each",
            p.image,
            p.default_for.builds
        );
        assert!(p.builds_source.starts_with("V:") || p.builds_source.starts_with("B:"));
    }
}

#[test]
fn the_profile_runs_1_5_to_1_10_and_says_why_not_elsewhere() {
    assert_eq!(
        profile_range(Profile::Transparent),
        (m("1.5"), Some(m("1.10")))
    );
    for minor in 5..=10 {
        assert_eq!(
            refusal(Minor::new(1, minor), Profile::Transparent, true),
            None,
            "1.{minor}"
        );
    }
    // from 1.11 a pod on the transparent network gets no IP (PR #61940)
    for minor in 11..=23 {
        let e = refusal(Minor::new(1, minor), Profile::Transparent, true).unwrap();
        assert!(e.contains("gets no pod IP") && e.contains("#61940"), "{e}");
        assert!(e.contains("windows_profile: l2bridge"), "{e}");
        assert!(e.contains("supports Kubernetes 1.5 to 1.10"), "{e}");
    }
    let e = refusal(m("1.4"), Profile::Transparent, true).unwrap();
    assert!(e.contains("Windows nodes arrived in Kubernetes 1.5"), "{e}");
    for v in ["1.24", "1.25"] {
        let e = refusal(m(v), Profile::Transparent, true).unwrap();
        assert!(e.contains("dockershim"), "{e}");
        assert!(!e.contains("userspace mode"), "{e}");
        assert!(e.contains("supports Kubernetes 1.5 to 1.10"), "{e}");
    }
    let e = refusal(m("1.26"), Profile::Transparent, true).unwrap();
    assert!(
        e.contains("dockershim") && e.contains("userspace mode"),
        "{e}"
    );
    // without a kubeconfig: --api-servers, gone in 1.8
    assert_eq!(refusal(m("1.7"), Profile::Transparent, false), None);
    let e = refusal(m("1.8"), Profile::Transparent, false).unwrap();
    assert!(
        e.contains("--api-servers") && e.contains("cluster.kubeconfig"),
        "{e}"
    );
}

#[test]
fn command_lines_for_the_named_releases() {
    use Component::{KubeProxy, Kubelet};
    // 1.5, the seed's own command line (no kubeconfig)
    assert_eq!(
        args(Kubelet, "1.5", false),
        [
            "--hostname-override=win01",
            "--pod-infra-container-image=apprenda/pause",
            "--resolv-conf=",
            "--cluster-dns=10.96.0.10",
            "--cluster-domain=cluster.local",
            "--api-servers=https://10.0.0.10:6443",
            r"--log-dir=C:\k\logs",
            "--logtostderr=false",
        ]
    );
    assert_eq!(
        args(KubeProxy, "1.5", false),
        [
            "--proxy-mode=userspace",
            "--bind-address=10.0.0.11",
            "--hostname-override=win01",
            "--master=https://10.0.0.10:6443",
            r"--log-dir=C:\k\logs",
            "--logtostderr=false",
        ]
    );
    let env = invocation(Kubelet, m("1.5"), Profile::Transparent, &values(false))
        .unwrap()
        .env;
    assert_eq!(env, ["CONTAINER_NETWORK=kwinctl"]);
    let env = invocation(KubeProxy, m("1.5"), Profile::Transparent, &values(false))
        .unwrap()
        .env;
    assert_eq!(
        env,
        ["INTERFACE_TO_ADD_SERVICE_IP=vEthernet (KubeProxySwitch)"]
    );
    // 1.6: the legacy Docker path and the Windows cgroups flags
    let a = args(Kubelet, "1.6", true);
    for want in [
        "--enable-cri=false",
        "--cgroups-per-qos=false",
        "--require-kubeconfig",
    ] {
        assert!(a.contains(&want.to_string()), "1.6 lacks {want}: {a:?}");
    }
    // 1.9: a kubeconfig, --require-kubeconfig, no --windows-service: a task
    let a = args(Kubelet, "1.9", true);
    assert!(
        a.contains(&r"--kubeconfig=C:\k\config".to_string()),
        "{a:?}"
    );
    assert!(a.contains(&"--require-kubeconfig".to_string()), "{a:?}");
    assert!(
        !a.iter()
            .any(|x| x == "--windows-service" || x == "--enable-cri=false")
    );
    assert_eq!(hosting(Kubelet, m("1.9")), Hosting::Task);
    assert_eq!(hosting(KubeProxy, m("1.9")), Hosting::Task);
    // 1.10: native services; --require-kubeconfig is gone
    for c in [Kubelet, KubeProxy] {
        assert_eq!(hosting(c, m("1.10")), Hosting::Service);
        let a = args(c, "1.10", true);
        assert_eq!(a[0], "--windows-service", "{a:?}");
        assert!(!a.contains(&"--require-kubeconfig".to_string()));
    }
    // 1.11+ refuses to start on Windows without the cgroups flags
    for v in ["1.11", "1.14", "1.16", "1.23"] {
        let a = args(Kubelet, v, true);
        assert!(
            a.contains(&"--cgroups-per-qos=false".to_string()),
            "{v}: {a:?}"
        );
        assert!(
            a.contains(&"--enforce-node-allocatable=".to_string()),
            "{v}: {a:?}"
        );
    }
    // 1.24 and 1.26 cannot be built at all
    let e = invocation(Kubelet, m("1.24"), Profile::Transparent, &values(true)).unwrap_err();
    assert!(e.contains("dockershim"), "{e}");
    let e = invocation(KubeProxy, m("1.26"), Profile::Transparent, &values(true)).unwrap_err();
    assert!(e.contains("userspace"), "{e}");
}

/// Every dockershim-era kubelet that has the flag gets a 20-minute image
/// pull deadline (docs/research/kubernetes.md#k-ipd); 1.5 has no such flag.
#[test]
fn dockershim_kubelets_wait_20_minutes_for_a_pull() {
    let deadline = "--image-pull-progress-deadline=20m".to_string();
    for n in 6..=23 {
        let a = args(Component::Kubelet, &format!("1.{n}"), true);
        assert!(a.contains(&deadline), "1.{n}: {a:?}");
        assert!(!args(Component::KubeProxy, &format!("1.{n}"), true).contains(&deadline));
    }
    let a = args(Component::Kubelet, "1.5", false);
    assert!(
        !a.iter()
            .any(|x| flag(x) == "--image-pull-progress-deadline")
    );
    let a = invocation(
        Component::Kubelet,
        m("1.30"),
        Profile::L2Bridge,
        &values(true),
    )
    .unwrap()
    .args;
    assert!(
        !a.iter()
            .any(|x| flag(x) == "--image-pull-progress-deadline")
    );
}

#[test]
fn every_emitted_flag_exists_in_its_release() {
    for (p, minor_n, kc, c) in [Profile::Transparent, Profile::L2Bridge]
        .into_iter()
        .flat_map(|p| (0..=40).map(move |n| (p, n)))
        .flat_map(|(p, n)| [true, false].map(|kc| (p, n, kc)))
        .flat_map(|(p, n, kc)| [Component::Kubelet, Component::KubeProxy].map(|c| (p, n, kc, c)))
    {
        let mv = Minor::new(1, minor_n);
        {
            {
                let Ok(inv) = invocation(c, mv, p, &values(kc)) else {
                    assert!(
                        refusal(mv, p, kc).is_some(),
                        "{} 1.{minor_n}: no refusal given",
                        p.name()
                    );
                    continue;
                };
                // a release the profile refuses builds no command line
                assert!(
                    refusal(mv, p, kc).is_none()
                        || refusal(mv, p, kc).is_some_and(|_| {
                            let (lo, hi) = profile_range(p);
                            mv < lo || hi.is_some_and(|h| mv > h) || !kc
                        })
                );
                let names: Vec<String> = inv
                    .args
                    .iter()
                    .map(|a| flag(a).to_string())
                    .chain(
                        inv.env
                            .iter()
                            .map(|e| e.split('=').next().unwrap().to_string()),
                    )
                    .collect();
                for n in names {
                    let row = TABLE
                        .flags
                        .iter()
                        .find(|r| {
                            r.component == c
                                && r.name == n
                                && (r.profiles.is_empty() || r.profiles.contains(&p))
                        })
                        .unwrap_or_else(|| panic!("{n} is not in the table"));
                    assert!(
                        row.exists_in(mv),
                        "{} {} 1.{minor_n}: {n}",
                        p.name(),
                        c.name()
                    );
                }
            }
        }
    }
}

#[test]
fn windows_builds_and_pause_images_by_release() {
    assert_eq!(build_refusal(m("1.5"), Profile::Transparent, 14393), None);
    assert_eq!(build_refusal(m("1.13"), Profile::Transparent, 14393), None);
    let e = build_refusal(m("1.14"), Profile::Transparent, 14393).unwrap();
    assert!(
        e.contains("Windows Server 2019 (build 17763) is the only"),
        "{e}"
    );
    assert!(e.contains("runs on Windows Server 2019 (17763)"), "{e}");
    let e = build_refusal(m("1.13"), Profile::Transparent, 17763).unwrap();
    assert!(e.contains("from 1.14 on"), "{e}");
    assert_eq!(build_refusal(m("1.16"), Profile::Transparent, 17763), None);
    let e = build_refusal(m("1.16"), Profile::Transparent, 16299).unwrap();
    assert!(e.contains("not in kwinctl's table"), "{e}");
    assert_eq!(default_pause(m("1.9"), 14393), Some("apprenda/pause"));
    assert_eq!(
        default_pause(m("1.16"), 17763),
        Some("mcr.microsoft.com/k8s/core/pause:1.2.0")
    );
    assert_eq!(
        default_pause(m("1.23"), 17763),
        Some("mcr.microsoft.com/oss/kubernetes/pause:1.4.1")
    );
    assert_eq!(default_pause(m("1.16"), 14393), None);
    assert_eq!(pause_builds("apprenda/pause:latest"), Some(&[14393][..]));
    assert_eq!(pause_builds("example/other"), None);
    // every release the profile runs has a build and a default pause image
    for n in 5..=10 {
        let mv = Minor::new(1, n);
        let b = fresh_build(mv, Profile::Transparent);
        assert_eq!(build_refusal(mv, Profile::Transparent, b), None, "1.{n}");
        assert!(default_pause(mv, b).is_some(), "1.{n}");
    }
}

/// One README cell: what kwinctl does for release `m` on `build`.
fn cell(m: Minor, build: u32) -> String {
    if let Some(why) = refusal(m, Profile::Transparent, true) {
        let mut r = Vec::new();
        if why.contains("arrived in Kubernetes 1.5") {
            r.push("no Windows nodes before 1.5");
        }
        if why.contains("gets no pod IP") {
            r.push("pods get no IP from 1.11 (PR #61940)");
        }
        if why.contains("was removed in\n1.24") || why.contains("was removed in 1.24") {
            r.push("dockershim removed in 1.24");
        }
        if why.contains("userspace mode") {
            r.push("userspace kube-proxy removed in 1.26");
        }
        assert!(!r.is_empty(), "{why}");
        return format!("refused: {}", r.join("; "));
    }
    if let Some(why) = build_refusal(m, Profile::Transparent, build) {
        let r = if why.contains("is the only Windows supported") {
            "1.14+ supports Windows Server 2019 only"
        } else if why.contains("from 1.14 on") {
            "Windows Server 2019 from 1.14 on"
        } else {
            panic!("{why}")
        };
        return format!("refused (preflight): {r}");
    }
    let hosting = match hosting(Component::Kubelet, m) {
        Hosting::Service => "native services",
        Hosting::Task => "scheduled tasks",
    };
    let pause = default_pause(m, build).unwrap();
    format!("supported ({hosting}; pause `{pause}`)")
}

/// README's table of releases × Windows Server builds is what the code does.
#[test]
fn the_readme_table_matches_the_code() {
    let mut t = String::from(
        "| Kubernetes | Windows Server 2016 (14393) | Windows Server 2019 (17763) |\n|---|---|---|\n",
    );
    for n in 4..=27 {
        let m = Minor::new(1, n);
        t += &format!("| 1.{n} | {} | {} |\n", cell(m, 14393), cell(m, 17763));
    }
    let readme = include_str!("../../../../docs/windows.md");
    assert!(
        readme.contains(&t),
        "README.md's release table differs from the code; it should read:\n{t}"
    );
}

/// `windows.taints` reach the kubelet as `--register-with-taints` (1.6 on),
/// and only when given; before 1.6 the kubelet has no such flag.
#[test]
fn taints_become_register_with_taints_from_1_6() {
    let mut v = values(true);
    let none = invocation(Component::Kubelet, m("1.10"), Profile::Transparent, &v).unwrap();
    assert!(
        !none
            .args
            .iter()
            .any(|a| a.starts_with("--register-with-taints"))
    );
    v.taints = "os=windows:NoSchedule,a=b:NoExecute";
    let got = invocation(Component::Kubelet, m("1.10"), Profile::Transparent, &v).unwrap();
    assert!(
        got.args
            .contains(&"--register-with-taints=os=windows:NoSchedule,a=b:NoExecute".to_string()),
        "{:?}",
        got.args
    );
    let e = invocation(Component::Kubelet, m("1.5"), Profile::Transparent, &v).unwrap_err();
    assert!(e.contains("--register-with-taints"), "{e}");
    let l2 = invocation(Component::Kubelet, m("1.36"), Profile::L2Bridge, &v).unwrap();
    assert!(
        l2.args
            .iter()
            .any(|a| a.starts_with("--register-with-taints="))
    );
    // kube-proxy takes none
    let proxy = invocation(Component::KubeProxy, m("1.36"), Profile::L2Bridge, &v).unwrap();
    assert!(!proxy.args.iter().any(|a| a.contains("taints")));
}
