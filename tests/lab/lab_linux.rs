//! End to end on real Linux hosts: network namespaces on a bridge, each with
//! its own OpenSSH server (see `lab/lab.sh`). Needs root; run by `.ci/run`.

use crate::common;

use common::lab::{Lab, require_root};
use common::{count, host, kwinctl, summary, text, write};

/// Remove one host's entry from an inventory file.
fn drop_host(path: &std::path::Path, name: &str) {
    let s = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut skipping = false;
    for line in s.lines() {
        if line.trim_start().starts_with("- name:") {
            skipping = line.trim_start() == format!("- name: {name}");
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert_ne!(s, out, "host {name} not found in inventory");
    write(path, &out);
}

#[test]
fn up_verify_rerun_reboot_repair_and_node_removal() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    // while a lab is up, its addresses cannot leave this machine
    let guard = std::process::Command::new("ip")
        .args(["-4", "route", "show", "exact", "198.18.0.0/15"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&guard.stdout).starts_with("unreachable 198.18.0.0/15"),
        "no guard route: {guard:?}"
    );

    // plan changes nothing
    let o = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(count(host(&s, "h1"), "planned"), 6, "{s}"); // record, forward, 3 routes, boot.sh
    assert!(!lab.routes("h1").contains("198.19."), "plan changed routes");

    // up converges and verifies
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in ["h1", "h2", "h3", "h4"] {
        assert_eq!(host(&s, h)["status"], "changed", "{s}");
        assert_eq!(count(host(&s, h), "changed"), 6, "{s}");
    }
    // real routes, with kwinctl's proto, to every other node's pod CIDR
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    for me in lab.hosts() {
        let routes = lab.routes(&me.name);
        for other in lab.hosts().iter().filter(|o| o.name != me.name) {
            let cidr = state["pod_cidrs"][&other.name].as_str().unwrap();
            let want = format!("{cidr} via {} dev eth0 proto 198", other.ip);
            assert!(
                routes.contains(&want),
                "{} lacks `{want}`:\n{routes}",
                me.name
            );
        }
        let fwd = lab.exec(&me.name, "cat /proc/sys/net/ipv4/ip_forward");
        assert_eq!(String::from_utf8_lossy(&fwd.stdout).trim(), "1");
    }

    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // a second up changes nothing
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["changed"], 0, "{s}");
    // ... with one remote call per host: the probe, with reachability
    let last: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-last-up.json")).unwrap(),
    )
    .unwrap();
    let record = std::fs::read_to_string(
        lab.dir()
            .join(last["run_dir"].as_str().unwrap())
            .join("h2.log"),
    )
    .unwrap();
    let calls: Vec<&str> = record.lines().filter(|l| l.starts_with("##### ")).collect();
    assert_eq!(calls, ["##### probe"], "{record}");
    // the run record's summary is the JSON output's last line
    let kept: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            lab.dir()
                .join(last["run_dir"].as_str().unwrap())
                .join("summary.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(kept, s);
    assert!(record.contains("KWF reach "), "{record}");
    // ... and that one call still checks: with h1 dropping whatever goes to
    // h2 (h2's answers included), up changes nothing and fails both
    let block = format!("ip route add blackhole {}/32", lab.ip("h2"));
    assert!(lab.exec("h1", &block).status.success());
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["changed"], 0, "{s}");
    assert_eq!(s["failed_hosts"], serde_json::json!(["h1", "h2"]), "{s}");
    for (me, peer) in [("h1", "h2"), ("h2", "h1")] {
        let failed = common::failed_checks(host(&s, me));
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(
            failed[0].starts_with(&format!("reach {peer} ")),
            "{failed:?}"
        );
    }
    let unblock = format!("ip route del blackhole {}/32", lab.ip("h2"));
    assert!(lab.exec("h1", &unblock).status.success());

    // reboot h3: routes and forwarding gone, sshd restarted
    lab.reboot("h3");
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h3"]), "{s}");
    let h3 = host(&s, "h3");
    let failed = common::failed_checks(h3);
    assert_eq!(failed.len(), 4, "{failed:?}"); // forwarding + 3 routes
    assert!(
        failed.iter().any(|f| f.starts_with("ip-forward")),
        "{failed:?}"
    );
    // a lost route is said as the whole mesh's check says it: whose
    // block, via which address, and that `up` adds it
    assert!(
        failed.iter().any(|f| f.contains(&format!(
            "h3 has no route to h1's block 198.19.0.0/24 via {}",
            lab.ip("h1")
        )) && f.contains("`kwinctl up` adds it")),
        "{failed:?}"
    );
    // the text report names host, check and what was found
    let o = kwinctl(&["verify", "-i", &i]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("h3 ("), "{out}");
    assert!(
        out.contains("FAIL ip-forward: net.ipv4.ip_forward is 0"),
        "{out}"
    );

    // up repairs exactly what the reboot lost, on h3 only
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(count(host(&s, "h3"), "changed"), 4, "{s}");
    for h in ["h1", "h2", "h4"] {
        assert_eq!(count(host(&s, h), "changed"), 0, "{s}");
    }
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // somebody else's route inside the cluster CIDR is left alone
    let foreign = format!(
        "ip route add 198.19.250.0/24 via {} proto static",
        lab.ip("h2")
    );
    assert!(lab.exec("h1", &foreign).status.success());

    // h4 leaves the inventory: the others drop their routes to it
    let h4_cidr = state["pod_cidrs"]["h4"].as_str().unwrap().to_string();
    drop_host(lab.inventory(), "h4");
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in ["h1", "h2", "h3"] {
        let hs = host(&s, h);
        assert_eq!(count(hs, "changed"), 2, "{s}"); // stale route + boot.sh
        let routes = lab.routes(h);
        assert!(
            !routes.contains(&h4_cidr),
            "{h} still routes to {h4_cidr}:\n{routes}"
        );
    }
    assert!(
        lab.routes("h1").contains("198.19.250.0/24"),
        "foreign route removed"
    );
    // the removed node's routes are untouched (it is no longer managed)
    assert!(lab.routes("h4").contains("proto 198"));
}

#[test]
fn changed_host_key_fails_that_host_only() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // h2 is reinstalled (new host key, no routes); h1 lost a route
    lab.rekey("h2");
    assert!(lab.exec("h2", "ip route flush proto 198").status.success());
    assert!(lab.exec("h1", "ip route flush proto 198").status.success());
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h2"]), "{s}");
    let err = host(&s, "h2")["error"].as_str().unwrap();
    assert!(err.contains("HOST KEY MISMATCH"), "{err}");
    // both fingerprints named
    assert_eq!(err.matches("SHA256:").count(), 2, "{err}");
    assert_eq!(host(&s, "h1")["status"], "changed", "{s}");
    assert_eq!(host(&s, "h3")["status"], "ok", "{s}");
    // nothing was run on h2
    assert!(!lab.routes("h2").contains("proto 198"));
}

#[test]
fn unknown_host_keys_refused_unless_trusted_on_first_use() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let kh = lab.dir().join("known_hosts");
    let good = std::fs::read_to_string(&kh).unwrap();
    write(&kh, "");
    let i = lab.inv();
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let err = host(&s, "h1")["error"].as_str().unwrap();
    assert!(err.contains("unknown host key"), "{err}");
    assert!(err.contains("--accept-new-host-keys"), "{err}");

    let o = kwinctl(&["up", "-i", &i, "--accept-new-host-keys"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let learned = std::fs::read_to_string(&kh).unwrap();
    for h in lab.hosts() {
        let ip = h.ip.to_string();
        assert!(learned.contains(&ip), "{ip} not recorded:\n{learned}");
        let want = good
            .lines()
            .find(|l| l.starts_with(&format!("{ip} ")))
            .unwrap();
        let key = want.split_whitespace().nth(2).unwrap();
        assert!(learned.contains(key), "recorded a different key for {ip}");
    }
    // now known: plain verify works
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn state_conflict_limit_and_reset() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    // --limit: only h1 and h2 are touched; h3, left without routes to
    // them, is named (never a silent success)
    let o = kwinctl(&[
        "up",
        "-i",
        &i,
        "--limit",
        "h1,h2",
        "--parallel",
        "1",
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h3"]), "{s}");
    assert!(
        host(&s, "h3")["error"]
            .as_str()
            .unwrap()
            .contains("--with-peer-routes"),
        "{s}"
    );
    assert!(lab.routes("h1").contains("proto 198"));
    assert!(!lab.routes("h3").contains("proto 198"));
    // unknown --limit host: bad input, exit 2
    let o = kwinctl(&["plan", "-i", &i, "--limit", "nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"nope\""));

    // the state file and h1's own record disagree: the node's record wins,
    // h1 is not changed, and the state file learns it
    let sp = lab.dir().join("inventory.kwinctl-state.json");
    let mut st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    st["pod_cidrs"]["h1"] = "198.19.77.0/24".into();
    write(&sp, &st.to_string());
    let before = lab.routes("h1");
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "h1")["status"], "ok", "{s}");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("h1: the node records 198.19.0.0/24; the state file had 198.19.77.0/24"),
        "{}",
        text(&o)
    );
    assert_eq!(lab.routes("h1"), before, "h1 was changed");
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    assert_eq!(st["pod_cidrs"]["h1"], "198.19.0.0/24");

    // reset removes kwinctl's routes and files, and nothing else
    let foreign = format!(
        "ip route add 198.19.251.0/24 via {} proto static",
        lab.ip("h1")
    );
    assert!(lab.exec("h2", &foreign).status.success());
    let o = kwinctl(&["reset", "--yes", "-i", &i, "--limit", "h2,h3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for h in ["h2", "h3"] {
        assert!(
            !lab.routes(h).contains("proto 198"),
            "{h}: {}",
            lab.routes(h)
        );
        let files = lab.exec(h, "ls /etc/kwinctl");
        assert_eq!(String::from_utf8_lossy(&files.stdout).trim(), "", "{h}");
    }
    assert!(
        lab.routes("h2").contains("198.19.251.0/24"),
        "reset removed a foreign route"
    );
}

#[test]
fn keys_from_ssh_agent_and_ssh_config() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let key = lab.dir().join("id_ed25519");
    // an inventory with no identity: kwinctl must find the key itself
    let inv_text = std::fs::read_to_string(lab.inventory())
        .unwrap()
        .replace(&format!("identity: {}, ", key.display()), "");
    assert!(!inv_text.contains("identity"), "{inv_text}");
    write(lab.inventory(), &inv_text);
    let i = lab.inv();
    let home = tempfile::tempdir().unwrap();
    let home_s = home.path().to_string_lossy().into_owned();

    // no agent, no config, no default keys: a clear authentication error
    let o = common::kwinctl_env(&["verify", "-i", &i], &[("HOME", &home_s)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no key to offer"), "{}", text(&o));

    // ~/.ssh/config: HostName and IdentityFile per host alias
    let cfg = home.path().join("ssh_config");
    let mut c = String::new();
    for h in lab.hosts() {
        c += &format!(
            "Host {}\n  HostName {}\n  IdentityFile {}\n",
            h.name,
            h.ip,
            key.display()
        );
    }
    write(&cfg, &c);
    let o = common::kwinctl_env(
        &["up", "-i", &i, "--ssh-config", cfg.to_str().unwrap()],
        &[("HOME", &home_s)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // ssh-agent holding the key
    let sock = home.path().join("agent.sock");
    let agent = std::process::Command::new("ssh-agent")
        .args(["-D", "-a"])
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _agent = Kill(agent);
    let start = std::time::Instant::now();
    while !sock.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "agent socket"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = std::process::Command::new("ssh-add")
        .arg(&key)
        .env("SSH_AUTH_SOCK", &sock)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let o = common::kwinctl_env(
        &["verify", "-i", &i],
        &[("HOME", &home_s), ("SSH_AUTH_SOCK", sock.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn transient_refusal_is_retried_but_host_key_mismatch_is_not() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    lab.stop_sshd("h2");
    let dir = lab.dir().to_path_buf();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        let o = std::process::Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/lab/lab.sh"))
            .args(["start-sshd", dir.to_str().unwrap(), "h2"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    });
    let o = kwinctl(&["up", "-i", &i, "--retries", "5", "-v", "--output", "json"]);
    starter.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("\"phase\"") && l.contains("\"h2\"") && l.contains("retry 1/5")),
        "no retry reported:\n{out}"
    );

    lab.rekey("h2");
    let o = kwinctl(&[
        "verify",
        "-i",
        &i,
        "--retries",
        "5",
        "-v",
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("retry 1/5"),
        "a host key mismatch was retried:\n{out}"
    );
}

/// `lab.sh down` ends every process of the lab (sshds, their sessions, the
/// simulated Windows host) and removes its namespaces.
#[test]
fn lab_down_leaves_no_process_or_namespace() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let dir = lab.dir().display().to_string();
    let netns: Vec<String> = lab.hosts().iter().map(|h| h.netns.clone()).collect();
    let alive = || {
        let o = std::process::Command::new("pgrep")
            .args(["-f", &dir])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    assert!(alive() >= 3, "the lab's servers are not running");
    let o = lab.down();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(alive(), 0, "processes outlive lab.sh down");
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for ns in &netns {
        assert!(
            !list
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "{ns} is still there"
        );
    }
}

/// The probe reads boot.sh's hash from the one kwinctl recorded beside it
/// when it wrote it (no `sha256sum` process on every run), unless boot.sh
/// changed after that: a hand edit is still found and repaired.
#[test]
fn boot_script_drift_is_found_through_its_recorded_hash() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let boot_drift = |o: &std::process::Output| {
        let s = summary(o);
        common::failed_checks(host(&s, "h1"))
            .iter()
            .any(|c| c.starts_with("boot script"))
    };
    // the recorded hash is what the probe goes by while boot.sh is older
    let o = lab.exec(
        "h1",
        "sha256sum < /etc/kwinctl/boot.sh | cut -d' ' -f1 | cmp -s - /etc/kwinctl/boot.sh.sha256",
    );
    assert!(o.status.success(), "no recorded hash beside boot.sh");
    let o = lab.exec("h1", "echo 0000 > /etc/kwinctl/boot.sh.sha256");
    assert!(o.status.success());
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(boot_drift(&o), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(
        count(host(&summary(&o), "h1"), "changed"),
        1,
        "{}",
        text(&o)
    );
    // a hand edit makes boot.sh newer than its recorded hash: hashed again
    std::thread::sleep(std::time::Duration::from_millis(20));
    let o = lab.exec("h1", "echo 'ip route flush all' >> /etc/kwinctl/boot.sh");
    assert!(o.status.success());
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(boot_drift(&o), "{}", text(&o));
    // plan shows the hand edit that up would overwrite, as a unified diff
    let o = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let files = &host(&s, "h1")["files"];
    assert_eq!(files[0]["path"], "/etc/kwinctl/boot.sh", "{files}");
    let diff = files[0]["diff"].as_str().unwrap();
    assert!(
        diff.contains("--- /etc/kwinctl/boot.sh (on the host)")
            && diff.contains("\n-ip route flush all"),
        "{diff}"
    );
    let o = kwinctl(&["plan", "-i", &i]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("      -ip route flush all"),
        "{}",
        text(&o)
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(
        count(host(&summary(&o), "h1"), "changed"),
        1,
        "{}",
        text(&o)
    );
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = lab.exec("h1", "cat /etc/kwinctl/boot.sh");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("flush all"));
}
