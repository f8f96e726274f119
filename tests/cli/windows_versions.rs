//! `kwinctl check` and `render` across Kubernetes releases: every flag and
//! environment variable on the kubelet and kube-proxy command lines that
//! `render` produces exists in the declared release (by the flag table in
//! src/os/windows/k8s.yaml, read back from the rendered script's headers
//! and split as Windows splits a command line), and the releases the profile
//! cannot run are refused with exit 2, the reason and the supported range.

use crate::common;

use std::path::Path;

use common::{kwinctl, text};
use kwinctl::inventory::Minor;
use kwinctl::os::windows::cmdline;
use kwinctl::os::windows::k8s::TABLE;

const KUBECONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/example.kubeconfig"
);

/// An inventory of one Linux and one Windows host at `version`; with a
/// kubeconfig and an https API server, or neither (the seed's http one).
/// From 1.24 (the l2bridge profile's) the Windows host has the binaries
/// the profile needs already (`preinstalled: true`).
fn inventory(dir: &Path, version: &str, kubeconfig: bool) -> String {
    let minor: u32 = version.split('.').nth(1).unwrap().parse().unwrap();
    let mut bins: Vec<&str> = Vec::new();
    if minor >= 24 {
        bins.extend(["kubelet", "kube-proxy", "containerd", "cni-plugins"]);
    }
    if minor >= 26 {
        bins.push("kube-log-runner");
    }
    let binaries: String = if bins.is_empty() {
        String::new()
    } else {
        "    windows:\n      binaries:\n".to_string()
            + &bins
                .iter()
                .map(|b| format!("        {b}: {{ preinstalled: true }}\n"))
                .collect::<String>()
    };
    let api = if kubeconfig {
        format!("api_server: https://10.0.0.10:6443\n  kubeconfig: {KUBECONFIG}")
    } else {
        "api_server: http://10.0.0.10:8080".to_string()
    };
    let text = format!(
        "cluster:\n  name: v\n  cluster_cidr: 10.244.0.0/16\n  service_cidr: 10.96.0.0/12\n  {api}\n  \
         kubernetes_version: \"{version}\"\nhosts:\n  - name: lin01\n    os: linux\n    role: control-plane\n    \
         address: 10.0.0.10\n  - name: win01\n    os: windows\n    address: 10.0.0.11\n{binaries}"
    );
    let p = dir.join(format!("v{version}-{kubeconfig}.yaml"));
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// (component, hosting, argv after the binary, env) of each service in a
/// rendered Windows script, from the simulator headers.
fn services(script: &str) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    script
        .lines()
        .filter_map(|l| l.strip_prefix("# kwinctl-sim: "))
        .map(|j| serde_json::from_str::<serde_json::Value>(j).unwrap())
        .filter(|h| h["kind"] == "install_service" || h["kind"] == "install_task")
        .map(|h| {
            let s = &h["service"];
            let argv = cmdline::split(s["binpath"].as_str().unwrap());
            assert_eq!(argv[0], s["exe"].as_str().unwrap());
            // the start script's argument string is the same command line
            assert_eq!(cmdline::split(s["args"].as_str().unwrap()), argv[1..]);
            let env = s["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap().to_string())
                .collect();
            (
                s["name"].as_str().unwrap().to_string(),
                s["hosting"].as_str().unwrap().to_string(),
                argv[1..].to_vec(),
                env,
            )
        })
        .collect()
}

fn check_against_table(
    version: &str,
    script: &str,
) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    let m = kwinctl::inventory::KubeVersion::parse(version)
        .unwrap()
        .minor;
    let svcs = services(script);
    assert_eq!(svcs.len(), 2, "{version}: {script}");
    for (component, _, args, env) in &svcs {
        let names = args
            .iter()
            .map(|a| a.split('=').next().unwrap().to_string())
            .chain(env.iter().map(|e| e.split('=').next().unwrap().to_string()));
        for n in names {
            let row = TABLE
                .flags
                .iter()
                .find(|r| r.component.name() == component && r.name == n)
                .unwrap_or_else(|| panic!("{version}: {component} {n} is not in the flag table"));
            assert!(
                row.exists_in(m),
                "{version}: {component} is given {n}, which exists from {} to {:?}",
                row.since,
                row.until
            );
        }
    }
    svcs
}

#[test]
fn render_emits_only_flags_the_release_has() {
    let dir = tempfile::tempdir().unwrap();
    for (version, kc) in [
        ("1.5.8", false),
        ("1.6.13", true),
        ("1.9.11", true),
        ("1.10.13", true),
    ] {
        let inv = inventory(dir.path(), version, kc);
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(o.status.code(), Some(0), "{version}: {}", text(&o));
        let o = kwinctl(&["render", "-i", &inv, "--host", "win01"]);
        assert_eq!(o.status.code(), Some(0), "{version}: {}", text(&o));
        let script = String::from_utf8_lossy(&o.stdout).into_owned();
        let svcs = check_against_table(version, &script);
        let minor = kwinctl::inventory::KubeVersion::parse(version)
            .unwrap()
            .minor;
        let native = minor >= Minor::new(1, 10);
        for (component, hosting, args, _) in &svcs {
            assert_eq!(
                hosting,
                if native { "service" } else { "task" },
                "{version}"
            );
            assert_eq!(
                args.contains(&"--windows-service".to_string()),
                native,
                "{version} {component}"
            );
        }
        let kubelet = &svcs[0].2;
        // the Windows kubelet's cgroups flags from 1.6 (1.11+ refuses to start without them)
        assert_eq!(
            kubelet.contains(&"--cgroups-per-qos=false".to_string()),
            minor >= Minor::new(1, 6),
            "{version}: {kubelet:?}"
        );
        if !kc {
            assert!(kubelet.contains(&"--api-servers=http://10.0.0.10:8080".to_string()));
        }
        // the pause image by release and build
        let pause = if minor >= Minor::new(1, 20) {
            "mcr.microsoft.com/oss/kubernetes/pause:1.4.1"
        } else if minor >= Minor::new(1, 14) {
            "mcr.microsoft.com/k8s/core/pause:1.2.0"
        } else {
            "apprenda/pause"
        };
        assert!(
            kubelet.contains(&format!("--pod-infra-container-image={pause}")),
            "{version}: {kubelet:?}"
        );
    }
}

#[test]
fn releases_the_profile_cannot_run_are_refused_at_check() {
    let dir = tempfile::tempdir().unwrap();
    // (1.24 and later are the l2bridge profile's unless the inventory names
    // the transparent one: then the refusal points at that line)
    let transparent = |inv: &str| {
        let text = std::fs::read_to_string(inv).unwrap().replace(
            "  kubernetes_version:",
            "  windows_profile: transparent\n  kubernetes_version:",
        );
        std::fs::write(inv, text).unwrap();
    };
    for (version, want, at) in [
        // from 1.11 its pods get no IP (issue 24): refused, whatever the build
        (
            "1.11.10",
            vec!["gets no pod IP", "PR #61940"],
            ".yaml:7:23: Kubernetes ",
        ),
        (
            "1.16.15",
            vec!["gets no pod IP", "PR #61940"],
            ".yaml:7:23: Kubernetes ",
        ),
        (
            "1.23.17",
            vec!["gets no pod IP", "windows_profile: l2bridge"],
            ".yaml:7:23: Kubernetes ",
        ),
        ("1.24.17", vec!["dockershim"], ".yaml:7:20: Kubernetes "),
        (
            "1.26.0",
            vec!["dockershim", "userspace mode"],
            ".yaml:7:20: Kubernetes ",
        ),
        (
            "1.4.12",
            vec!["Windows nodes arrived in Kubernetes 1.5"],
            ".yaml:7:23: Kubernetes ",
        ),
    ] {
        let inv = inventory(dir.path(), version, true);
        if at.contains(":20:") {
            transparent(&inv);
        }
        for cmd in ["check", "render", "plan"] {
            let o = kwinctl(&[cmd, "-i", &inv]);
            assert_eq!(o.status.code(), Some(2), "{cmd} {version}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            // pointed at windows_profile (line 7, column 20) or at
            // kubernetes_version (line 7, column 23)
            assert!(err.contains(at), "{err}");
            for w in &want {
                assert!(err.contains(w), "{version}: {w}: {err}");
            }
            assert!(
                err.contains("the profile supports Kubernetes 1.5 to 1.10"),
                "{err}"
            );
        }
    }
    // the transparent profile's refusal says which profile the release runs
    let inv = inventory(dir.path(), "1.24.17", true);
    transparent(&inv);
    let err = String::from_utf8_lossy(&kwinctl(&["check", "-i", &inv]).stderr).into_owned();
    assert!(
        err.contains("set cluster.windows_profile: l2bridge"),
        "{err}"
    );
    // without the name, 1.24 is the l2bridge profile's, which needs the
    // containerd release; the l2bridge profile refuses 1.23
    let inv = inventory(dir.path(), "1.24.17", true);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cluster.containerd_version is required"));
    let text_of = std::fs::read_to_string(&inv).unwrap();
    std::fs::write(
        &inv,
        text_of.replace(
            "  kubernetes_version:",
            "  containerd_version: \"1.6.4\"\n  kubernetes_version:",
        ),
    )
    .unwrap();
    assert_eq!(kwinctl(&["check", "-i", &inv]).status.code(), Some(0));
    let inv = inventory(dir.path(), "1.23.17", true);
    let text_of = std::fs::read_to_string(&inv).unwrap();
    std::fs::write(
        &inv,
        text_of.replace(
            "  kubernetes_version:",
            "  windows_profile: l2bridge\n  kubernetes_version:",
        ),
    )
    .unwrap();
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    // and 1.23 runs neither: the transparent profile stops at 1.10
    assert!(
        err.contains("l2bridge profile starts at Kubernetes 1.24")
            && err.contains("use Kubernetes 1.24 to 1.36 on the Windows nodes with the l2bridge profile, or 1.5 to 1.10 with the transparent profile"),
        "{err}"
    );
    // 1.8 has no --api-servers: without a kubeconfig it cannot work
    let inv = inventory(dir.path(), "1.8.15", false);
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(".yaml:5:15: ") && err.contains("--api-servers"),
        "{err}"
    );
    assert!(err.contains("fix: set cluster.kubeconfig"), "{err}");
    // and with one it is fine
    let inv = inventory(dir.path(), "1.8.15", true);
    assert_eq!(kwinctl(&["check", "-i", &inv]).status.code(), Some(0));
}

#[test]
fn check_notes_the_shared_kubelet_identity() {
    let dir = tempfile::tempdir().unwrap();
    let o = kwinctl(&["check", "-i", &inventory(dir.path(), "1.10.13", true)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("note: every Windows node uses the one identity"),
        "{}",
        text(&o)
    );
    // 1.10 could join each node with its own identity: the kubeconfig
    // alone chose the shared one, and check says how to choose
    let implicit = "cluster.identity is shared only because cluster.kubeconfig is set";
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(implicit),
        "{}",
        text(&o)
    );
    let inv = inventory(dir.path(), "1.10.13", true);
    let t = std::fs::read_to_string(&inv).unwrap().replace(
        "  kubernetes_version:",
        "  identity: shared\n  kubernetes_version:",
    );
    std::fs::write(&inv, t).unwrap();
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains(implicit),
        "{}",
        text(&o)
    );
    let o = kwinctl(&["check", "-i", &inventory(dir.path(), "1.5.8", false)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("uses the one identity"), "{out}");
    assert!(!out.contains(implicit), "{out}");
    assert!(out.contains("cluster.identity: shared"), "{out}");
}

/// cluster.log_runner_version: the release kube-log-runner.exe comes from,
/// where the l2bridge profile wraps the services (1.26 on); refused where
/// no runner runs, or before the runner shipped (1.23, PR #106123).
#[test]
fn check_takes_the_log_runner_release_only_where_a_runner_runs() {
    let dir = tempfile::tempdir().unwrap();
    let with = |version: &str, containerd: &str, runner: &str| {
        let inv = inventory(dir.path(), version, true);
        let t = std::fs::read_to_string(&inv).unwrap().replace(
            "  kubernetes_version:",
            &format!(
                "  containerd_version: \"{containerd}\"\n  log_runner_version: \"{runner}\"\n  kubernetes_version:"
            ),
        );
        std::fs::write(&inv, t).unwrap();
        kwinctl(&["check", "-i", &inv])
    };
    let o = with("1.30.4", "1.7.20", "1.34.2");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = with("1.24.17", "1.6.4", "1.34.2");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(".yaml:") && err.contains("runs no kube-log-runner"),
        "{err}"
    );
    assert!(err.contains("remove log_runner_version"), "{err}");
    let o = with("1.30.4", "1.7.20", "1.22.17");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("from 1.23 on (PR #106123)"),
        "{}",
        text(&o)
    );
    let o = with("1.30.4", "1.7.20", "latest");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a Kubernetes release"),
        "{}",
        text(&o)
    );
}

/// A windows.binaries entry the profile does not install in that release is
/// refused (as a misspelt name is), once, at the first host that has it:
/// kube-log-runner where klog still writes files (1.24, 1.25), containerd
/// on the transparent profile.
#[test]
fn check_refuses_binaries_the_release_does_not_install() {
    let dir = tempfile::tempdir().unwrap();
    let with = |version: &str, extra: &str, bin: &str| {
        let inv = inventory(dir.path(), version, true);
        let t = std::fs::read_to_string(&inv).unwrap().replace(
            "  kubernetes_version:",
            &format!("{extra}  kubernetes_version:"),
        );
        let entry = format!(
            "        {bin}: {{ url: \"https://dl.invalid/x\", sha256: \"{}\" }}\n",
            "ab".repeat(32)
        );
        // (beside the entries the profile needs, where there are some)
        let t = if t.contains("      binaries:\n") {
            t.replace(&format!("        {bin}: {{ preinstalled: true }}\n"), "")
                .replace("      binaries:\n", &format!("      binaries:\n{entry}"))
        } else {
            t + "    windows:\n      binaries:\n" + &entry
        };
        std::fs::write(&inv, t).unwrap();
        kwinctl(&["check", "-i", &inv])
    };
    let o = with(
        "1.24.17",
        "  containerd_version: \"1.6.4\"\n",
        "kube-log-runner",
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "win01: windows.binaries.kube-log-runner is given, but kwinctl does not install it"
        ) && err.contains("write their own log files")
            && err.contains("remove windows.binaries.kube-log-runner"),
        "{err}"
    );
    let o = with("1.10.13", "", "containerd");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("belongs to the l2bridge profile"),
        "{}",
        text(&o)
    );
    // where it is installed, it is fine
    let o = with(
        "1.30.4",
        "  containerd_version: \"1.7.20\"\n",
        "kube-log-runner",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The l2bridge profile's placeholder HNS network (192.168.255.0/30) on
/// every Windows node's vSwitch: `check` refuses a cluster CIDR, a service
/// CIDR or a node address that shares addresses with it, with the line and
/// column and the fix; the transparent profile creates no placeholder.
#[test]
fn check_refuses_networks_overlapping_the_l2bridge_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let with = |version: &str, from: &str, to: &str| {
        let inv = inventory(dir.path(), version, true);
        let t = std::fs::read_to_string(&inv)
            .unwrap()
            .replace(
                "  kubernetes_version:",
                "  containerd_version: \"1.7.20\"\n  kubernetes_version:",
            )
            .replace(from, to);
        std::fs::write(&inv, t).unwrap();
        (inv.clone(), kwinctl(&["check", "-i", &inv]))
    };
    // the seeds' cluster CIDR contains it
    let (inv, o) = with(
        "1.30.4",
        "cluster_cidr: 10.244.0.0/16",
        "cluster_cidr: 192.168.0.0/16",
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{inv}:3:17: cluster.cluster_cidr 192.168.0.0/16 overlaps the l2bridge profile's placeholder HNS network 192.168.255.0/30"
        )) && err.contains("fix: pick a cluster_cidr that does not contain 192.168.255.0/30"),
        "{err}"
    );
    let (inv, o) = with(
        "1.30.4",
        "service_cidr: 10.96.0.0/12",
        "service_cidr: 192.168.255.0/24",
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{inv}:4:17: cluster.service_cidr 192.168.255.0/24 overlaps"
        )),
        "{err}"
    );
    let (_, o) = with("1.30.4", "address: 10.0.0.11", "address: 192.168.255.2");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "host win01's address 192.168.255.2 is inside the l2bridge profile's placeholder"
        ),
        "{}",
        text(&o)
    );
    // clear of it: fine; and the transparent profile has no placeholder
    let (_, o) = with("1.30.4", "", "");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (_, o) = with(
        "1.10.13",
        "cluster_cidr: 10.244.0.0/16",
        "cluster_cidr: 192.168.0.0/16",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The example inventories the Windows facts fixtures are converged for
/// (tests/fixtures/windows/) are ones `check` accepts: a fixture of a
/// release or a profile kwinctl refuses would test a host no run makes.
#[test]
fn the_facts_fixtures_inventories_pass_check() {
    for name in ["transparent", "l2bridge"] {
        let path = format!(
            "{}/tests/fixtures/windows/{name}.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let o = common::kwinctl(&["check", "-i", &path]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", common::text(&o));
    }
}

/// A `fix:` line's `e.g. containerd_version: "X"` proposes a release that
/// `check` then accepts, for every release the l2bridge profile runs: with
/// no containerd_version, and with one the release does not support.
#[test]
fn containerd_hints_propose_a_release_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let example = |err: &str| -> String {
        let at = err
            .find("e.g. containerd_version: \"")
            .unwrap_or_else(|| panic!("no example in {err}"))
            + "e.g. containerd_version: \"".len();
        err[at..].split('"').next().unwrap().to_string()
    };
    let with = |inv: &str, cv: &str| {
        let t = std::fs::read_to_string(inv).unwrap();
        let t = match t.find("  containerd_version:") {
            Some(_) => t
                .lines()
                .map(|l| {
                    if l.starts_with("  containerd_version:") {
                        format!("  containerd_version: \"{cv}\"")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => t.replace(
                "  kubernetes_version:",
                &format!("  containerd_version: \"{cv}\"\n  kubernetes_version:"),
            ),
        };
        std::fs::write(inv, t).unwrap();
    };
    for minor in 24..=36 {
        let inv = inventory(dir.path(), &format!("1.{minor}.0"), true);
        // none given: the hint's example is accepted
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(o.status.code(), Some(2), "1.{minor}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("containerd_version is required"), "{err}");
        let cv = example(&err);
        with(&inv, &cv);
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "1.{minor} with {cv}: {}",
            text(&o)
        );
        // one the release does not support (1.6.0 is below every row's
        // minimum): refused, and the hint's example is accepted
        with(&inv, "1.6.0");
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "1.{minor} with 1.6.0: {}",
            text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("is not among the releases"), "{err}");
        let cv = example(&err);
        with(&inv, &cv);
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "1.{minor} with {cv}: {}",
            text(&o)
        );
    }
}

/// The release `import` proposes for a Windows inventory's
/// `kubernetes_version` is one `check` accepts (with the containerd
/// release its own hint then proposes).
#[test]
fn import_proposes_a_release_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = crate::cli_import::import(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ansible/hosts.ini"),
        dir.path(),
    );
    let written = std::fs::read_to_string(out).unwrap();
    let line = written
        .lines()
        .find(|l| l.trim_start().starts_with("kubernetes_version: FILL-IN"))
        .unwrap_or_else(|| panic!("no kubernetes_version placeholder in {written}"));
    let release = line
        .split("e.g. \"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let inv = inventory(dir.path(), release, true);
    let o = kwinctl(&["check", "-i", &inv]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    // only the containerd release is missing, and its hint's example fits
    assert!(
        err.contains("containerd_version is required"),
        "{release}: {err}"
    );
    let cv = err
        .split("e.g. containerd_version: \"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let t = std::fs::read_to_string(&inv).unwrap().replace(
        "  kubernetes_version:",
        &format!("  containerd_version: \"{cv}\"\n  kubernetes_version:"),
    );
    std::fs::write(&inv, t).unwrap();
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{release} {cv}: {}", text(&o));
}
