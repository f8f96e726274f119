//! Windows hosts over SSH, end to end (issue 30): simulated Windows hosts
//! behind a real OpenSSH server whose sessions run the command as Windows'
//! OpenSSH server would (DefaultShell cmd.exe or powershell.exe, then
//! powershell.exe's own parsing: winsim/sshsession.py), and the script with
//! the same simulator the WinRM path uses. See docs/windows-ssh.md.

use crate::common;
use crate::lab_kerberos::run;
use crate::lab_windows::{set_win_state, set_winrm};

use common::kdc::Kdc;
use common::lab::{Lab, require_root};
use common::{count, host, kwinctl, summary, text};
use kwinctl::transport::Interpreter;
use kwinctl::transport::ssh::remote_command;

/// How a Windows host of a mixed cluster is reached. A new transport (e.g.
/// WinRM with Kerberos) is one more variant and one more arm in [`reach`].
#[derive(Debug, Clone, Copy)]
enum Via {
    /// WinRM, NTLM with message encryption over HTTP (the lab's default).
    WinRmNtlm,
    /// WinRM with Kerberos (sealed over HTTP), on a host that refuses NTLM.
    WinRmKerberos,
    /// OpenSSH with this DefaultShell ("cmd", "powershell" or "pwsh").
    Ssh(&'static str),
}

fn reach(lab: &Lab, kdc: &Kdc, name: &str, via: Via) {
    match via {
        Via::WinRmNtlm => {}
        Via::WinRmKerberos => {
            set_winrm(
                lab,
                name,
                &format!(
                    "{{ port: 5985, tls: false, auth: kerberos, user: {} }}",
                    kdc.user
                ),
            );
            set_win_state(lab, name, "refuse_ntlm", serde_json::json!(true));
        }
        Via::Ssh(shell) => lab.win_ssh(name, shell),
    }
}

/// The WinRM requests a simulated host's server has answered (its log).
fn winrm_requests(lab: &Lab, name: &str) -> usize {
    std::fs::read_to_string(lab.dir().join("hosts").join(name).join("winsim.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"POST /wsman"))
        .count()
}

fn set_state(lab: &Lab, name: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut ws = lab.win_state_json(name);
    edit(&mut ws);
    common::write(&lab.win_state(name), &ws.to_string());
}

#[test]
fn windows_over_ssh_up_rerun_reboot_repair_and_verify() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 2);
    // win1 with Windows' default shell, win2 with PowerShell as DefaultShell
    lab.win_ssh("win1", "cmd");
    lab.win_ssh("win2", "powershell");
    let i = lab.inv();

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for w in ["win1", "win2"] {
        assert_eq!(host(&s, w)["status"], "changed", "{s}");
        assert!(count(host(&s, w), "changed") >= 10, "{s}");
        assert_eq!(count(host(&s, w), "failed"), 0, "{s}");
        // every script went over SSH: the WinRM server saw no request
        assert_eq!(winrm_requests(&lab, w), 0, "{w} was reached over WinRM");
    }
    assert_eq!(
        lab.win_state_json("win1")["services"]["kubelet"]["status"],
        "Running"
    );

    // The bytes: sshd got exactly kwinctl's remote_command, and the command
    // lines Windows would build from it stay far below cmd.exe's 8191
    // characters (the script itself travels on stdin).
    let want = remote_command(Interpreter::PowerShell, "root");
    for (w, line) in [
        (
            "win1",
            format!(r#""C:\Windows\system32\cmd.exe" /c "{want}""#),
        ),
        (
            "win2",
            format!(r#""C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe" -c "{want}""#),
        ),
    ] {
        let sessions = lab.win_ssh_sessions(w);
        assert!(sessions.len() >= 2, "{w}: {sessions:?}");
        for e in &sessions {
            assert_eq!(e["command"], want.as_str(), "{w}: {e}");
            assert_eq!(e["shell_line"], line.as_str(), "{w}: {e}");
            assert_eq!(e["script_from"], "stdin", "{w}: {e}");
            assert_eq!(e["outcome"], "exit 0", "{w}: {e}");
            assert!(e["shell_line_length"].as_u64().unwrap() < 2000, "{e}");
        }
    }

    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // a second up changes nothing
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));

    // win2 reboots: its boot task puts everything back, nothing to repair
    lab.reboot_windows("win2", true);
    // win1 reboots, loses its HNS network, and its boot task does not run
    // (its startup trigger off): the network, the gateway and the services
    // are lost, and verify says so
    set_state(&lab, "win1", |ws| {
        ws["tasks"]["kwinctl-boot"]["startup"] = serde_json::json!(false)
    });
    lab.reboot_windows("win1", true);
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["win1"]), "{s}");
    let failed = common::failed_checks(host(&s, "win1"));
    assert!(
        failed.iter().any(|c| c.contains("service not running")),
        "{failed:?}"
    );
    // a rerun repairs exactly what was lost, on win1 only, and gives the
    // boot task its startup trigger back
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let changed = common::actions(host(&s, "win1"), "changed");
    assert_eq!(changed.len(), 5, "{s}");
    for (n, what) in [
        (0, "create transparent docker network"),
        (1, "the gateway address"),
        (2, "install the startup task kwinctl-boot"),
        (3, "start service kubelet"),
        (4, "start service kube-proxy"),
    ] {
        assert!(changed[n].contains(what), "{n}: {changed:?}");
    }
    assert_eq!(count(host(&s, "win2"), "changed"), 0, "{s}");
    assert_eq!(count(host(&s, "h1"), "changed"), 0, "{s}");
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(winrm_requests(&lab, "win1"), 0);

    // reset over SSH undoes it on win2; a second reset has nothing to do
    let reset = [
        "reset", "--yes", "-i", &i, "--limit", "win2", "--output", "json",
    ];
    let o = kwinctl(&reset);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ws = lab.win_state_json("win2");
    assert_eq!(ws["services"], serde_json::json!({}), "{ws}");
    assert_eq!(ws["tasks"], serde_json::json!({}), "{ws}");
    assert_eq!(ws["networks"], serde_json::json!([]), "{ws}");
    let o = kwinctl(&reset);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    assert_eq!(winrm_requests(&lab, "win2"), 0);
}

/// A failing action over SSH: PowerShell's error, the exit code and what
/// ran before come back through sshd as over WinRM.
#[test]
fn a_failing_action_over_ssh_is_reported_with_its_error() {
    if !require_root() {
        return;
    }
    // win1 under cmd.exe, win2 under PowerShell as the DefaultShell (which
    // keeps only success or failure of an exit code:
    // docs/research/windows-ssh.md#ws9): the action's outcome and error
    // come from the script's output either way
    let lab = Lab::up_mixed(1, 2);
    for (w, shell) in [("win1", "cmd"), ("win2", "powershell")] {
        lab.win_ssh(w, shell);
        set_state(&lab, w, |ws| {
            ws["fail_kinds"] = serde_json::json!(["create_switch"])
        });
    }
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(
        s["failed_hosts"],
        serde_json::json!(["win1", "win2"]),
        "{s}"
    );
    for w in ["win1", "win2"] {
        let failed = common::failed_action(host(&s, w));
        assert!(
            failed["action"]
                .as_str()
                .unwrap()
                .contains("create internal Hyper-V switch"),
            "{w}: {failed}"
        );
        assert!(
            failed["stderr"]
                .as_str()
                .unwrap()
                .contains("simulated failure of create_switch"),
            "{w}: {failed}"
        );
        assert_eq!(winrm_requests(&lab, w), 0);
        // the script reports the failed action and exits 0: nothing rests
        // on the exit code either shell passes on
        let last = lab.win_ssh_sessions(w).pop().unwrap();
        assert_eq!(last["outcome"], "exit 0", "{w}: {last}");
    }
}

/// Every way in at once, in one inventory: Linux over SSH, Windows over
/// WinRM/NTLM, over WinRM/Kerberos (a host that refuses NTLM) and over
/// SSH. To add a transport, add a host and its [`Via`].
#[test]
fn mixed_cluster_linux_ssh_windows_ntlm_kerberos_and_ssh() {
    if !require_root() {
        return;
    }
    let windows: &[(&str, Via)] = &[
        ("win1", Via::WinRmNtlm),
        ("win2", Via::Ssh("cmd")),
        ("win3", Via::WinRmKerberos),
        ("win4", Via::Ssh("pwsh")),
    ];
    let lab = Lab::up_mixed(1, windows.len());
    let kdc = lab.kdc();
    kdc.kinit("10h");
    for (name, via) in windows {
        reach(&lab, &kdc, name, *via);
    }
    let i = lab.inv();
    let o = run(&kdc, &["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in std::iter::once("h1").chain(windows.iter().map(|(n, _)| *n)) {
        assert_eq!(host(&s, h)["status"], "changed", "{h}: {s}");
        assert_eq!(count(host(&s, h), "failed"), 0, "{h}: {s}");
    }
    for (name, via) in windows {
        let (winrm, ssh) = (winrm_requests(&lab, name), lab.win_ssh_sessions(name).len());
        let kerberos = std::fs::read_to_string(lab.dir().join(format!("hosts/{name}/winsim.log")))
            .unwrap_or_default()
            .contains("kerberos: accepted");
        match via {
            Via::WinRmNtlm => assert!(winrm > 0 && ssh == 0 && !kerberos, "{name}: {winrm} {ssh}"),
            Via::WinRmKerberos => {
                assert!(winrm > 0 && ssh == 0 && kerberos, "{name}: {winrm} {ssh}")
            }
            Via::Ssh(shell) => {
                assert!(winrm == 0 && ssh > 0, "{name}: {winrm} {ssh}");
                // the shell sshd started: PowerShell 7 by its own path
                let first = &lab.win_ssh_sessions(name)[0];
                let line = first["shell_line"].as_str().unwrap();
                let program = if *shell == "pwsh" {
                    r#"\7\pwsh.exe" -c "#
                } else {
                    r#"\cmd.exe" /c "#
                };
                assert!(line.contains(program), "{name}: {line}");
            }
        }
    }
    let o = run(&kdc, &["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // every node routes to every other node's pod CIDR, whichever way
    // kwinctl reached it
    let o = run(&kdc, &["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let h1 = lab.routes("h1");
    for (name, _) in windows {
        let cidr = lab.pod_cidr(name).to_string();
        assert!(h1.contains(&format!("{cidr} via {}", lab.ip(name))), "{h1}");
    }
}

/// The l2bridge profile over SSH with `up --reboot`: the Containers
/// feature's restart is kwinctl's own (shutdown.exe, then it reconnects
/// over SSH and goes on), and the external vSwitch moves the node's
/// address while the call that creates it runs.
#[test]
fn the_l2bridge_profile_comes_up_over_ssh_with_up_reboot() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], None, "1.30.4", "1.7.20", None);
    lab.win_ssh("win1", "powershell");
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--reboot", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let st = crate::lab_l2bridge::restarted_once_for_containers(&lab, &summary(&o), "win1");
    assert!(st["vswitch"].is_object(), "{st}");
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(winrm_requests(&lab, "win1"), 0);
}

/// When the vSwitch's address move does cut the connection (winsim's knob
/// `vswitch_drops_connection`: the call in flight dies), the step that
/// creates it runs detached from the SSH session (docs/windows.md, "The
/// vSwitch blip"): no session is cut, and one `up` converges.
#[test]
fn an_address_move_that_cuts_the_connection_over_ssh() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], Some("Installed"), "1.30.4", "1.7.20", None);
    lab.win_ssh("win1", "cmd");
    set_state(&lab, "win1", |ws| {
        ws["vswitch_drops_connection"] = serde_json::json!(true)
    });
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(lab.win_state_json("win1")["vswitch"].is_object());
    assert!(
        lab.win_ssh_sessions("win1")
            .iter()
            .all(|e| e["outcome"] != "connection dropped"),
        "a session was cut"
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

/// An Ansible inventory of the lab with the Windows host over SSH
/// (`ansible_connection=ssh`, `ansible_shell_type=cmd`: Windows' default
/// shell), imported and brought up: kwinctl reaches it over SSH as Ansible
/// would.
#[test]
fn an_ansible_inventory_with_windows_over_ssh_is_imported_and_brought_up() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    lab.win_ssh("win1", "cmd");
    let d = lab.dir();
    let ini = d.join("ansible-hosts.ini");
    common::write(
        &ini,
        &format!(
            "[kube_control_plane]\nh1 ansible_host={}\n\n[windows]\nwin1 ansible_host={}\n\n\
             [all:vars]\nansible_user=root\nansible_ssh_private_key_file={}\n\n\
             [windows:vars]\nansible_connection=ssh\nansible_shell_type=cmd\nansible_port=22\n",
            lab.ip("h1"),
            lab.ip("win1"),
            d.join("id_ed25519").display()
        ),
    );
    let (imported, _) = super::lab_import::import_completed(&lab, &ini, "from-ini", &[]);
    let i = imported.to_str().unwrap();
    let o = kwinctl(&["up", "-i", i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "win1")["status"], "changed", "{s}");
    assert_eq!(
        host(&s, "win1")["route"],
        format!("ssh root@{}:22", lab.ip("win1")),
        "{s}"
    );
    assert_eq!(winrm_requests(&lab, "win1"), 0);
    assert!(!lab.win_ssh_sessions("win1").is_empty());
    let o = kwinctl(&["verify", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
