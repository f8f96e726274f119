//! The simulated Windows host knows the release of its (fake) kubelet.exe
//! and kube-proxy.exe and refuses to start one with flags that release does
//! not have, as the real binary exits: `up`'s own script with a deliberately
//! wrong flag set — the one kwinctl generated before the flag table — fails
//! on it, and `up` with the generated flags passes, for an old release (1.9,
//! no --windows-service: a scheduled task on Windows Server 2016) and a new
//! one (1.16, a native service on Windows Server 2019).

use crate::common;

use common::lab::{Lab, require_root};
use common::{count, host, kwinctl, summary, text, write};

/// Serve `content` as binary `b` under the lab's downloads, in folder
/// `v<dir>`, and point the inventory's `windows.binaries.<b>` at it.
fn put_binary(lab: &Lab, dir: &str, b: &str, content: &str) {
    let dl = lab.dir().join("dl").join(format!("v{dir}"));
    std::fs::create_dir_all(&dl).unwrap();
    std::fs::write(dl.join(format!("{b}.exe")), content).unwrap();
    let sha: String = {
        use sha2::Digest;
        sha2::Sha256::digest(content.as_bytes())
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let start = inv.find(&format!("        {b}: {{")).unwrap();
    let end = start + inv[start..].find('\n').unwrap();
    let url = format!("https://dl.lab.invalid/v{dir}/{b}.exe");
    write(
        lab.inventory(),
        &format!(
            "{}        {b}: {{ url: \"{url}\", sha256: {sha} }}{}",
            &inv[..start],
            &inv[end..]
        ),
    );
}

/// The lab's fake binaries of `version` (the format lab.sh's `fake_binaries`
/// writes), and the inventory switched to them.
fn use_release(lab: &Lab, version: &str) {
    for b in ["kubelet", "kube-proxy"] {
        let content = format!("MZ kwinctl lab fake {b}.exe\nKubernetes v{version}\n");
        put_binary(lab, version, b, &content);
    }
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let start = inv.find("  kubernetes_version: ").unwrap();
    let end = start + inv[start..].find('\n').unwrap();
    write(
        lab.inventory(),
        &format!(
            "{}  kubernetes_version: \"{version}\"{}",
            &inv[..start],
            &inv[end..]
        ),
    );
}

fn set_build(lab: &Lab, build: &str) {
    let mut ws = lab.win_state_json("win1");
    ws["build"] = build.into();
    write(&lab.win_state("win1"), &ws.to_string());
}

/// `render`'s script for win1 (what `up` sends to a fresh host), with the
/// kubelet's command line in its simulator header replaced by `args`; with
/// `only`, just the prelude and that action. Also the kubelet action's id.
/// (`render` masks the kubeconfig it uploads: its content is put back.)
fn script_with_kubelet_args(lab: &Lab, args: &str, only: bool) -> (String, u64) {
    let o = kwinctl(&["render", "-i", &lab.inv(), "--host", "win1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut rendered = String::from_utf8_lossy(&o.stdout).into_owned();
    let start = rendered
        .find("<secret file ")
        .expect("render masks the kubeconfig");
    let end = start + rendered[start..].find('>').unwrap() + 1;
    let kubeconfig = std::fs::read(lab.dir().join("kubeconfig")).unwrap();
    rendered.replace_range(start..end, &{
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(kubeconfig)
    });
    let mut out = String::new();
    let mut id = None;
    let mut keep = true;
    for line in rendered.lines() {
        if let Some(j) = line.strip_prefix("# kwinctl-sim: ") {
            let mut h: serde_json::Value = serde_json::from_str(j).unwrap();
            keep = !only || h["kind"] == "prelude";
            if h["service"]["name"] == "kubelet" {
                let s = &mut h["service"];
                s["binpath"] = format!(r"C:\k\kubelet.exe {args}").into();
                s["args"] = args.into();
                s["fingerprint"] = "0ld0ld0ld0ld0ld0".into();
                id = h["id"].as_u64();
                keep = true;
            }
            if keep {
                out += &format!("# kwinctl-sim: {h}\n");
            }
        } else if keep {
            out += line;
            out.push('\n');
        }
    }
    (out, id.expect("a kubelet action in the rendered script"))
}

/// Run a script on win1 over WinRM, as `up` does; its stdout.
fn run_on_win1(lab: &Lab, script: &str) -> String {
    lab.run_windows("win1", script).expect("run").stdout
}

/// The `KWE` lines of the failed action, after checking that the one that
/// failed is the kubelet's (`id`) and every one before it passed.
fn failure(stdout: &str, id: u64) -> String {
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("KWX ") && l.contains(" failed"))
        .collect();
    assert_eq!(failed, [format!("KWX {id} failed 1")], "{stdout}");
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("KWE "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn up_passes_and_is_idempotent(lab: &Lab) {
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(count(host(&summary(&o), "win1"), "failed"), 0);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i, "--reach", "none"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn an_old_release_refuses_the_old_flags_and_runs_the_generated_ones() {
    if !require_root() {
        return;
    }
    // (a Linux control plane keeps the cluster lock)
    let lab = Lab::up_mixed(1, 1);
    use_release(&lab, "1.9.11");
    let ip = lab.ip("win1");
    // kwinctl before the flag table: --windows-service, which 1.9 lacks
    let old = format!(
        r#"--windows-service --hostname-override={ip} --pod-infra-container-image=apprenda/pause --resolv-conf="" --kubeconfig=C:\k\config"#
    );
    let (script, id) = script_with_kubelet_args(&lab, &old, false);
    let why = failure(&run_on_win1(&lab, &script), id);
    assert!(
        why.contains(
            "kubelet exited right after it started: Error: unknown flag: --windows-service"
        ),
        "{why}"
    );
    let ws = lab.win_state_json("win1");
    assert_eq!(ws["tasks"]["kubelet"]["running"], false, "{ws}");
    assert!(
        ws["logs"][r"C:\k\logs\kubelet.err.log"]
            .as_str()
            .unwrap()
            .contains("unknown flag: --windows-service")
    );

    // the generated flag set: tasks for both binaries, running, and again
    // after a reboot
    up_passes_and_is_idempotent(&lab);
    let ws = lab.win_state_json("win1");
    for b in ["kubelet", "kube-proxy"] {
        assert_eq!(ws["tasks"][b]["running"], true, "{b}: {ws}");
        assert_eq!(ws["services"].get(b), None, "{b}: {ws}");
    }
    assert!(
        ws["tasks"]["kubelet"]["service"]["args"]
            .as_str()
            .unwrap()
            .contains("--require-kubeconfig --cgroups-per-qos=false --enforce-node-allocatable= ")
    );
    // the tasks have no trigger of their own: after a reboot that loses
    // the network, kwinctl's boot task restores it and then starts them
    lab.reboot_windows("win1", true);
    let ws = lab.win_state_json("win1");
    for b in ["kubelet", "kube-proxy"] {
        assert_eq!(ws["tasks"][b]["running"], true, "{b}: {ws}");
        assert_eq!(ws["tasks"][b]["startup"], false, "{b}: {ws}");
    }
    let o = kwinctl(&["verify", "-i", &lab.inv(), "--reach", "none"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// 1.11 to 1.23 on the transparent profile: refused before any host
/// changes (its pods would get no IP, PR #61940); what those releases'
/// kubelets refuse is winsim's own table (winsim/tests/test_k8sbin.py).
#[test]
fn a_release_whose_pods_get_no_ip_is_refused_before_anything_changes() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    set_build(&lab, "10.0.17763");
    use_release(&lab, "1.16.15");
    let before = lab.win_state_json("win1");
    let o = kwinctl(&["up", "-i", &lab.inv()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("gets no pod IP"), "{}", text(&o));
    assert_eq!(lab.win_state_json("win1")["services"], before["services"]);
}

#[test]
fn binaries_of_another_release_are_refused_before_anything_changes() {
    if !require_root() {
        return;
    }
    // (a Linux control plane keeps the cluster lock)
    let lab = Lab::up_mixed(1, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // the inventory now says 1.9, but the binaries it names are still 1.10
    let inv = std::fs::read_to_string(lab.inventory()).unwrap().replace(
        "kubernetes_version: \"1.10.13\"",
        "kubernetes_version: \"1.9.11\"",
    );
    write(lab.inventory(), &inv);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = host(&summary(&o), "win1")["error"].to_string();
    assert!(
        err.contains(r"C:\\k\\kubelet.exe is Kubernetes 1.10.13 (its --version), but the inventory declares kubernetes_version 1.9.11"),
        "{err}"
    );
    // new binaries that are not the declared release are not put in place
    use_release(&lab, "1.9.11");
    put_binary(
        &lab,
        "1.9.11",
        "kubelet",
        "MZ kwinctl lab fake kubelet.exe\nKubernetes v1.8.15\n",
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let failed = common::failed_action(host(&s, "win1"));
    assert!(
        failed["stderr"]
            .as_str()
            .unwrap()
            .contains("--version says Kubernetes v1.8.15, but the inventory declares kubernetes_version 1.9.11"),
        "{s}"
    );
    assert_eq!(
        lab.win_state_json("win1")["file_versions"][r"C:\k\kubelet.exe"],
        "Kubernetes v1.10.13"
    );
}

#[test]
fn a_pause_image_of_another_windows_build_is_refused() {
    if !require_root() {
        return;
    }
    // (a Linux control plane keeps the cluster lock)
    let lab = Lab::up_mixed(1, 1);
    // the registry's apprenda/pause is a Windows Server 2019 image here
    let mut ws = lab.win_state_json("win1");
    ws["image_os"] = serde_json::json!({"apprenda/pause:latest": "10.0.17763.1"});
    write(&lab.win_state("win1"), &ws.to_string());
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let failed = common::failed_action(host(&s, "win1"));
    assert_eq!(failed["action"], "pull image apprenda/pause", "{s}");
    assert!(
        failed["stderr"]
            .as_str()
            .unwrap()
            .contains("is built for Windows 10.0.17763.1, but this host is build 14393"),
        "{s}"
    );
    // the next run's preflight reads the present image's OS version
    let o = kwinctl(&["plan", "-i", &lab.inv(), "--output", "json"]);
    let err = host(&summary(&o), "win1")["error"].to_string();
    assert!(
        err.contains("is built for Windows 10.0.17763.1 but the host is build 14393")
            && err
                .contains("use a pause image built for Windows build 14393 (cluster.pause_image)"),
        "{err}"
    );
}
