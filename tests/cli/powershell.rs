//! Every PowerShell script kwinctl renders — every action, the probe — parses
//! with no error under the tree-sitter-powershell grammar; hostile inventory
//! values stay inside string literals (the commands a script runs are exactly
//! kwinctl's); snapshots pin the rendered text. There is no PowerShell on
//! this machine: this is the only check the PowerShell itself gets here.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use kwinctl::inventory::Inventory;
use kwinctl::os::windows::script::{self, ScriptHost, WinProbe};
use kwinctl::os::windows::{WinAction, examples::examples};

/// The seeds' topology (Kubernetes 1.13, Windows Server 2016, transparent).
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

/// Every command the rendered scripts may invoke.
const ALLOWED: &[&str] = &[
    "New-Item",
    "Set-Content",
    "Out-Null",
    "Get-WindowsFeature",
    "Install-WindowsFeature",
    "Set-NetIPInterface",
    "Get-NetIPInterface",
    "Where-Object",
    "New-VMSwitch",
    "Invoke-KwNative",
    "Get-NetIPAddress",
    "Remove-NetIPAddress",
    "New-NetIPAddress",
    "Get-KwRoutableIndex",
    "Get-NetRoute",
    "Remove-NetRoute",
    "New-NetRoute",
    "Split-Path",
    "Invoke-WebRequest",
    "Get-FileHash",
    "Remove-Item",
    "Get-CimInstance",
    "ForEach-Object",
    "Stop-Service",
    "Move-Item",
    "Start-Service",
    "Get-Service",
    "Set-ItemProperty",
    "Set-Service",
    "New-Service",
    "Invoke-KwAction",
    "Write-Output",
    "Out-String",
    "Get-NetAdapter",
    "Get-Module",
    "Get-KwOr",
    "docker",
    "Get-VMSwitch",
    "ConvertFrom-Json",
    "Test-Path",
    "sc.exe",
    "shutdown.exe",
    "Restart-Service",
    "Get-ItemProperty",
    "Get-Content",
    "Test-Connection",
    "ConvertTo-Json",
    "Remove-VMSwitch",
    "Start-Sleep",
    "Get-Process",
    "Stop-Process",
    "Select-Object",
    "Confirm-KwRunning",
    "Get-ScheduledTask",
    "Stop-ScheduledTask",
    "Unregister-ScheduledTask",
    "New-ScheduledTaskAction",
    "New-ScheduledTaskTrigger",
    "New-ScheduledTaskPrincipal",
    "New-ScheduledTaskSettingsSet",
    "New-TimeSpan",
    "Register-ScheduledTask",
    "Start-ScheduledTask",
    // the start script a scheduled task runs (rendered into install_task)
    "Start-Process",
    // the boot task's script
    "Write-KwLog",
    "Get-NetFirewallRule",
    "New-NetFirewallRule",
    "Remove-NetFirewallRule",
    "Invoke-CimMethod",
    "Invoke-KwQuiet",
    "Get-KwRouteKey",
    "Invoke-KwStep",
    "Add-Content",
    "Get-Date",
    // the l2bridge profile
    "Copy-Item",
    "Get-ChildItem",
    "Join-Path",
    "Add-Type",
    "Invoke-KwHns",
    "Sort-Object",
    "Confirm-KwNetwork",
    "Confirm-KwEndpoint",
    "Confirm-KwForwarding",
    "Confirm-KwRoutes",
    // a push's scripts (src/transfer/windows.rs)
    "Get-KwPushed",
    "Get-Item",
    "New-Object",
];

fn parse(label: &str, script: &str) -> BTreeSet<String> {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_powershell::LANGUAGE.into())
        .expect("grammar");
    let tree = p.parse(script, None).expect("parse");
    let root = tree.root_node();
    let mut commands = BTreeSet::new();
    let mut stack = vec![root];
    let mut first_error = None;
    while let Some(n) = stack.pop() {
        if (n.is_error() || n.is_missing()) && first_error.is_none() {
            first_error = Some(n);
        }
        if n.kind() == "command_name" {
            commands.insert(n.utf8_text(script.as_bytes()).unwrap().to_string());
        }
        let mut c = n.walk();
        for child in n.children(&mut c) {
            stack.push(child);
        }
    }
    if root.has_error() {
        let n = first_error.unwrap_or(root);
        let line = n.start_position().row;
        let context: Vec<&str> = script
            .lines()
            .skip(line.saturating_sub(3))
            .take(6)
            .collect();
        panic!(
            "{label}: PowerShell grammar error at line {} column {} ({}):\n{}",
            line + 1,
            n.start_position().column + 1,
            n.kind(),
            context.join("\n")
        );
    }
    commands
}

fn only_ours(label: &str, commands: &BTreeSet<String>) {
    let extra: Vec<&String> = commands
        .iter()
        .filter(|c| !ALLOWED.contains(&c.as_str()))
        .collect();
    assert!(extra.is_empty(), "{label}: unexpected commands {extra:?}");
}

fn load(text: &str) -> Inventory {
    Inventory::parse(Path::new(EXAMPLE), text).unwrap_or_else(|e| panic!("{e}"))
}

/// The example: the modern profile (l2bridge).
const L2BRIDGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/inventories/example.yaml");

/// The l2bridge profile's scripts: they parse, use only known commands,
/// carry the spec's steps, and are pinned.
#[test]
fn l2bridge_inventory_scripts_parse_and_are_pinned() {
    let inv = Inventory::parse(
        Path::new(L2BRIDGE),
        &std::fs::read_to_string(L2BRIDGE).unwrap(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let scripts = common::windows_scripts(&inv);
    assert_eq!(scripts.len(), 2);
    for (host, s) in &scripts {
        only_ours(host, &parse(host, s));
        for step in [
            "[KwHns]::HNSCall($Method, $Path, $body, [ref]$raw)",
            "Name = 'cbr0'; Type = 'L2Bridge'; NetworkAdapterName = 'Ethernet'",
            "Name = 'External'; Type = 'L2Bridge'",
            "SystemType = 'Host'; CompartmentId = 1",
            "'-n', 'k8s.io', 'images', 'pull', 'registry.k8s.io/pause:3.10.2'",
            "--container-runtime-endpoint=npipe:////./pipe/containerd-containerd",
            "--proxy-mode=kernelspace --network-name=cbr0 --root-hnsendpoint-name=cbr0_ep --enable-dsr=true --feature-gates=WinDSR=true",
            "-StartupType 'Automatic'",
        ] {
            assert!(s.contains(step), "{host}: no {step:?}");
        }
        assert!(!s.contains("--pod-infra-container-image"), "{host}");
        assert!(!s.contains("docker"), "{host}");
    }
    insta::assert_snapshot!("l2bridge_inventory", one_snapshot(&scripts));
}

/// An inventory's scripts as one snapshot, host after host: a change to
/// every host's script is one file to review.
fn one_snapshot(scripts: &[(String, String)]) -> String {
    scripts
        .iter()
        .map(|(host, s)| format!("######## {host} ########\n{s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn example_inventory_scripts_parse_and_are_pinned() {
    let inv = load(&std::fs::read_to_string(EXAMPLE).unwrap());
    let scripts = common::windows_scripts(&inv);
    assert_eq!(scripts.len(), 2);
    for (host, s) in &scripts {
        let cmds = parse(host, s);
        only_ours(host, &cmds);
        // recognisable against the seed, step by step
        for step in [
            "New-VMSwitch -Name 'KubeProxySwitch' -SwitchType Internal",
            "'network', 'create', '-d', 'transparent', '-o', 'com.docker.network.windowsshim.interface=Ethernet 2', '--gateway'",
            "$alias = 'vEthernet (HNSTransparent)'",
            "New-NetRoute -DestinationPrefix '192.168.0.0/24' -InterfaceIndex $ifIndex -NextHop '10.0.0.10'",
            "Install-WindowsFeature -Name Routing",
            "CONTAINER_NETWORK=kwinctl",
            "INTERFACE_TO_ADD_SERVICE_IP=vEthernet (KubeProxySwitch)",
            "--pod-infra-container-image=apprenda/pause",
            "--resolv-conf= ",
            "--proxy-mode=userspace",
            "--cgroups-per-qos=false --enforce-node-allocatable= ",
            r"--kubeconfig=C:\k\config",
        ] {
            assert!(s.contains(step), "{host} lacks {step:?}");
        }
    }
    insta::assert_snapshot!("seed_inventory", one_snapshot(&scripts));
}

#[test]
fn every_action_and_the_probe_parse() {
    let r = kwinctl::os::renderer();
    let actions = examples();
    let host = ScriptHost {
        name: "w",
        cluster: "c",
        address: "10.0.0.11".parse().unwrap(),
        adapter: None,
    };
    for a in &actions {
        let s = script::script(&r, &host, &[a], None);
        only_ours(&format!("{a:?}"), &parse(&format!("{a:?}"), &s));
    }
    let refs: Vec<&WinAction> = actions.iter().collect();
    let files = vec![
        r"C:\k\kubelet.exe".to_string(),
        r"C:\k\kube-proxy.exe".into(),
    ];
    let services = vec!["kubelet".to_string(), "kube-proxy".into()];
    let reach = ["10.0.0.10".parse().unwrap(), "10.0.0.12".parse().unwrap()];
    let images = vec!["apprenda/pause".to_string()];
    let probe = WinProbe {
        files: &files,
        services: &services,
        tasks: &services,
        folders: &kwinctl::os::windows::leftovers::folders(),
        binaries: &files,
        images: &images,
        reach: &reach,
        profile: kwinctl::inventory::WindowsProfile::L2Bridge,
    };
    let host = ScriptHost {
        adapter: Some("Ethernet 2"),
        ..host
    };
    let s = script::script(&r, &host, &refs, Some(&probe));
    only_ours("all actions", &parse("all actions", &s));
    // every block carries its simulator header, in order
    let ids: Vec<u64> = s
        .lines()
        .filter_map(|l| l.strip_prefix("# kwinctl-sim: "))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .filter_map(|v| v["id"].as_u64())
        .collect();
    assert_eq!(ids, (0..actions.len() as u64).collect::<Vec<_>>());
    // TLS 1.2 before the download (Windows Server 2016's .NET offers SSL 3
    // and TLS 1.0 only)
    assert!(
        s.contains("[Net.SecurityProtocolType]::Tls12\nInvoke-WebRequest -UseBasicParsing"),
        "{s}"
    );
    insta::assert_snapshot!("every_action_with_probe", s);
    let s = script::probe(&r, &probe);
    only_ours("probe", &parse("probe", &s));
    // the start script a scheduled task runs parses too, and keeps a
    // hostile argument inside its string
    let task = kwinctl::os::windows::service::example_task();
    let s = script::start_script(&r, &task);
    let cmds = parse("start script", &s);
    only_ours("start script", &cmds);
    assert!(
        s.contains("$arguments = '--hostname-override=10.0.0.11"),
        "{s}"
    );
    insta::assert_snapshot!("start_script", s);
    // and the boot task's script
    let s = script::boot_script(&r, &kwinctl::os::windows::boot::example());
    only_ours("boot script", &parse("boot script", &s));
    insta::assert_snapshot!("boot_script", s);
    // plan's read-only file reader, with a path that needs quoting
    let s = script::read_files(
        &r,
        &[
            r"C:\k\kwinctl\kubelet-start.ps1".into(),
            "C:\\it's.ps1".into(),
        ],
    );
    only_ours("read files", &parse("read files", &s));
    assert!(s.contains("'C:\\it''s.ps1'"), "{s}");
}

/// The scripts of the action that runs detached from the connection (the
/// first HNS network drops the host's network): the start script (with the
/// task's script inside it as a string), the task's script itself and the
/// result reader parse, use only kwinctl's commands, and the task's script
/// writes the action's lines to the result file the reader reads.
#[test]
fn the_detached_action_s_scripts_parse() {
    use kwinctl::os::windows::detach;
    let r = kwinctl::os::renderer();
    let host = ScriptHost {
        name: "w",
        cluster: "c",
        address: "10.0.0.11".parse().unwrap(),
        adapter: None,
    };
    let actions = examples();
    let a = actions
        .iter()
        .find(|a| detach::cuts_connection(a))
        .expect("an example of the detached action");
    let d = detach::scripts(&r, &host, a, "run1-7");
    let task = detach::task_script(&r, &host, a, "run1-7");
    for (label, s) in [
        ("detach start", &d.start),
        ("detach task", &task),
        ("detach result", &d.result),
    ] {
        only_ours(label, &parse(label, s));
    }
    // the start script writes the task's script (quoted) and starts it;
    // the task writes the action's lines where the reader looks
    assert!(d.start.contains("Start-ScheduledTask"), "{}", d.start);
    assert!(task.contains("$kwLines = @(Invoke-KwAction 0 {"), "{task}");
    assert!(
        task.contains(r"$kwResult = 'C:\k\kwinctl\detached\run1-7.result'"),
        "{task}"
    );
    assert!(d.result.contains("$token = 'run1-7'"), "{}", d.result);
    // the simulator's headers: the prelude and detach_start; detach_result
    let kinds: Vec<String> = d
        .start
        .lines()
        .chain(d.result.lines())
        .filter_map(|l| l.strip_prefix("# kwinctl-sim: "))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .map(|v| v["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["prelude", "detach_start", "detach_result"]);
    assert!(
        d.check.contains(r"\kwinctl\kwinctl-detached"),
        "{}",
        d.check
    );
    insta::assert_snapshot!("detached_start", d.start);
    insta::assert_snapshot!("detached_task", task);
    insta::assert_snapshot!("detached_result", d.result);
}

/// A push's scripts, both ways a file travels: they parse and run only
/// known commands (ps51.rs checks their parameters against PowerShell 5.1).
#[test]
fn the_push_scripts_parse() {
    let scripts = common::push_scripts();
    assert_eq!(scripts.len(), 3);
    for (label, s) in &scripts {
        only_ours(label, &parse(label, s));
    }
}

/// The example with `value` in the adapter's name, (without `"`, refused
/// there) in the transparent network's card and (without its white space)
/// in a binary's URL: the values that reach scripts as free text (the
/// others are refused at load unless plain: see
/// `values_that_could_change_a_command_line_are_refused`).
fn with_values(value: &str) -> String {
    let url_value: String = value.chars().filter(|c| !c.is_whitespace()).collect();
    let card: String = value.chars().filter(|c| *c != '"').collect();
    std::fs::read_to_string(EXAMPLE).unwrap().replace(
        "    address: 10.0.0.11\n",
        &format!(
            "    address: 10.0.0.11\n    windows:\n      adapter: {:?}\n      transparent_adapter: {:?}\n      binaries:\n        kubelet: {{ url: {:?}, sha256: {} }}\n",
            format!("Ethernet {value}"),
            format!("Ethernet 2 {card}"),
            format!("https://h/{url_value}"),
            "ab".repeat(32)
        ),
    )
}

#[test]
fn values_that_could_change_a_command_line_are_refused() {
    let base = std::fs::read_to_string(EXAMPLE).unwrap();
    for (from, to, want) in [
        // CommandLineToArgvW: `\"` ends the quoted argument; the rest became
        // kubelet flags
        (
            "  kubeconfig: example.kubeconfig\n",
            "  kubeconfig: example.kubeconfig\n  pause_image: 'img\\\" --anonymous-auth=true x'\n",
            "pause_image",
        ),
        (
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    windows: { network_name: \"n'; rm\" }\n",
            "network_name",
        ),
        (
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    windows: { adapter: \"Eth\\nernet\" }\n",
            "windows.adapter",
        ),
        // a native argument to docker.exe: Windows PowerShell 5.1 passes an
        // inner `"` unescaped, so the rest would become docker's arguments
        (
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    windows: { transparent_adapter: 'Ethernet 2\" --subnet x' }\n",
            "windows.transparent_adapter",
        ),
        (
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    windows: { adapter: Ethernet, transparent_adapter: ethernet }\n",
            "is the routable adapter",
        ),
    ] {
        let text = base.replacen(from, to, 1);
        assert_ne!(text, base);
        let e = Inventory::parse(Path::new(EXAMPLE), &text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {to}"))
            .to_string();
        assert!(e.contains(want) && e.contains("fix:"), "{e}");
    }
}

/// Commands with a stderr redirection (`2>&1`, `2>$null`) that run while
/// `$ErrorActionPreference` is not Continue. Windows PowerShell 5.1 turns
/// the first stderr line of a redirected native command into a terminating
/// error under 'Stop' (PowerShell/PowerShell#4002, "any 2> redirection
/// triggers the symptom"; PowerShell-Docs#6466: changed only in 7.1), so a
/// program that succeeds with a warning would fail. The preference is
/// read lexically: the last assignment before the command in the nearest
/// enclosing function or script block that has one; none at all means
/// 'Stop' (what kwinctl's bootstrap and scripts set).
fn redirections_under_stop(label: &str, src: &str) -> Vec<String> {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_powershell::LANGUAGE.into())
        .unwrap();
    let tree = p.parse(src, None).unwrap();
    let text = |n: tree_sitter::Node| n.utf8_text(src.as_bytes()).unwrap().to_string();
    let scope_of = |n: tree_sitter::Node| {
        let mut cur = n.parent();
        while let Some(c) = cur {
            if matches!(c.kind(), "script_block" | "function_statement") {
                return c.id();
            }
            cur = c.parent();
        }
        tree.root_node().id()
    };
    let mut assignments = Vec::new(); // (scope, start, value)
    let mut redirected = Vec::new();
    let mut stack = vec![tree.root_node()];
    while let Some(n) = stack.pop() {
        if n.kind() == "assignment_expression" {
            let t = text(n);
            if let Some((lhs, rhs)) = t.split_once('=')
                && lhs.trim().eq_ignore_ascii_case("$ErrorActionPreference")
            {
                let v = rhs.trim().trim_matches(['\'', '"']).to_ascii_lowercase();
                assignments.push((scope_of(n), n.start_byte(), v));
            }
        }
        if n.kind() == "command" {
            let mut w = n.walk();
            let redirects = n.children(&mut w).any(|c| {
                let mut w2 = c.walk();
                c.kind() == "command_elements"
                    && c.children(&mut w2).any(|e| {
                        e.kind() == "redirection"
                            || (e.kind() == "generic_token"
                                && (text(e).starts_with("2>") || text(e).starts_with("*>")))
                    })
            });
            if redirects {
                redirected.push(n);
            }
        }
        let mut w = n.walk();
        stack.extend(n.children(&mut w));
    }
    let mut out = Vec::new();
    for cmd in redirected {
        let mut scopes = Vec::new();
        let mut cur = cmd.parent();
        while let Some(c) = cur {
            if matches!(c.kind(), "script_block" | "function_statement") {
                scopes.push(c.id());
            }
            cur = c.parent();
        }
        scopes.push(tree.root_node().id());
        let decided = scopes.iter().find_map(|sc| {
            assignments
                .iter()
                .filter(|(s, at, _)| s == sc && *at < cmd.start_byte())
                .max_by_key(|(_, at, _)| *at)
                .map(|(_, _, v)| v.clone())
        });
        let v = decided.unwrap_or_else(|| "stop".into());
        if v != "continue" && v != "silentlycontinue" {
            out.push(format!(
                "{label}:{}: {} runs under $ErrorActionPreference '{v}'",
                cmd.start_position().row + 1,
                text(cmd)
            ));
        }
    }
    out
}

#[test]
fn native_stderr_redirections_run_under_continue() {
    let r = kwinctl::os::renderer();
    let host = ScriptHost {
        name: "w",
        cluster: "c",
        address: "10.0.0.11".parse().unwrap(),
        adapter: None,
    };
    let actions = examples();
    let refs: Vec<&WinAction> = actions.iter().collect();
    let names = vec!["kubelet".to_string()];
    let probe = WinProbe {
        files: &names,
        services: &names,
        tasks: &names,
        folders: &kwinctl::os::windows::leftovers::folders(),
        binaries: &names,
        images: &names,
        reach: &[],
        profile: kwinctl::inventory::WindowsProfile::L2Bridge,
    };
    let mut scripts = vec![
        (
            "all actions".to_string(),
            script::script(&r, &host, &refs, Some(&probe)),
        ),
        (
            "boot script".into(),
            script::boot_script(&r, &kwinctl::os::windows::boot::example()),
        ),
        ("restart".into(), script::restart(&r)),
        (
            "l2bridge boot script".into(),
            script::boot_script(&r, &kwinctl::os::windows::boot::example_l2bridge()),
        ),
        (
            "start script".into(),
            script::start_script(&r, &kwinctl::os::windows::service::example_task()),
        ),
    ];
    scripts.extend(common::windows_scripts(&load(
        &std::fs::read_to_string(EXAMPLE).unwrap(),
    )));
    let mut found = 0;
    for (label, s) in &scripts {
        let bad = redirections_under_stop(label, s);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        found += s.matches("2>").count();
    }
    assert!(found > 0, "no redirection checked");
    // the check finds the lines kwinctl had (docs/research/windows-transparent.md#defect-14)
    for bad in [
        "$ErrorActionPreference = 'Stop'\nfunction F {\n    param([string]$Exe)\n    $out = & $Exe 2>&1\n}\n",
        "$ErrorActionPreference = 'Stop'\n$v = docker version --format x 2>$null\n",
        "$ErrorActionPreference = 'Continue'\nfunction F {\n    $ErrorActionPreference = 'Stop'\n    sc.exe qfailure x 2>$null\n}\n",
    ] {
        assert!(!redirections_under_stop("seed", bad).is_empty(), "{bad}");
    }
    assert!(
        redirections_under_stop(
            "good",
            "$ErrorActionPreference = 'Stop'\nfunction F {\n    param([string]$Exe)\n    $ErrorActionPreference = 'Continue'\n    $out = & $Exe 2>&1\n}\n"
        )
        .is_empty()
    );
}

fn shape(script: &str) -> String {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_powershell::LANGUAGE.into())
        .unwrap();
    p.parse(script, None).unwrap().root_node().to_sexp()
}

#[test]
fn hostile_values_stay_inside_strings() {
    // quotes of every kind PowerShell honours, subexpressions, backticks,
    // statement separators and newlines
    let hostile =
        "x'; Remove-Item -Recurse C:\\ ; \u{2018}$(Stop-Computer)\u{2019} \" `n; Stop-Computer #";
    let benign = "SAFE";
    let bad = common::windows_scripts(&load(&with_values(hostile)));
    let good = common::windows_scripts(&load(&with_values(benign)));
    assert_eq!(bad.len(), 2);
    for ((host, b), (_, g)) in bad.iter().zip(&good) {
        let cmds = parse(host, b);
        only_ours(host, &cmds);
        assert!(!cmds.contains("Stop-Computer"), "{host}: {cmds:?}");
        // the hostile values change no part of the syntax tree's shape
        assert_eq!(
            shape(b),
            shape(g),
            "{host}: hostile values changed the script's structure"
        );
    }
    // the values did reach Win01's script (the adapter, the card docker is
    // told to use, and the URL)
    assert!(bad[0].1.contains("Stop-Computer"), "{}", bad[0].1);
    assert!(
        bad[0]
            .1
            .contains("'com.docker.network.windowsshim.interface=Ethernet 2 x''; Remove-Item"),
        "{}",
        bad[0].1
    );
}

#[test]
fn the_grammar_check_catches_broken_powershell() {
    for broken in [
        "$x = 'unterminated\n",
        "Invoke-KwAction 0 {\nNew-Item\n",
        "if ($a -eq) { }\n",
    ] {
        let r = std::panic::catch_unwind(|| parse("broken", broken));
        assert!(r.is_err(), "not caught: {broken:?}");
    }
}

#[test]
fn many_routes_parse() {
    let mut text = String::from(
        "cluster:\n  name: big\n  cluster_cidr: 192.168.0.0/16\n  service_cidr: 10.96.0.0/12\n  api_server: http://10.0.0.10:8080\n  kubernetes_version: \"1.7.16\"\nhosts:\n",
    );
    for i in 0..120 {
        let os = if i % 3 == 0 { "windows" } else { "linux" };
        text += &format!(
            "  - name: n{i}\n    os: {os}\n    address: 10.0.{}.{}\n",
            i / 200,
            10 + i % 200
        );
    }
    let inv = load(&text);
    let scripts = common::windows_scripts(&inv);
    assert_eq!(scripts.len(), 40);
    for (host, s) in scripts.iter().take(3) {
        assert_eq!(
            s.matches("New-NetRoute -DestinationPrefix").count(),
            119,
            "{host}"
        );
        only_ours(host, &parse(host, s));
    }
}
