//! The CLI contract without hosts: offline commands, bad input → exit 2 with
//! file:line:column, nothing contacted.

use crate::common;

use common::{kwinctl, text, write};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

/// The seed inventory and its kubeconfig in a folder of their own (the
/// folder lives as long as the first value).
fn seed_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("example.yaml");
    std::fs::copy(EXAMPLE, &inv).unwrap();
    std::fs::copy(
        EXAMPLE.replace("seed-1.5-transparent.yaml", "example.kubeconfig"),
        dir.path().join("example.kubeconfig"),
    )
    .unwrap();
    (dir, inv)
}

#[test]
fn check_prints_the_seed_plan() {
    let (dir, inv) = seed_copy();
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for (h, ip, cidr, gw) in [
        ("Lin01", "10.0.0.10", "192.168.0.0/24", "192.168.0.1"),
        ("Win01", "10.0.0.11", "192.168.1.0/24", "192.168.1.1"),
        ("Win02", "10.0.0.12", "192.168.2.0/24", "192.168.2.1"),
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!(" {h} ")))
            .unwrap_or_else(|| panic!("{h} missing:\n{out}"));
        for want in [ip, cidr, gw] {
            assert!(line.contains(want), "{line}");
        }
    }
    // offline: no state file is written by check
    assert!(!dir.path().join("example.kwinctl-state.json").exists());
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap(), "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["hosts"][1]["pod_cidr"], "192.168.1.0/24");
}

#[test]
fn render_gives_the_seed_routes_for_lin01() {
    let o = kwinctl(&["render", "-i", EXAMPLE, "--host", "lin01"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // set now (one `ip -batch`) and by boot.sh at boot (its list of
    // destination and next hop)
    for (dst, via) in [
        ("192.168.1.0/24", "10.0.0.11"),
        ("192.168.2.0/24", "10.0.0.12"),
    ] {
        assert!(
            out.contains(&format!("\nroute replace {dst} via {via} proto 198\n")),
            "{out}"
        );
        assert!(out.contains(&format!("\n{dst} {via}\n")), "{out}");
    }
    assert!(
        out.contains("echo 1 > /proc/sys/net/ipv4/ip_forward"),
        "{out}"
    );
    assert!(!out.contains("Win01 ("), "--host limits the output");
    // the rendered script is valid sh
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.sh");
    write(&f, &out);
    let st = std::process::Command::new("sh")
        .arg("-n")
        .arg(&f)
        .status()
        .unwrap();
    assert!(st.success(), "sh -n rejected the script");
    let o = kwinctl(&["render", "-i", EXAMPLE, "--host", "win01"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("New-VMSwitch -Name 'KubeProxySwitch' -SwitchType Internal"),
        "{out}"
    );
}

fn bad(inv_text: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("bad.yaml");
    write(&inv, inv_text);
    let mut a = args.to_vec();
    let p = inv.to_str().unwrap().to_string();
    a.extend(["-i", &p]);
    let o = kwinctl(&a);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!dir.path().join("bad.kwinctl-state.json").exists());
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A key file (its contents are not read before connecting), in a folder
/// that lives as long as the first value.
fn a_key() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("id");
    write(&key, "not read before connecting\n");
    let p = key.to_str().unwrap().to_string();
    (dir, p)
}

const GOOD: &str = "\
cluster:
  name: demo
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
  api_server: https://198.18.9.2:6443
defaults:
  ssh: { known_hosts: /nonexistent/known_hosts, identity: /nonexistent/id }
hosts:
  - name: a
    os: linux
    address: 198.18.9.2
  - name: b
    os: linux
    address: 198.18.9.3
";

#[test]
fn bad_inventories_exit_2_with_file_line_column() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "    os: linux\n    address: 198.18.9.3",
            "    os: linux\n    adress: 198.18.9.3",
            ":14:5: unknown field `adress`",
        ),
        ("name: b", "name: a", ":12:11: duplicate host name"),
        ("198.18.9.3", "198.18.9.2", ":14:14: duplicate address"),
        (
            "198.19.0.0/16",
            "198.19.0.0/24",
            ":3:17: 2 hosts do not fit",
        ),
        ("198.18.240.0/20", "198.19.128.0/17", ":4:17: service_cidr"),
        (
            "address: 198.18.9.3",
            "address: 198.19.3.3",
            ":14:14: host b address 198.19.3.3 is inside the cluster CIDR",
        ),
        (
            "address: 198.18.9.3",
            "address: 198.18.9.3\n    pod_cidr: 10.0.0.0/24",
            ":15:15: host b pod_cidr 10.0.0.0/24 is outside",
        ),
        (
            "address: 198.18.9.3",
            "address: 999.1.1.1",
            "not an IPv4 address",
        ),
        ("cluster:", "cluster: [", ":"),
        (
            "  ssh: { known_hosts",
            "  ssh: { port: twenty-two, known_hosts",
            ":7:16: invalid u16",
        ),
        (
            "name: b",
            "name: \"b'; rm -rf /\"",
            ":12:11: host name \"b'; rm -rf /\" is not a valid name",
        ),
        ("name: demo", "name: \"$(reboot)\"", ":2:9: cluster name"),
        (
            "address: 198.18.9.3",
            "address: 127.0.0.1",
            ":14:14: address 127.0.0.1 cannot be a node address",
        ),
        (
            "address: 198.18.9.3",
            "address: 169.254.1.1",
            ":14:14: address 169.254.1.1 cannot be a node address",
        ),
    ];
    for (from, to, want) in cases {
        let text = GOOD.replacen(from, to, 1);
        assert_ne!(text, GOOD, "{from}");
        let err = bad(&text, &["check"]);
        assert!(err.contains("bad.yaml"), "{err}");
        assert!(err.contains(want), "want {want:?} in:\n{err}");
        assert!(err.contains("fix:"), "no hint:\n{err}");
    }
    // empty host list
    let text = GOOD.split("\nhosts:").next().unwrap().to_string() + "\nhosts: []\n";
    assert!(bad(&text, &["check"]).contains("empty"));
}

#[test]
fn missing_identity_is_bad_input_before_contacting_anything() {
    let err = bad(GOOD, &["verify"]);
    assert!(
        err.contains("identity file /nonexistent/id cannot be read"),
        "{err}"
    );
    // --limit naming an unknown host
    let (_keys, key) = a_key();
    let good_id = GOOD.replace("identity: /nonexistent/id", &format!("identity: {key}"));
    let err = bad(&good_id, &["plan", "--limit", "zz"]);
    assert!(err.contains("\"zz\""), "{err}");
}

#[test]
fn unset_winrm_password_variable_is_bad_input() {
    // (a Windows host needs a release; 1.7 still takes --api-servers, so an
    // http API server needs no kubeconfig)
    let (_keys, key) = a_key();
    let inv_text = GOOD
        .replace("identity: /nonexistent/id", &format!("identity: {key}"))
        .replace(
            "api_server: https://198.18.9.2:6443",
            "api_server: http://198.18.9.2:8080\n  kubernetes_version: \"1.7.16\"",
        )
        + "  - name: w\n    os: windows\n    address: 198.18.9.4\n    winrm: { password_env: KWINCTL_TEST_UNSET_PW }\n";
    let err = bad(&inv_text, &["verify"]);
    assert!(err.contains("KWINCTL_TEST_UNSET_PW is not set"), "{err}");
    assert!(err.contains("bad.yaml:16:5"), "{err}");
    // check is offline: it passes, but warns with the position, and
    // --strict fails on it
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("ok.yaml");
    write(&inv, &inv_text);
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", common::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: ")
            && err.contains(
                "ok.yaml:16:5: host w: the WinRM password variable KWINCTL_TEST_UNSET_PW is not set"
            )
            && err.contains("fix: export KWINCTL_TEST_UNSET_PW=..."),
        "{err}"
    );
    let o = kwinctl(&["check", "--strict", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", common::text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("KWINCTL_TEST_UNSET_PW is not set"),
        "{}",
        common::text(&o)
    );
    // set, it is neither
    let o = common::kwinctl_env(
        &["check", "--strict", "-i", inv.to_str().unwrap()],
        &[("KWINCTL_TEST_UNSET_PW", "x")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        common::text(&o)
    );
}

#[test]
fn usage_errors_exit_2() {
    let o = kwinctl(&["up"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for cmd in ["up", "reset", "verify", "check"] {
        let mut a = vec![cmd, "-i", "/nonexistent/dir/inv.yaml"];
        if cmd == "reset" {
            a.push("--yes");
        }
        let o = kwinctl(&a);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read inventory"));
    }
    let o = kwinctl(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn unknown_binary_names_are_refused_with_their_position() {
    let inv_text = GOOD.to_string()
        + "  - name: w\n    os: windows\n    address: 198.18.9.4\n    windows:\n      binaries:\n        kube_proxy: { url: https://x/kube-proxy.exe, sha256: aa }\n";
    let err = bad(&inv_text, &["check"]);
    assert!(
        err.contains("bad.yaml:20:9: unknown field `kube_proxy`"),
        "{err}"
    );
    assert!(
        err.contains("kube-proxy"),
        "the message names what is expected: {err}"
    );
    assert!(err.contains("fix:"), "{err}");
}

#[test]
fn a_huge_value_is_never_echoed_whole() {
    let name = "n".repeat(100_000);
    let text = GOOD.replacen("name: b", &format!("name: {name}"), 1);
    let err = bad(&text, &["check"]);
    assert!(
        err.contains("(100000 characters)"),
        "{}",
        &err[..err.len().min(300)]
    );
    assert!(err.len() < 1000, "the error is {} bytes", err.len());
}

/// A binary of any size from the operator's machine is pushed before the
/// script, not carried inside it: the script copies it from where the push
/// leaves it, named by its SHA-256 (a sparse 40 MiB file: over the 32 MiB
/// that uploads inside the script were once capped at, no disk used).
#[test]
fn a_binary_of_any_size_is_pushed_not_carried_in_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("kubelet.exe");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(40 << 20)
        .unwrap();
    let sha = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(vec![0u8; 40 << 20]);
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let inv = dir.path().join("inv.yaml");
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inventories/seed-1.5-transparent.yaml"
    ))
    .unwrap()
    .replace(
        "  kubeconfig: example.kubeconfig",
        concat!(
            "  kubeconfig: ",
            env!("CARGO_MANIFEST_DIR"),
            "/inventories/example.kubeconfig"
        ),
    )
    .replace(
        "    address: 10.0.0.11\n",
        &format!(
            "    address: 10.0.0.11\n    windows: {{ binaries: {{ kubelet: {{ path: {} }} }} }}\n",
            big.display()
        ),
    );
    std::fs::write(&inv, yaml).unwrap();
    let o = kwinctl(&["render", "-i", inv.to_str().unwrap(), "--host", "Win01"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let script = String::from_utf8_lossy(&o.stdout);
    assert!(
        script.contains(&format!(
            r"Copy-Item -Force -LiteralPath 'C:\ProgramData\kwinctl\push\{sha}' -Destination $tmp"
        )),
        "{}",
        &script[..script.len().min(3000)]
    );
    assert!(script.len() < 1 << 20, "{} bytes", script.len());
}

/// `api_server` is what Windows nodes' kubelet and kube-proxy talk to:
/// a Linux-only cluster needs none, a Windows node does (exit 2, where).
#[test]
fn api_server_is_required_only_where_a_node_uses_it() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("linux.yaml");
    write(
        &inv,
        &GOOD.replace("  api_server: https://198.18.9.2:6443\n", ""),
    );
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let windows = GOOD
        .replace(
            "  api_server: https://198.18.9.2:6443\n",
            "  kubernetes_version: \"1.13.12\"\n",
        )
        .replace(
            "  - name: b\n    os: linux",
            "  - name: b\n    os: windows\n    winrm: { user: a, password_env: HOME }",
        );
    let e = bad(&windows, &["check"]);
    assert!(
        e.contains(":2:9: cluster.api_server is required: host b is a Windows node")
            && e.contains("fix: add `api_server: https://HOST:6443`"),
        "{e}"
    );
}

/// `kwinctl ARGS` with stdout sent to /dev/full (every write fails with
/// ENOSPC, as on a full disk).
fn to_dev_full(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("\"$0\" \"$@\" >/dev/full")
        .arg(common::bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    common::run_bounded(cmd, std::time::Duration::from_secs(60))
}

#[test]
fn output_that_cannot_be_written_is_not_success() {
    let (_dir, inv) = seed_copy();
    let inv = inv.to_str().unwrap();
    let ansible = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ansible/hosts.ini");
    for args in [
        vec!["check", "-i", inv],
        vec!["check", "-i", inv, "--output", "json"],
        vec!["render", "-i", inv],
        vec!["import", "ansible", ansible],
    ] {
        let o = to_dev_full(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {err}");
        assert!(
            err.contains("cannot write") && err.contains("No space left"),
            "{err}"
        );
        assert!(
            !err.contains("imported") && !err.contains("please report"),
            "{err}"
        );
    }
}

#[test]
fn a_kubeconfig_that_is_a_device_or_a_pipe_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kc.fifo");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    for kc in ["/dev/zero", fifo.to_str().unwrap()] {
        let inv = dir.path().join("inv.yaml");
        write(
            &inv,
            &example.replace(
                "kubeconfig: example.kubeconfig",
                &format!("kubeconfig: {kc}"),
            ),
        );
        let start = std::time::Instant::now();
        let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{kc}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("not a regular file"),
            "{}",
            text(&o)
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "{kc}");
    }
}
