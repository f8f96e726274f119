//! The l2bridge profile end to end on a mixed lab (issue 17): a Linux
//! control plane, a simulated Windows Server 2019 and a Windows Server 2022
//! host, Kubernetes 1.30 with containerd 1.7. `up` installs the Containers
//! feature and what does not need it, then says the hosts must restart;
//! after the (simulated) restart `up` builds the rest; `up` again changes
//! nothing; a reboot loses the host endpoint (HNS keeps networks, not
//! endpoints) and the boot task puts it back; `verify` passes; `reset`
//! removes kwinctl's objects.

use crate::common;

use common::lab::{Lab, require_root};
use common::{count, host, host_check, kwinctl, summary, text, write};

const K8S: &str = "1.30.4";
const CONTAINERD: &str = "1.7.20";
/// The first release whose kube-log-runner rotates (PR #127667), with a
/// containerd it supports (containerd RELEASES.md: 1.7.28+ for 1.34).
const K8S_ROTATING: &str = "1.34.2";
const CONTAINERD_ROTATING: &str = "1.7.28";

#[test]
fn a_mixed_cluster_comes_up_survives_a_reboot_and_verifies() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2019", "2022"], None, K8S, CONTAINERD, None);
    let i = lab.inv();
    let o = kwinctl(&["check", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 1. The Containers feature needs a restart: what does not need it is
    // done, then each Windows host fails with what to do.
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(
        s["failed_hosts"],
        serde_json::json!(["win1", "win2"]),
        "{s}"
    );
    for h in ["win1", "win2"] {
        let r = host(&s, h);
        assert_eq!(count(r, "failed"), 0, "{r}");
        assert!(r.to_string().contains("reboot required"), "{r}");
        assert_eq!(
            lab.win_state_json(h)["features"]["Containers"],
            "InstallPending"
        );
    }

    // 2. After the restart: the rest.
    for h in ["win1", "win2"] {
        lab.reboot_windows(h, false);
    }
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in ["win1", "win2"] {
        let r = host(&s, h);
        assert_eq!(count(r, "failed"), 0, "{r}");
        let st = lab.win_state_json(h);
        let names: Vec<String> = st
            .to_string()
            .matches("cbr0_ep")
            .map(str::to_string)
            .collect();
        assert!(!names.is_empty(), "{h}: no host endpoint in {st}");
        // 1.30: kube-log-runner writes each service's output to its file
        // (no klog file flags since 1.26), without rotation (its 1.30
        // release has none), which the plan says
        assert_runner_logs(&st, h, false);
        assert!(
            r["notes"].to_string().contains("which cannot rotate them"),
            "{r}"
        );
    }
    // the Linux node routes each Windows pod CIDR via that node's address
    let routes = lab.routes("h1");
    for h in ["win1", "win2"] {
        assert!(routes.contains(&format!("via {}", lab.ip(h))), "{routes}");
    }

    // 3. Again: nothing to do.
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // Pods: one at P+3 behind each host's vSwitch, its gateway the host
    // endpoint P+2, answer from the Linux host and from each other (routes,
    // the endpoint and forwarding on both vNICs all in place).
    let nth = |h: &str, n: u32| {
        let net: ipnet::Ipv4Net = host(&s, h)["pod_cidr"].as_str().unwrap().parse().unwrap();
        std::net::Ipv4Addr::from(u32::from(net.network()) + n).to_string()
    };
    for h in ["win1", "win2"] {
        lab.pod(h, &format!("{}/24", nth(h, 3)), &nth(h, 2));
    }
    let ping = |from: &str, ip: &str| {
        lab.exec(from, &format!("ping -n -c 1 -W 2 {ip} >/dev/null"))
            .status
            .success()
    };
    assert!(ping("h1", &nth("win1", 3)), "h1 -> a pod on win1");
    assert!(ping("h1", &nth("win2", 3)), "h1 -> a pod on win2");
    assert!(
        lab.ping_from_pod("win1", &nth("win2", 3)),
        "pod on win1 -> pod on win2"
    );
    assert!(
        lab.ping_from_pod("win2", &lab.ip("h1")),
        "pod on win2 -> h1"
    );

    // 4. A reboot loses the host endpoint; the boot task puts it back. The
    // control plane's kubectl (a stand-in printing what the probe's
    // jsonpath asks for) sees both nodes Ready, with their build label and
    // kwinctl's pod CIDRs.
    lab.reboot_windows("win1", false);
    // (a Windows node is named by its host name: docs/windows.md#node-names)
    let line = |h: &str, build: &str, cidr: &str| format!("{h}|True|windows|{build}|{cidr}");
    let cidr = |h: &str| host(&s, h)["pod_cidr"].as_str().unwrap().to_string();
    let kubectl = |win2_cidr: &str| {
        format!(
            "#!/bin/sh\nprintf '%s\\n' '{}|True|linux||' '{}' '{}'\n",
            lab.ip("h1"),
            line("win1", "10.0.17763", &cidr("win1")),
            line("win2", "10.0.20348", win2_cidr)
        )
    };
    lab.fake_command("h1", "kubectl", &kubectl(&cidr("win2")));
    // pods do not survive a reboot either (their endpoints go with the
    // host's); one started again on the rebooted host reaches the other:
    // its gateway, the host endpoint, is back
    lab.pod("win1", &format!("{}/24", nth("win1", 3)), &nth("win1", 2));
    assert!(
        lab.ping_from_pod("win1", &nth("win2", 3)),
        "after the reboot"
    );
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let node_check =
        |o: &std::process::Output, h: &str| host_check(&summary(o), h, "kubernetes node Ready");
    assert_eq!(node_check(&o, "win1")["pass"], true);
    // a controller manager that allocated win2 another block: refused
    lab.fake_command("h1", "kubectl", &kubectl("198.19.77.0/24"));
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = node_check(&o, "win2");
    assert!(
        c["detail"].as_str().unwrap().contains("kwinctl allocated"),
        "{c}"
    );
    lab.fake_command("h1", "kubectl", &kubectl(&cidr("win2")));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // 5. reset removes the services, the pod network and the files, and
    // leaves the placeholder network (the vSwitch).
    let o = kwinctl(&["reset", "-i", &i, "--yes", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for h in ["win1", "win2"] {
        let st = lab.win_state_json(h);
        // (the logs keep the old command lines: only the objects count)
        for k in [
            "hns_networks",
            "hns_endpoints",
            "services",
            "files",
            "tasks",
        ] {
            assert!(!st[k].to_string().contains("cbr0"), "{h} {k}: {st}");
        }
        assert_eq!(st["services"], serde_json::json!({}), "{h}: {st}");
        assert!(
            st["hns_networks"].to_string().contains("\"External\""),
            "{h}: {st}"
        );
    }
}

/// After `up --reboot` on a fresh l2bridge host: `up` restarted it once
/// for the Containers feature, says so, and nothing failed. Its state.
pub(crate) fn restarted_once_for_containers(
    lab: &Lab,
    s: &serde_json::Value,
    name: &str,
) -> serde_json::Value {
    let r = host(s, name);
    assert!(
        r["notes"]
            .to_string()
            .contains("restarted by `up --reboot`"),
        "{r}"
    );
    assert_eq!(count(r, "failed"), 0, "{r}");
    let st = lab.win_state_json(name);
    assert_eq!(st["features"]["Containers"], "Installed", "{st}");
    assert_eq!(st["boot_count"], 1, "{st}");
    st
}

/// `up --reboot`: one run installs the Containers feature, restarts the host
/// (the simulated shutdown.exe restarts it with a new boot time), waits for
/// it and builds the rest.
#[test]
fn up_reboot_restarts_the_host_and_goes_on() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], None, K8S_ROTATING, CONTAINERD_ROTATING, None);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--reboot", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let st = restarted_once_for_containers(&lab, &s, "win1");
    // 1.34: the runner rotates (PR #127667), and no note says otherwise
    assert_runner_logs(&st, "win1", true);
    let r = host(&s, "win1");
    assert!(!r["notes"].to_string().contains("cannot rotate"), "{r}");
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

/// cluster.log_runner_version: the 1.30 binaries behind a 1.34 runner,
/// which rotates their logs (the runner only starts the binary it wraps);
/// the plan has no note about unrotated logs.
#[test]
fn a_newer_log_runner_rotates_an_older_kubelets_logs() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(
        1,
        &["2022"],
        Some("Installed"),
        K8S,
        CONTAINERD,
        Some(K8S_ROTATING),
    );
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let r = host(&s, "win1");
    assert!(!r["notes"].to_string().contains("cannot rotate"), "{r}");
    assert_runner_logs(&lab.win_state_json("win1"), "win1", true);
}

/// kubelet and kube-proxy run behind kube-log-runner on the simulated host
/// `h` (state `st`), which started them and writes their output to
/// C:\k\logs\<name>.log, with the rotation settings when `rotating`.
fn assert_runner_logs(st: &serde_json::Value, h: &str, rotating: bool) {
    for svc in ["kubelet", "kube-proxy"] {
        let s = &st["services"][svc];
        assert_eq!(s["status"], "Running", "{h} {svc}: {s}");
        let log = format!(r"C:\k\logs\{svc}.log");
        let binpath = s["binpath"].as_str().unwrap();
        assert!(
            binpath.starts_with(&format!(r"C:\k\kube-log-runner.exe -log-file={log} ")),
            "{h}: {binpath}"
        );
        assert_eq!(
            binpath.contains("-log-file-size=100M -log-file-age=168h -flush-interval=5s"),
            rotating,
            "{h}: {binpath}"
        );
        // the file holds what the program printed (its warnings); the
        // runner's own "Command env" line goes to the runner's stderr
        assert!(
            st["logs"][&log].is_string(),
            "{h}: no {log} in {}",
            st["logs"]
        );
        let runner = st["logs"][format!("runner:{svc}")]
            .as_str()
            .unwrap_or_else(|| panic!("{h}: the runner did not start {svc}: {}", st["logs"]));
        assert!(runner.contains(&format!("log-file={log}")), "{h}: {runner}");
        assert_eq!(
            runner.contains("log-file-size=100000000"),
            rotating,
            "{h}: {runner}"
        );
    }
}

/// A host's routes: destination -> next hops, sorted.
type Routes = std::collections::BTreeMap<String, Vec<String>>;

/// The routes of a simulated Windows host's kernel table (its active store).
fn win_routes(lab: &Lab, h: &str) -> Routes {
    let o = lab.exec(h, "ip -j -4 route show table main");
    assert!(o.status.success(), "{h}: ip route: {}", text(&o));
    let rs: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ip -j route");
    let mut out = Routes::new();
    for r in rs.as_array().unwrap() {
        let dst = r["dst"].as_str().unwrap_or_default().to_string();
        let hops = match r["nexthops"].as_array() {
            Some(n) => n.clone(),
            None => vec![r.clone()],
        };
        for nh in hops {
            if let Some(via) = nh["gateway"].as_str() {
                out.entry(dst.clone()).or_default().push(via.to_string());
            }
        }
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

/// Wait up to `limit` for `f` to hold, polling every 200 ms.
fn eventually(limit: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    f()
}

/// The l2bridge boot task's loop (issue 24 item 3; docs/windows-boot-task.md):
/// it runs right after the first `up` (not only after a reboot), and when
/// `up` re-installs the task with a new spec the old loop is stopped, so a
/// removed peer's route stays removed and a route whose next hop moved is
/// not put back to the old one. The simulated hosts run the loop every
/// second (`boot_loop_seconds`).
#[test]
fn the_boot_tasks_loop_follows_the_inventory() {
    if !require_root() {
        return;
    }
    const PERIOD: f64 = 1.0;
    let periods = |n: f64| std::time::Duration::from_secs_f64(PERIOD * n);
    let lab = Lab::up_l2bridge(
        2,
        &["2022", "2022"],
        Some("Installed"),
        K8S,
        CONTAINERD,
        None,
    );
    for h in ["win1", "win2"] {
        let mut st = lab.win_state_json(h);
        st["boot_loop_seconds"] = PERIOD.into();
        write(&lab.win_state(h), &st.to_string());
    }
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let cidr = |h: &str| host(&s, h)["pod_cidr"].as_str().unwrap().to_string();
    let (h2_block, win2_block) = (cidr("h2"), cidr("win2"));
    assert_eq!(
        win_routes(&lab, "win1").get(&win2_block),
        Some(&vec![lab.ip("win2")])
    );

    // 1. A loop runs right after the first `up` (the task is running, as
    // the probe would report it): a route it keeps, taken away, comes back
    // within a few periods.
    assert_eq!(
        lab.win_state_json("win1")["tasks"]["kwinctl-boot"]["running"],
        true,
        "{}",
        lab.win_state_json("win1")["tasks"]
    );
    let o = lab.exec("win1", &format!("ip route del {h2_block}"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        eventually(periods(6.0), || win_routes(&lab, "win1").get(&h2_block)
            == Some(&vec![lab.ip("h2")])),
        "no boot-task loop put {h2_block} back on win1: {:?}; loop log: {}",
        win_routes(&lab, "win1"),
        lab.win_state_json("win1")["logs"]["winsim:boot-loop"]
    );

    // 2. win2 leaves the inventory: `up` drops win1's route to its block
    // and re-installs the boot task with the new spec; for three periods
    // and more the route stays removed and the loop changes no route.
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let mut without = String::new();
    let mut skipping = false;
    for line in inv.lines() {
        if line.starts_with("  - name: ") {
            skipping = line == "  - name: win2";
        } else if !line.starts_with("    ") {
            skipping = false;
        }
        if !skipping {
            without += line;
            without.push('\n');
        }
    }
    assert!(!without.contains("win2"), "{without}");
    write(lab.inventory(), &without);
    let loop_log = || {
        lab.win_state_json("win1")["logs"]["winsim:boot-loop"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let steady = |what: &str, ok: &dyn Fn(&Routes) -> bool| {
        let before = loop_log();
        let deadline = std::time::Instant::now() + periods(4.0);
        while std::time::Instant::now() < deadline {
            let r = win_routes(&lab, "win1");
            assert!(ok(&r), "{what} on win1: {r:?}\nloop log: {}", loop_log());
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let after = loop_log();
        let since = after.strip_prefix(before.as_str()).unwrap_or(&after);
        assert!(
            !since.contains("NetRoute"),
            "{what}: the loop changed routes: {since}"
        );
    };
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    steady("win2's route stays removed", &|r| {
        !r.contains_key(&win2_block)
    });

    // 3. win2 is reset (it is reached at its remembered address), so is h2,
    // which then takes win2's old block: on win1 that route's next hop
    // moves to h2 and h2's old block goes.
    // (the removed host's WinRM settings: the inventory's defaults)
    let winrm = format!(
        "defaults:\n  winrm: {{ port: 5985, tls: false, auth: ntlm, password_file: {} }}\n",
        lab.dir().join("winrm-password").display()
    );
    assert!(without.contains("defaults:\n"), "{without}");
    write(lab.inventory(), &without.replacen("defaults:\n", &winrm, 1));
    let o = kwinctl(&["reset", "-i", &i, "--yes", "--limit", "win2,h2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let pinned = without.replace(
        "  - name: h2\n",
        &format!("  - name: h2\n    pod_cidr: {win2_block}\n"),
    );
    assert_ne!(pinned, without);
    write(lab.inventory(), &pinned);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let want = vec![lab.ip("h2")];
    steady(
        "the moved route keeps its new next hop, h2's old block is gone",
        &|r| r.get(&win2_block) == Some(&want) && !r.contains_key(&h2_block),
    );
    let st = lab.win_state_json("win1");
    assert!(
        st["persistent_routes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["dst"] != h2_block.as_str()
                && (r["dst"] != win2_block.as_str() || r["via"] == lab.ip("h2").as_str())),
        "{}",
        st["persistent_routes"]
    );
    // the running loop is the new one: it keeps the moved route
    let o = lab.exec("win1", &format!("ip route del {win2_block}"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        eventually(periods(6.0), || win_routes(&lab, "win1").get(&win2_block)
            == Some(&want)),
        "the loop did not restore {win2_block} via h2: {:?}",
        win_routes(&lab, "win1")
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}
