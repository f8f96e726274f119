//! End to end with simulated Windows hosts (winsim/: real WinRM protocol,
//! real NTLM with message encryption, Basic, HTTP and HTTPS; actions carried
//! out as their Linux equivalents in the host's namespace) beside a real
//! Linux host.

use crate::common;

use common::lab::{Lab, require_root};
use common::{actions, count, host, host_check, kwinctl, summary, text, write};

fn ping(lab: &Lab, from: &str, ip: &str) -> bool {
    lab.exec(from, &format!("ping -n -c 1 -W 2 {ip} >/dev/null"))
        .status
        .success()
}

/// Whether a simulated Windows host accepts a connection on its address
/// (WinRM's port: its firewall drops pings until kwinctl's rule allows them).
fn answers(ip: &str) -> bool {
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 5985);
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)).is_ok()
}

/// Rewrite one host's `winrm:` line in the lab inventory.
pub(crate) fn set_winrm(lab: &Lab, name: &str, winrm: &str) {
    let text = std::fs::read_to_string(lab.inventory()).unwrap();
    let mut out = String::new();
    let mut in_host = false;
    for line in text.lines() {
        if line.trim_start().starts_with("- name:") {
            in_host = line.trim_start() == format!("- name: {name}");
        }
        if in_host && line.trim_start().starts_with("winrm:") {
            out += &format!("    winrm: {winrm}\n");
        } else {
            out += line;
            out.push('\n');
        }
    }
    assert_ne!(out, text, "no winrm line for {name}");
    write(lab.inventory(), &out);
}

#[test]
fn mixed_cluster_up_verify_reachability_rerun_reboot_and_reset() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 2);
    let i = lab.inv();
    // Windows Server's firewall answers no ping until a rule allows it
    assert!(!ping(&lab, "h1", &lab.ip("win1")), "win1 answered a ping");

    let o = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan = summary(&o);
    // what `up` must do is what `plan` said, action for action
    let planned = |w: &str| -> Vec<String> { actions(host(&plan, w), "planned") };
    assert!(planned("win1").len() >= 10, "{plan}");

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for w in ["win1", "win2"] {
        assert_eq!(host(&s, w)["status"], "changed", "{s}");
        let changed: Vec<String> = actions(host(&s, w), "changed");
        assert_eq!(changed, planned(w), "{s}");
        assert_eq!(count(host(&s, w), "failed"), 0, "{s}");
    }
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Each Windows host's pod gateway answers from the Linux host and from
    // the other Windows host, through the routes kwinctl added.
    let st: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    let nth = |h: &str, n: u32| {
        let cidr: ipnet::Ipv4Net = st["pod_cidrs"][h].as_str().unwrap().parse().unwrap();
        (
            std::net::Ipv4Addr::from(u32::from(cidr.network()) + n).to_string(),
            cidr.prefix_len(),
        )
    };
    let gw = |h: &str| nth(h, 1).0;
    assert!(ping(&lab, "h1", &lab.ip("win1")), "h1 -> win1");
    assert!(ping(&lab, "h1", &gw("win1")), "h1 -> win1 pod gateway");
    assert!(ping(&lab, "h1", &gw("win2")), "h1 -> win2 pod gateway");
    assert!(ping(&lab, "win2", &gw("win1")), "win2 -> win1 pod gateway");
    assert!(ping(&lab, "win1", &gw("win2")), "win1 -> win2 pod gateway");
    // A pod behind each transparent network answers from the Linux host and
    // from the other pod: the host forwards what arrives on the routable
    // adapter and, for the replies, on the network's own adapter (winsim
    // forwards per adapter, as Windows does).
    let pod = |h: &str| {
        let (addr, prefix) = nth(h, 2);
        lab.pod(h, &format!("{addr}/{prefix}"), &gw(h));
        addr
    };
    let (pod1, pod2) = (pod("win1"), pod("win2"));
    assert!(ping(&lab, "h1", &pod1), "h1 -> a pod on win1");
    assert!(ping(&lab, "h1", &pod2), "h1 -> a pod on win2");
    assert!(
        lab.ping_from_pod("win1", &pod2),
        "pod on win1 -> pod on win2"
    );
    // the network took the second card, and the node kept its address on
    // the first (the one WinRM uses)
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win1")).unwrap()).unwrap();
    assert_eq!(ws["bound"]["nic"], "Ethernet 2", "{ws}");
    assert_eq!(ws["networks"][0]["interface"], "Ethernet 2", "{ws}");
    // kwinctl's firewall rules, scoped to the other nodes and the pod network
    let mut rules: Vec<&String> = ws["firewall"].as_object().unwrap().keys().collect();
    rules.sort();
    assert_eq!(
        rules,
        [
            "kwinctl-icmp4-echo",
            "kwinctl-kube-proxy",
            "kwinctl-kubelet"
        ],
        "{ws}"
    );
    assert_eq!(
        ws["firewall"]["kwinctl-icmp4-echo"]["remote"],
        serde_json::json!([lab.ip("h1"), lab.ip("win2"), "198.19.0.0/16"]),
        "{ws}"
    );

    // the services carry the seed's flags for the lab's release (1.13: native
    // services, a kubeconfig, the Windows cgroups flags) and environment, and
    // the simulated binaries of that release started with them
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win1")).unwrap()).unwrap();
    let kubelet = &ws["services"]["kubelet"];
    let binpath = kubelet["binpath"].as_str().unwrap();
    for flag in [
        "--windows-service",
        "--pod-infra-container-image=apprenda/pause",
        "--cgroups-per-qos=false --enforce-node-allocatable= ",
        r"--log-dir=C:\k\logs",
    ] {
        assert!(binpath.contains(flag), "{flag}: {binpath}");
    }
    assert_eq!(kubelet["status"], "Running");
    assert_eq!(kubelet["depends"], serde_json::json!(["docker"]));
    assert_eq!(
        kubelet["env"],
        serde_json::json!(["CONTAINER_NETWORK=kwinctl"])
    );
    let proxy = &ws["services"]["kube-proxy"];
    assert_eq!(proxy["status"], "Running");
    assert_eq!(proxy["depends"], serde_json::json!(["kubelet"]));
    assert_eq!(
        proxy["env"],
        serde_json::json!(["INTERFACE_TO_ADD_SERVICE_IP=vEthernet (KubeProxySwitch)"])
    );

    // a second up changes nothing
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // win1 reboots and HNS loses the network (Docker then drops it): the
    // boot task re-creates it on its card, gives the new adapter the
    // gateway address, DHCP off and forwarding, then starts kubelet and
    // kube-proxy (nothing else starts them at boot) — no rerun needed
    lab.reboot_windows("win1", true);
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win1")).unwrap()).unwrap();
    let boot_log = ws["logs"][r"C:\k\logs\kwinctl-boot.log"]
        .as_str()
        .unwrap_or("");
    assert!(
        boot_log.contains("network: done") && boot_log.contains("start kube-proxy: done"),
        "{boot_log}"
    );
    for b in ["kubelet", "kube-proxy"] {
        assert_eq!(ws["services"][b]["status"], "Running", "{b}: {ws}");
        assert_eq!(ws["services"][b]["start"], "Manual", "{b}: {ws}");
    }
    assert!(
        ping(&lab, "h1", &gw("win1")),
        "gateway not restored at boot"
    );
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // the pod's endpoint went with the old network; on the new one it is
    // reached again, replies forwarded by the new adapter
    let pod1 = pod("win1");
    assert!(
        ping(&lab, "h1", &pod1),
        "h1 -> a pod on win1 after the reboot"
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // reset undoes it on win2, and a second reset has nothing to do
    let o = kwinctl(&[
        "reset", "--yes", "-i", &i, "--limit", "win2", "--output", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win2")).unwrap()).unwrap();
    assert_eq!(ws["services"], serde_json::json!({}));
    assert_eq!(ws["tasks"], serde_json::json!({}));
    assert_eq!(ws["firewall"], serde_json::json!({}));
    assert!(
        !ping(&lab, "h1", &lab.ip("win2")),
        "win2's firewall rule stayed"
    );
    assert_eq!(ws["networks"], serde_json::json!([]));
    assert_eq!(ws["persistent_routes"], serde_json::json!([]));
    assert!(
        !ping(&lab, "h1", &gw("win2")),
        "win2's gateway still answers"
    );
    let o = kwinctl(&[
        "reset", "--yes", "-i", &i, "--limit", "win2", "--output", "json",
    ]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

pub(crate) fn set_win_state(lab: &Lab, name: &str, key: &str, value: serde_json::Value) {
    let sp = lab.win_state(name);
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    ws[key] = value;
    write(&sp, &ws.to_string());
}

/// The transparent network never takes the card that carries the node's
/// address: HNS, left to choose, takes the first open card and moves its
/// address under the network (winsim does, dropping the WinRM connection
/// that was on it), and on Windows Server 2016 the gateway action then
/// deleted that address: a node lost until someone reaches its console.
#[test]
fn the_transparent_network_never_takes_the_routable_card() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 2);
    let i = lab.inv();
    // win1 has one network card (and Docker's NAT adapter, which the old
    // "second adapter" check counted)
    set_win_state(
        &lab,
        "win1",
        "nics",
        serde_json::json!([{"name": "Ethernet", "dev": "eth0"}]),
    );
    // (the other hosts, outside --limit, fail for the routes they lack)
    let o = kwinctl(&["up", "-i", &i, "--limit", "win1", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let e = host(&s, "win1")["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("no network card for the transparent network")
            && e.contains("vEthernet (HNS Internal NIC)")
            && e.contains("nothing was changed"),
        "{e}"
    );
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win1")).unwrap()).unwrap();
    assert_eq!(ws["networks"], serde_json::json!([]), "{ws}");
    assert!(answers(&lab.ip("win1")), "win1 lost its address");

    // win2 as an earlier kwinctl left it: a network created without naming
    // a card took "Ethernet", and the WinRM connection dropped
    let addr = lab.ip("win2");
    let old = format!(
        "# kwinctl-sim: {{\"kind\":\"prelude\",\"address\":\"{addr}\",\"adapter\":null}}\n\
         # kwinctl-sim: {{\"kind\":\"create_network\",\"id\":0,\"name\":\"kwinctl\",\"subnet\":\"198.19.9.0/24\",\"gateway\":\"198.19.9.1\",\"replace\":false}}\n\
         Invoke-KwNative 'docker' @('network', 'create', '-d', 'transparent', '--gateway', '198.19.9.1', '--subnet', '198.19.9.0/24', 'kwinctl')\n"
    );
    let e = lab
        .run_windows("win2", &old)
        .expect_err("the connection survived");
    assert!(e.contains("connection"), "{e}");
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win2")).unwrap()).unwrap();
    assert_eq!(ws["bound"]["nic"], "Ethernet", "{ws}");
    // the address moved to the network's adapter: the host still answers
    assert!(answers(&addr), "win2 unreachable");
    // kwinctl refuses to touch it and says how to recover
    let o = kwinctl(&["up", "-i", &i, "--limit", "win2", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = host(&summary(&o), "win2")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        e.contains("is on \"vEthernet (HNSTransparent)\", the transparent network's adapter")
            && e.contains("docker network rm kwinctl"),
        "{e}"
    );
    // and the gateway action on its own refuses the adapter holding the
    // node's address instead of deleting it
    let gw = format!(
        "# kwinctl-sim: {{\"kind\":\"prelude\",\"address\":\"{addr}\",\"adapter\":null}}\n\
         # kwinctl-sim: {{\"kind\":\"set_gateway_address\",\"id\":0,\"adapter\":\"vEthernet (HNSTransparent)\",\"gateway\":\"198.19.9.1\",\"prefix\":24,\"node_address\":\"{addr}\"}}\n"
    );
    let out = lab.run_windows("win2", &gw).expect("the connection stays");
    assert!(
        out.stdout.contains("KWX 0 failed") && out.stdout.contains("holds the node address"),
        "{out:?}"
    );
    assert!(answers(&addr), "win2 lost its address");
}

/// Windows keeps routes in two stores: the active one and the persistent
/// one a reboot restores. A copy left only in the persistent store (an old
/// next hop, a block no node has any more) is reported and replaced or
/// removed in both, so a reboot brings back exactly kwinctl's routes.
#[test]
fn routes_are_reconciled_in_both_stores_and_a_reboot_keeps_only_those() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let st: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    let h1_block = st["pod_cidrs"]["h1"].as_str().unwrap().to_string();
    let h1 = lab.ip("h1");
    // the route to h1's block is gone from the active store (a `route
    // delete` without -p) but kept in the persistent one, and a kwinctl that
    // removed routes from the active store only left a route to a block no
    // node has any more in the persistent one
    let sp = lab.win_state("win1");
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    let stale = "198.19.200.0/24";
    ws["persistent_routes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"dst": stale, "via": h1, "dev": "eth0"}));
    write(&sp, &ws.to_string());
    let o = lab.exec("win1", &format!("ip route del {h1_block}"));
    assert!(o.status.success(), "{o:?}");

    let o = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan = host(&summary(&o), "win1").clone();
    let planned: Vec<String> = actions(&plan, "planned");
    assert_eq!(
        planned,
        [
            format!("remove route {stale} via {h1}"),
            format!("replace persistent route {h1_block} via {h1}"),
        ],
        "{plan}"
    );
    assert!(
        plan["notes"]
            .to_string()
            .contains("only in the persistent store"),
        "{plan}"
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // a reboot restores the persistent store: exactly one next hop each
    lab.reboot_windows("win1", false);
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    let kept: Vec<String> = ws["persistent_routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["dst"].as_str().unwrap(),
                r["via"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(kept, [format!("{h1_block} {h1}")], "{ws}");
    let routes = String::from_utf8_lossy(&lab.exec("win1", "ip -4 route show").stdout).into_owned();
    assert!(
        routes.contains(&format!("{h1_block} via {h1} ")) && !routes.contains(stale),
        "{routes}"
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

#[test]
fn winrm_auth_modes_tls_pinning_wrong_password_and_failing_actions() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 3);
    let pw_file = lab.dir().join("winrm-password");
    // win1: NTLM over HTTPS with the certificate pinned by SHA-256
    set_winrm(
        &lab,
        "win1",
        &format!(
            "{{ port: 5986, tls: true, auth: ntlm, cert_sha256: \"{}\", password_file: {} }}",
            lab.cert_sha256("win1"),
            pw_file.display()
        ),
    );
    // win2: Basic over HTTPS with the certificate as a CA file
    set_winrm(
        &lab,
        "win2",
        &format!(
            "{{ port: 5986, tls: true, auth: basic, ca_file: {}, password_file: {} }}",
            lab.dir().join("hosts/win2/ca.pem").display(),
            pw_file.display()
        ),
    );
    // win3 stays on NTLM over HTTP (sealed); its switch creation will fail
    let sp = lab.win_state("win3");
    let mut ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    ws["fail_kinds"] = serde_json::json!(["create_switch"]);
    write(&sp, &ws.to_string());
    let i = lab.inv();

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["win3"]), "{s}");
    for h in ["h1", "win1", "win2"] {
        assert_eq!(host(&s, h)["status"], "changed", "{s}");
    }
    let w3 = host(&s, "win3");
    let failed = common::failed_action(w3);
    assert!(
        failed["action"]
            .as_str()
            .unwrap()
            .contains("create internal Hyper-V switch")
    );
    assert!(
        failed["stderr"]
            .as_str()
            .unwrap()
            .contains("simulated failure of create_switch"),
        "{failed}"
    );
    assert!(
        w3["error"].as_str().unwrap().contains("were not run"),
        "{w3}"
    );
    // every action after the failed one was skipped, none before it
    let actions = w3["actions"].as_array().unwrap();
    let at = actions
        .iter()
        .position(|a| a["status"] == "failed")
        .unwrap();
    let after: Vec<&serde_json::Value> = actions[at + 1..]
        .iter()
        .filter(|a| a["status"] != "ok")
        .collect();
    assert!(!after.is_empty(), "{w3}");
    assert!(after.iter().all(|a| a["status"] == "skipped"), "{w3}");
    assert_eq!(count(w3, "skipped"), after.len(), "{w3}");

    // a wrong pin is refused, naming TLS and how to fix it
    set_winrm(
        &lab,
        "win1",
        &format!(
            "{{ port: 5986, tls: true, auth: ntlm, cert_sha256: \"{}\", password_file: {} }}",
            "00".repeat(32),
            pw_file.display()
        ),
    );
    // a wrong password on win2 fails win2 alone, with a clear message
    let bad_pw = lab.dir().join("wrong-password");
    write(&bad_pw, "not-the-password\n");
    set_winrm(
        &lab,
        "win2",
        &format!(
            "{{ port: 5985, tls: false, auth: ntlm, password_file: {} }}",
            bad_pw.display()
        ),
    );
    let o = kwinctl(&[
        "verify",
        "-i",
        &i,
        "--limit",
        "h1,win1,win2",
        "--output",
        "json",
        "--retries",
        "0",
    ]);
    let s = summary(&o);
    let e1 = host(&s, "win1")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(e1.contains("cert_sha256") || e1.contains("ca_file"), "{e1}");
    let e2 = host(&s, "win2")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        e2.contains("authentication failed") && e2.contains("password"),
        "{e2}"
    );
    assert_eq!(host(&s, "h1")["status"], "ok", "{s}");

    // the password appears in no output and in no file kwinctl wrote
    let secret = lab.winrm_password();
    assert!(secret.len() >= 16);
    assert!(!text(&o).contains(&secret));
    let mut stack = vec![lab.dir().to_path_buf()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("hosts") {
                    stack.push(p);
                }
                continue;
            }
            if p.ends_with("winrm-password") {
                continue;
            }
            n += 1;
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secret),
                "password in {}",
                p.display()
            );
        }
    }
    assert!(n > 5, "{n}");
}

#[test]
fn transport_reports_exit_code_and_stderr_of_a_failing_command() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(0, 1);
    let inv = kwinctl::inventory::Inventory::load(lab.inventory()).unwrap();
    let h = inv.host("win1").unwrap().clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let opts = kwinctl::transport::ConnectOptions::new(
            std::time::Duration::from_secs(20),
            false,
            Default::default(),
        );
        let mut s = kwinctl::transport::connect(&h, kwinctl::transport::Interpreter::PowerShell, &opts).await.expect("connect");
        let out = s
            .run("# kwinctl-sim: {\"kind\":\"echo\",\"text\":\"hello\"}\n# kwinctl-sim: {\"kind\":\"fail\",\"code\":3,\"stderr\":\"boom: it broke\"}\nWrite-Output 'hello'\n")
            .await
            .expect("run");
        assert_eq!(out.exit, Some(3), "{out:?}");
        assert!(out.stdout.contains("hello"), "{out:?}");
        assert!(out.stderr.contains("boom: it broke"), "{out:?}");
        // a long script (well past cmd.exe's 8191-character line) arrives whole
        let long = format!(
            "# kwinctl-sim: {{\"kind\":\"echo\",\"text\":\"end\"}}\n{}",
            "# padding\n".repeat(30_000)
        );
        let out = s.run(&long).await.expect("long");
        assert_eq!((out.exit, out.stdout.trim()), (Some(0), "end"), "{out:?}");
        s.close().await;
    });
}

/// A 401 on a connection winrm-rs had just authenticated (the server lost
/// the NTLM session) costs opening the shell or starting a command another
/// try: both are safe to repeat. Two losses in a row are reported.
#[test]
fn a_lost_ntlm_session_is_retried_once_when_safe() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(0, 1);
    let inv = kwinctl::inventory::Inventory::load(lab.inventory()).unwrap();
    let h = inv.host("win1").unwrap().clone();
    let lose = |n: u32| {
        let sp = lab.win_state("win1");
        let mut ws: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
        ws["lose_sessions"] = serde_json::json!(n);
        // replaced atomically, as winsim reads it without its lock
        let tmp = sp.with_extension("json.test");
        write(&tmp, &ws.to_string());
        std::fs::rename(&tmp, &sp).unwrap();
    };
    let echo = "# kwinctl-sim: {\"kind\":\"echo\",\"text\":\"hello\"}\nWrite-Output 'hello'\n";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let opts = kwinctl::transport::ConnectOptions::new(
            std::time::Duration::from_secs(20),
            false,
            Default::default(),
        );
        // opening the shell: the first sealed request gets a 401
        lose(1);
        let mut s =
            kwinctl::transport::connect(&h, kwinctl::transport::Interpreter::PowerShell, &opts)
                .await
                .expect("connect after one lost session");
        // starting the command
        lose(1);
        let out = s.run(echo).await.expect("run after one lost session");
        assert_eq!((out.exit, out.stdout.trim()), (Some(0), "hello"), "{out:?}");
        s.close().await;
        // two in a row: no more tries
        lose(2);
        let e = kwinctl::transport::connect(&h, kwinctl::transport::Interpreter::PowerShell, &opts)
            .await
            .err()
            .expect("a second lost session in a row fails the connection");
        assert!(
            e.to_string().contains("on an authenticated connection"),
            "{e}"
        );
    });
    // exactly two tries: both losses were met, none is left over
    assert_eq!(lab.win_state_json("win1")["lose_sessions"], 0);
}

/// Threads that keep the machine's cores busy until dropped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn new(n: usize) -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Windows binds an NTLM handshake to its TCP connection, and the simulated
/// host does too: a Type 3 on a connection that carried no challenge is
/// refused as a wrong password is. Many handshakes at once, over HTTP
/// (sealed) and over HTTPS (channel binding), with the machine busy, all
/// authenticate: the client sends each Type 3 on its challenge's connection
/// (winrm-rs 2.0.1 did not always: docs/vendor.md).
#[test]
fn ntlm_handshakes_under_load_stay_on_their_connection() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(0, 2);
    set_winrm(
        &lab,
        "win2",
        &format!(
            "{{ port: 5986, tls: true, auth: ntlm, cert_sha256: \"{}\", password_file: {} }}",
            lab.cert_sha256("win2"),
            lab.dir().join("winrm-password").display()
        ),
    );
    let inv = kwinctl::inventory::Inventory::load(lab.inventory()).unwrap();
    let echo = "# kwinctl-sim: {\"kind\":\"echo\",\"text\":\"hello\"}\nWrite-Output 'hello'\n";
    // the race needs a busy machine: two spinning threads beside the
    // sessions, stopped when `_busy` goes, a failed assertion included
    let _busy = Busy::new(2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let failures: Vec<String> = rt.block_on(async {
        let opts = kwinctl::transport::ConnectOptions::new(
            std::time::Duration::from_secs(30),
            false,
            Default::default(),
        );
        let mut failures = Vec::new();
        for _round in 0..4 {
            let tries = ["win1", "win2"].iter().flat_map(|name| {
                let h = inv.host(name).unwrap().clone();
                let opts = &opts;
                (0..16).map(move |_| {
                    let h = h.clone();
                    async move {
                        let mut s = kwinctl::transport::connect(
                            &h,
                            kwinctl::transport::Interpreter::PowerShell,
                            opts,
                        )
                        .await
                        .map_err(|e| format!("{}: connect: {e}", h.name))?;
                        let out = s
                            .run(echo)
                            .await
                            .map_err(|e| format!("{}: run: {e}", h.name))?;
                        s.close().await;
                        match out.stdout.trim() {
                            "hello" => Ok(()),
                            o => Err(format!("{}: printed {o:?}", h.name)),
                        }
                    }
                })
            });
            for r in futures::future::join_all(tries).await {
                failures.extend(r.err());
            }
        }
        failures
    });
    drop(_busy);
    let refused: Vec<String> = ["win1", "win2"]
        .iter()
        .flat_map(|h| {
            std::fs::read_to_string(lab.dir().join("hosts").join(h).join("winsim.log"))
                .unwrap()
                .lines()
                .filter(|l| l.contains("refused: a Type 3"))
                .map(|l| format!("{h}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        failures.is_empty() && refused.is_empty(),
        "{failures:#?}\n{refused:#?}"
    );
}

#[test]
fn binaries_uploaded_from_the_operators_machine() {
    if !require_root() {
        return;
    }
    // (a Linux control plane keeps the cluster lock)
    let lab = Lab::up_mixed(1, 1);
    // a 3 MiB "kubelet.exe" on this machine: the lab's release line (what
    // winsim's binaries print for --version), then filler
    let local = lab.dir().join("kubelet.exe");
    let mut bytes = b"MZ kwinctl lab fake kubelet.exe\nKubernetes v1.10.13\n".to_vec();
    bytes.extend((bytes.len() as u32..3 * 1024 * 1024u32).map(|i| (i * 7 + i / 251) as u8));
    std::fs::write(&local, &bytes).unwrap();
    let sha = {
        use sha2::Digest;
        sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let inv_text = std::fs::read_to_string(lab.inventory()).unwrap();
    let start = inv_text.find("        kubelet: {").unwrap();
    let end = start + inv_text[start..].find('\n').unwrap();
    let inv_text = format!(
        "{}        kubelet: {{ path: {} }}{}",
        &inv_text[..start],
        local.display(),
        &inv_text[end..]
    );
    write(lab.inventory(), &inv_text);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let actions = host(&s, "win1")["actions"].as_array().unwrap().clone();
    assert!(
        actions.iter().any(|a| a["action"]
            .as_str()
            .unwrap()
            .starts_with(r"push C:\k\kubelet.exe (3145728 bytes)")),
        "{s}"
    );
    let ws: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lab.win_state("win1")).unwrap()).unwrap();
    assert_eq!(ws["files"][r"C:\k\kubelet.exe"], sha.as_str());
    // unchanged on the next run: the hash already matches
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    // a pinned sha256 that the local file does not have is bad input
    let bad = std::fs::read_to_string(lab.inventory()).unwrap().replace(
        &format!("path: {} }}", local.display()),
        &format!("path: {}, sha256: {} }}", local.display(), "0".repeat(64)),
    );
    write(lab.inventory(), &bad);
    let o = kwinctl(&["plan", "-i", &i]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the local file's SHA-256 is"));
}

#[test]
fn windows_nodes_ready_as_the_control_planes_kubectl_sees_them() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 2);
    let i = lab.inv();
    // no usable kubectl on the control plane: said, not failed
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let notes = host(&summary(&o), "win1")["notes"].to_string();
    assert!(notes.contains("node Ready not checked"), "{notes}");

    // a kubectl that lists win1 Ready and win2 NotReady (Windows nodes
    // by host name, as they register: docs/windows.md#node-names)
    let fake = lab.dir().join("hosts/h1/usr-local-bin/kubectl");
    write(
        &fake,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' '{} True linux' 'win1 True windows' 'win2 False windows'\n",
            lab.ip("h1"),
        ),
    );
    std::process::Command::new("chmod")
        .arg("755")
        .arg(&fake)
        .status()
        .unwrap();
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["win2"]), "{s}");
    let check = |h: &str| host_check(&s, h, "kubernetes node Ready");
    assert_eq!(check("win1")["pass"], true);
    assert_eq!(check("win2")["pass"], false);
    assert!(
        check("win2")["detail"]
            .as_str()
            .unwrap()
            .contains("not Ready")
    );
}

#[test]
fn windows_hosts_that_refuse_or_never_answer_fail_alone() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 3);
    let i = lab.inv();
    // The state file knows every host's block (a cluster kwinctl has run
    // before): a host that cannot be asked does not hold the others back.
    let inv_text = std::fs::read_to_string(lab.inventory()).unwrap();
    let cluster = inv_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("name: lab"))
        .map(|id| format!("lab{id}"))
        .unwrap();
    let state = serde_json::json!({
        "version": 2, "cluster": cluster, "cluster_id": "0a1b2c3d4e5f6789",
        "cluster_cidr": "198.19.0.0/16",
        "pod_cidrs": {"h1": "198.19.0.0/24", "win1": "198.19.1.0/24",
                      "win2": "198.19.2.0/24", "win3": "198.19.3.0/24"},
    });
    write(
        &lab.dir().join("inventory.kwinctl-state.json"),
        &state.to_string(),
    );
    // (their firewalls answer pings, as after an earlier run: only WinRM
    // is out of reach here)
    for w in ["win1", "win2"] {
        let o = lab.exec(w, "sysctl -q -w net.ipv4.icmp_echo_ignore_all=0");
        assert!(o.status.success(), "{o:?}");
    }
    // win1's WinRM listener is down
    let ns = lab
        .hosts()
        .iter()
        .find(|h| h.name == "win1")
        .unwrap()
        .netns
        .clone();
    let pids = std::process::Command::new("ip")
        .args(["netns", "pids", &ns])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
        let _ = std::process::Command::new("kill").arg(pid).status();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // win2 never answers
    let _bh = lab.blackhole("win2");
    let start = std::time::Instant::now();
    let o = kwinctl(&[
        "up",
        "-i",
        &i,
        "--timeout",
        "6",
        "--retries",
        "1",
        "--output",
        "json",
    ]);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(
        s["failed_hosts"],
        serde_json::json!(["win1", "win2"]),
        "{s}"
    );
    let e1 = host(&s, "win1")["error"].as_str().unwrap();
    assert!(e1.contains("WinRM listener") && e1.contains("5985"), "{e1}");
    let e2 = host(&s, "win2")["error"].as_str().unwrap();
    assert!(
        e2.contains("no answer within") || e2.contains("timed out"),
        "{e2}"
    );
    assert_eq!(host(&s, "h1")["status"], "changed", "{s}");
    assert_eq!(host(&s, "win3")["status"], "changed", "{s}");
}
