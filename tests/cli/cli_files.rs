//! Files the inventory names on the operator's machine (issue 38, N9): an
//! SSH identity, a known_hosts file, a WinRM password file, a CA file, a
//! Kerberos keytab and a bastion's identity are each read only when they
//! are a regular file within their bound. A named pipe never hangs
//! kwinctl, `/dev/zero` never grows it, a folder and an oversized file are
//! refused at once, at the host's position in the inventory, with a fix.

use crate::common;

use common::{bin, run_bounded, text, write};

/// Two Linux hosts (one behind a bastion) and three Windows hosts (NTLM
/// with a password file, TLS with a CA file, Kerberos with a keytab); each
/// `@NAME@` is a file of the test's folder.
const INV: &str = "\
cluster:
  name: files
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
  api_server: http://198.18.9.2:8080
  kubernetes_version: \"1.7.16\"
hosts:
  - name: a
    os: linux
    address: 198.18.9.2
    role: control-plane
    ssh: { identity: @ID@, known_hosts: @KH@ }
  - name: b
    os: linux
    address: 198.18.9.3
    ssh:
      identity: @ID@
      bastion: { address: 198.18.9.2, identity: @BID@ }
  - name: w
    os: windows
    address: 198.18.9.4
    winrm: { tls: false, password_file: @PW@ }
  - name: t
    os: windows
    address: 198.18.9.5
    winrm: { password_file: @PW@, ca_file: @CA@ }
  - name: k
    os: windows
    address: 198.18.9.6
    winrm: { auth: kerberos, user: k@R.EX, keytab: @KT@ }
";

/// The key of each file, the host whose position the problem carries, and
/// its line:column in [`INV`].
const FIELDS: &[(&str, &str, &str)] = &[
    ("ID", "identity file", ":8:5: host a"),
    ("KH", "ssh.known_hosts", ":8:5: host a"),
    ("BID", "bastion identity file", ":18:16: host b"),
    ("PW", "WinRM password file", ":19:5: host w"),
    ("CA", "CA file", ":23:5: host t"),
    ("KT", "Kerberos keytab", ":27:5: host k"),
];

/// `kwinctl ARGS` with at most 4 GiB of address space: code that reads
/// /dev/zero to its end fails here instead of taking the machine's memory.
fn capped(args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 4194304; exec \"$0\" \"$@\"")
        .arg(bin())
        .args(args)
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("KRB5CCNAME");
    run_bounded(cmd, std::time::Duration::from_secs(60))
}

#[test]
fn a_pipe_a_device_a_folder_or_an_oversized_file_is_refused_at_once_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for f in ["ID", "KH", "BID", "PW", "CA", "KT"] {
        write(&d.join(f), &format!("test content of {f}\n"));
    }
    let fifo = d.join("fifo");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    let folder = d.join("folder");
    std::fs::create_dir(&folder).unwrap();
    // 80 MiB, sparse: over every bound of these kinds (known_hosts: 64 MiB)
    let big = d.join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(80 << 20)
        .unwrap();
    let fill = |bad_key: &str, bad: &str| {
        let mut t = INV.to_string();
        for (k, ..) in FIELDS {
            let v = if *k == bad_key {
                bad.to_string()
            } else {
                d.join(k).display().to_string()
            };
            t = t.replace(&format!("@{k}@"), &v);
        }
        t
    };
    // the inventory is good as it is
    let inv = d.join("inv.yaml");
    write(&inv, &fill("", ""));
    let i = inv.to_str().unwrap();
    let o = capped(&["check", "--strict", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let bads = [
        (
            fifo.display().to_string(),
            "it is a named pipe, not a regular file",
        ),
        (
            "/dev/zero".to_string(),
            "it is a device, not a regular file",
        ),
        (
            folder.display().to_string(),
            "it is a folder, not a regular file",
        ),
        (big.display().to_string(), "it is larger than"),
    ];
    for (key, what, at) in FIELDS {
        for (bad, why) in &bads {
            write(&inv, &fill(key, bad));
            for args in [&["check", "--strict"][..], &["plan"][..]] {
                let start = std::time::Instant::now();
                let mut a = args.to_vec();
                a.extend(["-i", i]);
                let o = capped(&a);
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(
                    o.status.code(),
                    Some(2),
                    "{key}={bad} {args:?}: {}",
                    text(&o)
                );
                assert!(
                    err.contains(&format!("inv.yaml{at}: "))
                        && err.contains(what)
                        && err.contains(&format!("{bad} cannot be read: {why}")),
                    "{key}={bad} {args:?}: {err}"
                );
                assert!(err.contains("fix: point "), "{err}");
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(20),
                    "{key}={bad} {args:?}: {:?}",
                    start.elapsed()
                );
            }
        }
    }
    // `check` without --strict warns about the same, and does not hang
    write(&inv, &fill("PW", fifo.to_str().unwrap()));
    let o = capped(&["check", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("warning: "),
        "{}",
        text(&o)
    );
}

/// The inventory itself, and the kubeconfig it names, are bounded the same
/// way (the kubeconfig was before; the inventory was read to its end).
#[test]
fn an_inventory_that_is_a_device_or_a_pipe_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("inv.fifo");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    for inv in ["/dev/zero", fifo.to_str().unwrap()] {
        let o = capped(&["check", "-i", inv]);
        assert_eq!(o.status.code(), Some(2), "{inv}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("not a regular file"),
            "{}",
            text(&o)
        );
    }
}
