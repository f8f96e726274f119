//! The l2bridge diff and kube-log-runner: the services behind it, the
//! runner's release, a host without it.

use super::*;

/// Kubernetes 1.30: kubelet and kube-proxy run behind kube-log-runner (no
/// klog file flags since 1.26), which this release cannot make rotate; a
/// host without the runner and no windows.binaries.kube-log-runner is
/// refused with where to get it.
#[test]
fn services_run_behind_kube_log_runner_and_a_missing_runner_is_refused() {
    let d = desired();
    for (s, log) in [
        (&d.services[1], r"C:\k\logs\kubelet.log"),
        (&d.services[2], r"C:\k\logs\kube-proxy.log"),
    ] {
        let exe = format!(r"C:\k\{}.exe", s.name);
        assert!(
            s.binpath.starts_with(&format!(
                r"C:\k\kube-log-runner.exe -log-file={log} {exe} --windows-service "
            )),
            "{}",
            s.binpath
        );
        assert!(!s.binpath.contains("-log-file-size"), "{}", s.binpath);
        // the start script's arguments stay the binary's own
        assert!(s.args.starts_with("--windows-service "), "{}", s.args);
    }
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("which cannot rotate them")),
        "{:?}",
        d.notes
    );
    assert!(
        d.required_files
            .iter()
            .any(|p| p.ends_with("kube-log-runner.exe"))
    );
    // no runner on the host and none in the inventory
    let mut f = fresh(&d);
    f.files.retain(|x| !x.path.ends_with("kube-log-runner.exe"));
    let e = diff(&node(), &d, &f).unwrap_err().to_string();
    assert!(
        e.contains(r"C:\k\kube-log-runner.exe is missing: add windows.binaries.kube-log-runner")
            && e.contains("https://dl.k8s.io/v1.30.4/bin/windows/amd64/kube-log-runner.exe"),
        "{e}"
    );
}

/// cluster.log_runner_version: a 1.34 runner in front of 1.30 binaries
/// rotates, and the plan has no note about unrotated logs.
#[test]
fn a_newer_log_runner_release_rotates_older_binaries_logs() {
    let d = desired_with("  log_runner_version: 1.34.2\n");
    assert!(
        d.services[1]
            .binpath
            .starts_with(r"C:\k\kube-log-runner.exe -log-file=C:\k\logs\kubelet.log -log-file-size=100M -log-file-age=168h -flush-interval=5s C:\k\kubelet.exe "),
        "{}",
        d.services[1].binpath
    );
    assert!(
        !d.notes.iter().any(|n| n.contains("cannot rotate")),
        "{:?}",
        d.notes
    );
    // the binaries' own release still decides their flags
    assert_eq!(d.kubernetes_version.to_string(), "1.30.4");
}
