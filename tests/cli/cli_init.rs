//! `kwinctl init`: a commented l2bridge inventory from flags; `check` names
//! every placeholder left with its position, and passes once they are
//! filled in.

use crate::common;

use common::{kwinctl, kwinctl_env, text};

/// Write `written` to `inv` with its placeholders filled in: the `replace`
/// pairs, then every other FILL-IN as a distinct 64-digit hex value (a
/// SHA-256's shape).
fn fill_in(inv: &std::path::Path, written: &str, replace: &[(&str, &str)]) {
    let mut text = written.to_string();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    let filled: String = text
        .split("FILL-IN")
        .enumerate()
        .map(|(k, part)| {
            if k == 0 {
                part.to_string()
            } else {
                format!("{k:064x}{part}")
            }
        })
        .collect();
    std::fs::write(inv, filled).unwrap();
}

#[test]
fn init_writes_an_inventory_that_check_accepts_once_filled_in() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("cluster.yaml");
    let i = inv.to_str().unwrap();
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--linux",
        "10.0.0.20",
        "--windows",
        "10.0.0.30",
        "10.0.0.31",
        "-o",
        i,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("next: "),
        "{}",
        text(&o)
    );
    let written = std::fs::read_to_string(&inv).unwrap();
    for want in [
        "api_server: https://10.0.0.10:6443",
        "name: win2",
        "address: 10.0.0.31",
        "containerd_version:",
        "kube-log-runner:",
        "cni-plugins:",
        "password_env: KWINCTL_WINRM_PASSWORD",
    ] {
        assert!(written.contains(want), "{want}\n{written}");
    }
    // never over an existing file
    let again = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--windows",
        "10.0.0.30",
        "-o",
        i,
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        text(&again).contains("does not overwrite"),
        "{}",
        text(&again)
    );
    assert_eq!(std::fs::read_to_string(&inv).unwrap(), written);

    // check names each placeholder, at its line and column
    let o = kwinctl(&["check", "-i", i]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("is still FILL-IN").count(), 7, "{err}");
    // each node joins with its own identity: no kubeconfig to fill in
    assert!(!written.contains("kubeconfig:"), "{written}");
    let line_of = |needle: &str| {
        written
            .lines()
            .position(|l| l.contains(needle))
            .map(|n| n + 1)
            .unwrap()
    };
    for (setting, line) in [
        (
            "defaults.windows.binaries.kubelet.sha256",
            line_of("kubelet: {"),
        ),
        (
            "defaults.windows.binaries.containerd.sha256",
            line_of("containerd: {"),
        ),
        ("hosts.win2.winrm.cert_sha256", written.lines().count()),
    ] {
        assert!(
            err.contains(&format!("cluster.yaml:{line}:"))
                && err.contains(&format!("{setting} is still FILL-IN")),
            "{setting} at line {line}:\n{err}"
        );
    }
    assert!(err.contains("fix: the file's SHA-256"), "{err}");

    // filled in, check passes (warning about the password variable), and
    // --strict passes once it is exported
    fill_in(&inv, &written, &[]);
    let o = kwinctl(&["check", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("KWINCTL_WINRM_PASSWORD is not set"),
        "{}",
        text(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for h in ["cp1", "lin1", "win1", "win2"] {
        assert!(out.contains(h), "{out}");
    }
    let o = kwinctl_env(
        &["check", "--strict", "-i", i],
        &[("KWINCTL_WINRM_PASSWORD", "a long enough password")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("FILL-IN"), "{}", text(&o));
}

#[test]
fn init_to_stdout_refuses_what_it_cannot_write() {
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--windows",
        "10.0.0.30",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("# kwinctl inventory, written by `kwinctl init`"),
        "{out}"
    );
    assert!(
        out.contains("windows_profile") || out.contains("l2bridge"),
        "{out}"
    );

    // no hosts and no terminal: say what to give
    let o = kwinctl(&["init"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--control-plane ADDR"), "{}", text(&o));
    // a release the profile does not run, an address given twice
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--windows",
        "10.0.0.30",
        "--kubernetes-version",
        "1.23.4",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("l2bridge"), "{}", text(&o));
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--windows",
        "10.0.0.10",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("given twice"), "{}", text(&o));
    // an address `check` refuses in the inventory (the reliability probe's
    // I3): refused before anything is written
    for bad in ["127.0.0.1", "169.254.1.1", "0.0.0.0"] {
        let o = kwinctl(&[
            "init",
            "--offline",
            "--control-plane",
            bad,
            "--windows",
            "10.0.0.30",
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("{bad} cannot be a node address")),
            "{}",
            text(&o)
        );
        assert!(o.stdout.is_empty(), "{bad}: an inventory was written");
    }
    // an older release gets no kube-log-runner (it would be refused)
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.10",
        "--windows",
        "10.0.0.30",
        "--kubernetes-version",
        "1.25.16",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("kube-log-runner:"));
}

/// `--windows-access kerberos` and `ssh`: the Windows hosts' connection is
/// what those transports need, `check` names their placeholders (the
/// principal, each host's service principal), and accepts the inventory
/// once they are filled in, asking for no WinRM password.
#[test]
fn init_writes_kerberos_and_ssh_inventories_that_check_accepts() {
    for (access, wants, placeholders) in [
        (
            "kerberos",
            &[
                "auth: kerberos",
                "spn: HTTP/FILL-IN",
                "cert_sha256: FILL-IN",
            ][..],
            &["defaults.winrm.user", "hosts.win1.winrm.spn"][..],
        ),
        ("ssh", &["ssh: { user: Administrator }"][..], &[][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let inv = dir.path().join("cluster.yaml");
        let i = inv.to_str().unwrap();
        let o = kwinctl(&[
            "init",
            "--offline",
            "--control-plane",
            "10.0.0.10",
            "--windows",
            "10.0.0.30",
            "--windows-access",
            access,
            "-o",
            i,
        ]);
        assert_eq!(o.status.code(), Some(0), "{access}: {}", text(&o));
        let written = std::fs::read_to_string(&inv).unwrap();
        for want in wants {
            assert!(written.contains(want), "{access}: {want}\n{written}");
        }
        assert!(!written.contains("password_env"), "{access}\n{written}");
        if access == "ssh" {
            assert!(!written.contains("winrm:"), "{written}");
        }
        let o = kwinctl(&["check", "-i", i]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        for p in placeholders {
            assert!(
                text(&o).contains(&format!("{p} is still FILL-IN")),
                "{access}: {p}\n{}",
                text(&o)
            );
        }
        fill_in(
            &inv,
            &written,
            &[
                ("user: FILL-IN", "user: kwinctl@CORP.EXAMPLE"),
                ("HTTP/FILL-IN", "HTTP/win1.corp.example"),
            ],
        );
        let o = kwinctl(&["check", "--strict", "-i", i]);
        assert_eq!(o.status.code(), Some(0), "{access}: {}", text(&o));
        assert!(!text(&o).contains("PASSWORD"), "{access}: {}", text(&o));
    }
}
