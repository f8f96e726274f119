//! SSH as OpenSSH does it, end to end on lab hosts: ProxyJump from
//! ssh_config (one hop and two; plan, -v and the run record show the
//! chain), the inventory's bastion (one connection
//! shared by every host behind it; a wrong bastion key fails naming the
//! bastion), WinRM through a bastion, `Match` before `Host` going to the
//! right host, keys from ssh-agent as OpenSSH picks them, and known_hosts
//! as OpenSSH reads and writes it. Hosts "behind" another one sit on their
//! own veth pair inside it, with no route from here (`lab.sh hidden`).
//! Needs root; every lab is torn down on drop, also when a test fails.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::lab::{Lab, require_root};
use common::{kwinctl_env, text, write};

/// The lab's cluster block, then `defaults` and `hosts` (Linux) as given.
/// A Linux-only cluster needs no Kubernetes version or kubeconfig; without
/// them fbe0578, which knew neither, reads the file too
/// (`KWINCTL_TEST_BIN`).
fn inventory(lab: &Lab, defaults: &str, hosts: &str) -> PathBuf {
    let cluster = lab.linux_cluster_block();
    let p = lab.dir().join("ssh-test.yaml");
    write(&p, &format!("{cluster}{defaults}hosts:\n{hosts}"));
    p
}

fn linux_host(name: &str, ip: &str, extra: &str) -> String {
    format!("  - name: {name}\n    os: linux\n    address: {ip}\n{extra}")
}

fn key(lab: &Lab) -> String {
    lab.dir().join("id_ed25519").display().to_string()
}

fn kh(lab: &Lab) -> String {
    lab.dir().join("known_hosts").display().to_string()
}

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    kwinctl_env(args, env)
}

fn accepted(log: &str) -> usize {
    log.matches("Accepted publickey").count()
}

/// An ssh-agent for one test, killed on drop.
struct Agent {
    child: std::process::Child,
    sock: PathBuf,
}

impl Agent {
    fn start(dir: &Path) -> Agent {
        let sock = dir.join("agent.sock");
        let child = Command::new("ssh-agent")
            .args(["-D", "-a"])
            .arg(&sock)
            .stdout(Stdio::null())
            .spawn()
            .expect("ssh-agent");
        let a = Agent { child, sock };
        let start = Instant::now();
        while !a.sock.exists() {
            assert!(start.elapsed() < Duration::from_secs(5), "agent socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        a
    }
    fn sock(&self) -> &str {
        self.sock.to_str().unwrap()
    }
    /// `ssh-add` a key, with its passphrase when it has one.
    fn add(&self, key: &Path, pass: &str) {
        let askpass = key.with_extension("askpass");
        write(&askpass, &format!("#!/bin/sh\necho '{pass}'\n"));
        Command::new("chmod")
            .arg("700")
            .arg(&askpass)
            .status()
            .unwrap();
        let st = Command::new("ssh-add")
            .arg(key)
            .env("SSH_AUTH_SOCK", &self.sock)
            .env("SSH_ASKPASS", &askpass)
            .env("SSH_ASKPASS_REQUIRE", "force")
            .env("DISPLAY", "none")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "ssh-add {}", key.display());
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path, pass: &str) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", pass, "-C", "test", "-f"])
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// ProxyJump from ssh_config: one hop (p1 behind h1) and two (p2 behind p1,
/// `ProxyJump jump,p1`); one connection to the first jump host carries
/// both; `plan` shows each host's route. At fbe0578 ProxyJump was ignored
/// ("No route to host").
#[test]
fn proxyjump_from_ssh_config_one_and_two_hops() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let p1 = lab.hidden("p1", "h1", "linux");
    let p2 = lab.hidden("p2", "p1", "linux");
    let cfg = lab.dir().join("ssh_config");
    write(
        &cfg,
        &format!(
            "Host jump\n  HostName {h1}\nHost p1\n  HostName {p1}\n  ProxyJump jump\n\
             Host p2\n  HostName {p2}\n  ProxyJump jump,p1\n\
             Host *\n  IdentityFile {k}\n  UserKnownHostsFile {kh}\n",
            h1 = lab.ip("h1"),
            p1 = p1.ip,
            p2 = p2.ip,
            k = key(&lab),
            kh = kh(&lab)
        ),
    );
    let inv = inventory(
        &lab,
        "",
        &(linux_host("p1", &p1.ip.to_string(), "") + &linux_host("p2", &p2.ip.to_string(), "")),
    );
    let i = inv.to_str().unwrap();
    let o = run(
        &["plan", "-v", "-i", i, "--ssh-config", cfg.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let h1 = lab.ip("h1");
    let p1_route = format!("ssh root@{}:22 via root@{h1}:22", p1.ip);
    let p2_route = format!(
        "ssh root@{}:22 via root@{h1}:22 -> root@{}:22",
        p2.ip, p1.ip
    );
    // plan's text, -v's progress lines and the run record all say it
    for r in [&p1_route, &p2_route] {
        assert!(out.contains(&format!("connection: {r}\n")), "{out}");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("p1: {p1_route}\n")) && err.contains(&format!("p2: {p2_route}\n")),
        "{err}"
    );
    let record = err
        .lines()
        .find_map(|l| l.strip_prefix("run record (scripts and outputs per host): "))
        .expect("-v names the run record");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(record).join("summary.json")).unwrap(),
    )
    .unwrap();
    let routes: Vec<&str> = summary["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["route"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(routes, [p1_route.as_str(), p2_route.as_str()], "{summary}");
    // p2 was reached from p1's side of their link; h1 saw one connection
    // for both hosts behind it.
    let p2_log = lab.sshd_log("p2");
    let o = p2.ip.octets();
    let p1_side = format!("{}.{}.{}.1", o[0], o[1], o[2]);
    assert!(
        p2_log.contains(&format!("Accepted publickey for root from {p1_side}")),
        "{p2_log}"
    );
    assert_eq!(accepted(&lab.sshd_log("h1")), 1, "{}", lab.sshd_log("h1"));
}

/// The inventory's `ssh.bastion` (k0sctl's form): one connection to the
/// bastion for every host behind it; a bastion whose key is not the one on
/// record fails every host behind it, naming the bastion, and nothing
/// behind it is contacted. At fbe0578 `bastion` was an unknown field.
#[test]
fn inventory_bastion_shared_and_its_wrong_key_named() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let p1 = lab.hidden("p1", "h1", "linux");
    let p2 = lab.hidden("p2", "h1", "linux");
    let h1 = lab.ip("h1");
    let defaults = |khb: &str| {
        format!(
            "defaults:\n  ssh:\n    identity: {k}\n    known_hosts: {kh}\n    bastion: {{ address: {h1}, user: root, identity: {k}, known_hosts: {khb} }}\n",
            k = key(&lab),
            kh = kh(&lab)
        )
    };
    let hosts =
        linux_host("p1", &p1.ip.to_string(), "") + &linux_host("p2", &p2.ip.to_string(), "");
    let inv = inventory(&lab, &defaults(&kh(&lab)), &hosts);
    let i = inv.to_str().unwrap();
    let o = run(&["plan", "-i", i], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("via root@{h1}:22")),
        "{}",
        text(&o)
    );
    assert_eq!(accepted(&lab.sshd_log("h1")), 1, "{}", lab.sshd_log("h1"));
    let (p1_before, p2_before) = (accepted(&lab.sshd_log("p1")), accepted(&lab.sshd_log("p2")));

    // the bastion's entry now holds another host's key
    let text_kh = std::fs::read_to_string(kh(&lab)).unwrap();
    let p1_key = text_kh
        .lines()
        .find(|l| l.starts_with(&format!("{} ", p1.ip)))
        .unwrap()
        .split_once(' ')
        .unwrap()
        .1
        .to_string();
    let wrong = lab.dir().join("known_hosts.wrong");
    write(&wrong, &format!("{h1} {p1_key}\n"));
    let inv = inventory(&lab, &defaults(wrong.to_str().unwrap()), &hosts);
    let o = run(
        &["plan", "-i", inv.to_str().unwrap(), "--output", "json"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = common::summary(&o);
    for h in ["p1", "p2"] {
        let e = common::host(&s, h)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            e.contains(&format!("bastion {h1} (root@{h1}:22)")) && e.contains("HOST KEY MISMATCH"),
            "{h}: {e}"
        );
    }
    assert_eq!(
        accepted(&lab.sshd_log("h1")),
        1,
        "the bastion was logged into"
    );
    assert_eq!(accepted(&lab.sshd_log("p1")), p1_before);
    assert_eq!(accepted(&lab.sshd_log("p2")), p2_before);
}

/// A simulated Windows host behind a bastion: WinRM over a local SOCKS5
/// tunnel through the bastion's SSH connection, over HTTP and over HTTPS
/// with the host's CA (the certificate is checked against the host's own
/// address through the tunnel).
#[test]
fn winrm_through_a_bastion() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let w = lab.hidden("w1", "h1", "windows");
    let h1 = lab.ip("h1");
    let base = std::fs::read_to_string(lab.inventory()).unwrap();
    let sha = |s: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(s.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let win = |winrm: &str| {
        format!(
            "  - name: w1\n    os: windows\n    address: {}\n    winrm: {winrm}\n    windows:\n      binaries:\n\
             \x20       kubelet: {{ url: \"https://dl.lab.invalid/kubelet.exe\", sha256: {} }}\n\
             \x20       kube-proxy: {{ url: \"https://dl.lab.invalid/kube-proxy.exe\", sha256: {} }}\n",
            w.ip,
            sha("kubelet"),
            sha("kube-proxy")
        )
    };
    let bastion = format!(
        "bastion: {{ address: {h1}, identity: {}, known_hosts: {} }}",
        key(&lab),
        kh(&lab)
    );
    let pw = lab.dir().join("winrm-password");
    let hosts = base.split("hosts:\n").nth(1).unwrap().to_string();
    for winrm in [
        format!(
            "{{ port: 5985, tls: false, auth: ntlm, password_file: {}, {bastion} }}",
            pw.display()
        ),
        format!(
            "{{ port: 5986, tls: true, auth: ntlm, password_file: {}, ca_file: {}, {bastion} }}",
            pw.display(),
            lab.dir().join("hosts/w1/ca.pem").display()
        ),
    ] {
        let p = lab.dir().join("win.yaml");
        let defaults_and_cluster = base.split("hosts:\n").next().unwrap();
        write(
            &p,
            &format!("{defaults_and_cluster}hosts:\n{hosts}{}", win(&winrm)),
        );
        let o = run(&["plan", "-i", p.to_str().unwrap(), "--limit", "w1"], &[]);
        assert_eq!(o.status.code(), Some(0), "{winrm}\n{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("connection: winrm Administrator@{}:", w.ip))
                && out.contains(&format!("via root@{h1}:22")),
            "{out}"
        );
    }
    let log = std::fs::read_to_string(lab.dir().join("hosts/w1/winsim.log")).unwrap_or_default();
    assert!(!log.is_empty(), "winsim saw no request");
}

/// A `Match` block before the host's own `Host` block: OpenSSH (and now
/// kwinctl) connects to h1; at fbe0578 the Match lines were dropped into
/// the global block and kwinctl went to h2, as user nobody. Proved by the
/// targets' own sshd logs.
#[test]
fn match_before_host_goes_to_the_right_host() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let cfg = lab.dir().join("ssh_config");
    write(
        &cfg,
        &format!(
            "Match host some-other-host\n  HostName {h2}\n  User nobody\nHost node-a\n  HostName {h1}\n\
             Host *\n  IdentityFile {k}\n  UserKnownHostsFile {kh}\n",
            h1 = lab.ip("h1"),
            h2 = lab.ip("h2"),
            k = key(&lab),
            kh = kh(&lab)
        ),
    );
    let inv = inventory(&lab, "", &linux_host("node-a", &lab.ip("h1"), ""));
    let o = run(
        &[
            "plan",
            "-i",
            inv.to_str().unwrap(),
            "--ssh-config",
            cfg.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(accepted(&lab.sshd_log("h1")), 1, "{}", lab.sshd_log("h1"));
    let h2 = lab.sshd_log("h2");
    assert!(accepted(&h2) == 0 && !h2.contains("nobody"), "{h2}");
}

/// Keys as OpenSSH offers them: an encrypted IdentityFile whose key the
/// agent holds needs no passphrase (its public half is read from the
/// encrypted file); with 9 keys in the agent, `IdentitiesOnly` and
/// `IdentityFile x.pub` offer the one that works; a wrong passphrase is
/// named. At fbe0578: "The key is encrypted", "refused every key offered",
/// "SshKey: cryptographic error".
#[test]
fn agent_keys_picked_as_openssh_picks_them() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let d = lab.dir().join("keys");
    std::fs::create_dir_all(&d).unwrap();
    let enc = d.join("enc");
    keygen(&enc, "horse battery");
    // the lab's sshd reads authorized keys from the lab's .pub file
    let auth = lab.dir().join("id_ed25519.pub");
    let mut a = std::fs::read_to_string(&auth).unwrap();
    a.push_str(&std::fs::read_to_string(enc.with_extension("pub")).unwrap());
    write(&auth, &a);
    let pubcopy = d.join("only.pub");
    std::fs::copy(enc.with_extension("pub"), &pubcopy).unwrap();
    std::fs::remove_file(enc.with_extension("pub")).unwrap();
    let inv = inventory(&lab, "", &linux_host("h1", &lab.ip("h1"), ""));
    let i = inv.to_str().unwrap();
    let cfg = lab.dir().join("ssh_config");
    let config = |extra: &str, id: &Path| {
        write(
            &cfg,
            &format!(
                "Host *\n  IdentityFile {}\n  UserKnownHostsFile {}\n{extra}",
                id.display(),
                kh(&lab)
            ),
        );
        cfg.to_str().unwrap().to_string()
    };

    // no agent: a wrong passphrase says so
    let c = config("", &enc);
    let o = run(
        &["plan", "-i", i, "--ssh-config", &c],
        &[("KWINCTL_SSH_PASSPHRASE", "not the passphrase")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("wrong passphrase for {}", enc.display())),
        "{}",
        text(&o)
    );
    let who = format!("authentication failed for root@{}:22:", lab.ip("h1"));
    assert!(text(&o).contains(&who), "{}", text(&o));

    // the agent holds the key: no passphrase needed
    let agent = Agent::start(&d);
    agent.add(&enc, "horse battery");
    let o = run(
        &["plan", "-i", i, "--ssh-config", &c],
        &[("SSH_AUTH_SOCK", agent.sock())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // eight more keys in the agent, loaded first: without IdentitiesOnly the
    // server's MaxAuthTries (6) runs out; with it and the .pub, one key
    let agent = Agent::start(&d.join(".."));
    for n in 0..8 {
        let k = d.join(format!("other{n}"));
        keygen(&k, "");
        agent.add(&k, "");
    }
    agent.add(&enc, "horse battery");
    let o = run(
        &["plan", "-i", i, "--ssh-config", &config("", &pubcopy)],
        &[("SSH_AUTH_SOCK", agent.sock())],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = run(
        &[
            "plan",
            "-i",
            i,
            "--ssh-config",
            &config("  IdentitiesOnly yes\n", &pubcopy),
        ],
        &[("SSH_AUTH_SOCK", agent.sock())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// known_hosts as OpenSSH reads and writes it, against an sshd on port 2222
/// with a host certificate and one on 2223 with a plain key: `[host]:port`
/// names, hashed entries, `HostKeyAlias`, `@cert-authority`, `@revoked`, and
/// what `--accept-new-host-keys` / `StrictHostKeyChecking accept-new` write
/// (hashed under `HashKnownHosts yes`), which OpenSSH itself then accepts.
#[test]
fn known_hosts_as_openssh_reads_and_writes_it() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let h1 = lab.ip("h1");
    let ca = lab.dir().join("host_ca");
    keygen(&ca, "");
    lab.sshd_port("h1", 2222, Some(&ca));
    let plain = lab.sshd_port("h1", 2223, None);
    let ca_pub = std::fs::read_to_string(ca.with_extension("pub")).unwrap();
    let plain_pub = std::fs::read_to_string(plain.join("ssh_host_ed25519_key.pub")).unwrap();
    let plain_key = plain_pub.split(' ').take(2).collect::<Vec<_>>().join(" ");
    let cfg = lab.dir().join("ssh_config");
    let khf = lab.dir().join("kh.test");
    let plan = |name: &str, ssh: &str, config: &str, khtext: Option<&str>, extra: &[&str]| {
        if let Some(t) = khtext {
            write(&khf, t);
        }
        write(&cfg, config);
        let inv = inventory(
            &lab,
            "",
            &linux_host(
                name,
                &h1,
                &format!("    ssh: {{ identity: {}{ssh} }}\n", key(&lab)),
            ),
        );
        let mut args = vec![
            "plan",
            "-i",
            inv.to_str().unwrap(),
            "--ssh-config",
            cfg.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, &[])
    };
    let k = format!(", known_hosts: {}", khf.display());
    // a host certificate signed by an authority on record, by port
    let o = plan(
        "h1",
        &format!(", port: 2222{k}"),
        "",
        Some(&format!("@cert-authority [{h1}]:2222 {ca_pub}")),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // ... and refused once the authority is revoked
    let o = plan(
        "h1",
        &format!(", port: 2222{k}"),
        "",
        Some(&format!("@cert-authority * {ca_pub}@revoked * {ca_pub}")),
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("@revoked"), "{}", text(&o));
    // a hashed entry for [host]:2223, as `ssh-keyscan -H` writes it
    let scan = Command::new("ssh-keyscan")
        .args(["-H", "-p", "2223", "-t", "ed25519", &h1])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let hashed = String::from_utf8_lossy(&scan.stdout).into_owned();
    assert!(hashed.starts_with("|1|"), "{hashed}");
    let o = plan("h1", &format!(", port: 2223{k}"), "", Some(&hashed), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // nothing under [host]:2223: OpenSSH looks again under the bare name,
    // only to accept the key listed there (sshconnect.c check_host_key)
    let o = plan(
        "h1",
        &format!(", port: 2223{k}"),
        "",
        Some(&format!("{h1} {plain_key}\n")),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let other = ca_pub.split(' ').take(2).collect::<Vec<_>>().join(" ");
    let o = plan(
        "h1",
        &format!(", port: 2223{k}"),
        "",
        Some(&format!("{h1} {other}\n")),
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("unknown host key for [{h1}]:2223")),
        "{}",
        text(&o)
    );
    // HostKeyAlias: the key is looked up under the alias
    let o = plan(
        "web",
        "",
        &format!(
            "Host web\n  HostName {h1}\n  Port 2223\n  HostKeyAlias webalias\n  UserKnownHostsFile {}\n",
            khf.display()
        ),
        Some(&format!("webalias {plain_key}\n")),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // trust on first use writes a hashed line under HashKnownHosts yes ...
    let o = plan(
        "h1",
        &format!(", port: 2223{k}"),
        "Host *\n  HashKnownHosts yes\n",
        Some(""),
        &["--accept-new-host-keys"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let written = std::fs::read_to_string(&khf).unwrap();
    assert!(
        written.starts_with("|1|") && !written.contains(&h1),
        "{written}"
    );
    let found = Command::new("ssh-keygen")
        .args(["-F", &format!("[{h1}]:2223"), "-f"])
        .arg(&khf)
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "ssh-keygen -F does not find {written}"
    );
    // ... which OpenSSH accepts as it is
    let ssh = Command::new("ssh")
        .args([
            "-F",
            "none",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
        ])
        .arg(format!("UserKnownHostsFile={}", khf.display()))
        .args([
            "-i",
            &key(&lab),
            "-p",
            "2223",
            &format!("root@{h1}"),
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        ssh.status.success(),
        "{}",
        String::from_utf8_lossy(&ssh.stderr)
    );
    // StrictHostKeyChecking accept-new in ssh_config records too
    let o = plan(
        "h1",
        &format!(", port: 2223{k}"),
        "Host *\n  StrictHostKeyChecking accept-new\n",
        Some(""),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let written = std::fs::read_to_string(&khf).unwrap();
    assert!(
        written.starts_with(&format!("[{h1}]:2223 ssh-ed25519 ")),
        "{written}"
    );
}

/// A login user other than root, with real sudo(8) on the host: with
/// passwordless sudo for /bin/sh kwinctl works as that user; where sudo
/// wants a password, the host fails saying so and how to fix it (a
/// NOPASSWD rule, or root). At fbe0578: "the probe printed no facts".
#[test]
fn a_sudo_that_needs_a_password_is_named_with_the_fix() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    lab.user("h1", "ops", "nopasswd");
    lab.user("h2", "ops", "password");
    let defaults = format!(
        "defaults:\n  ssh:\n    user: ops\n    identity: {}\n    known_hosts: {}\n",
        key(&lab),
        kh(&lab)
    );
    // h2, where sudo wants a password
    let inv = inventory(&lab, &defaults, &linux_host("h2", &lab.ip("h2"), ""));
    let o = run(&["plan", "-i", inv.to_str().unwrap()], &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("sudo on h2 needs a password for ops")
            && t.contains("ops ALL=(root) NOPASSWD: /bin/sh"),
        "{t}"
    );
    assert!(lab.sshd_log("h2").contains("Accepted publickey for ops"));
    // h1 alone: planned as ops through sudo
    let inv = inventory(&lab, &defaults, &linux_host("h1", &lab.ip("h1"), ""));
    let o = run(&["plan", "-i", inv.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("connection: ssh ops@{}:22\n", lab.ip("h1"))),
        "{}",
        text(&o)
    );
    assert!(lab.sshd_log("h1").contains("Accepted publickey for ops"));
}
