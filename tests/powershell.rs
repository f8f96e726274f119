//! Every PowerShell script kwinctl renders — every action, the probe — parses
//! with no error under the tree-sitter-powershell grammar; hostile inventory
//! values stay inside string literals (the commands a script runs are exactly
//! kwinctl's); snapshots pin the rendered text. There is no PowerShell on
//! this machine: this is the only check the PowerShell itself gets here.

use std::collections::BTreeSet;
use std::path::Path;

use kwinctl::alloc;
use kwinctl::inventory::Inventory;
use kwinctl::os::fresh_script;
use kwinctl::os::windows::script::{self, ScriptHost, WinProbe};
use kwinctl::os::windows::{WinAction, action::examples};
use kwinctl::state::State;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/inventories/example.yaml");

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

fn scripts_for(inv: &Inventory) -> Vec<(String, String)> {
    let alloc = alloc::allocate(inv, &State::default(), &None).unwrap();
    let nodes = alloc::nodes(inv, &alloc);
    let r = kwinctl::os::renderer();
    inv.hosts
        .iter()
        .zip(&nodes)
        .filter(|(h, _)| h.os == kwinctl::inventory::Os::Windows)
        .map(|(h, n)| (h.name.clone(), fresh_script(&r, inv, h, n).unwrap()))
        .collect()
}

#[test]
fn example_inventory_scripts_parse_and_are_pinned() {
    let inv = load(&std::fs::read_to_string(EXAMPLE).unwrap());
    let scripts = scripts_for(&inv);
    assert_eq!(scripts.len(), 2);
    for (host, s) in &scripts {
        let cmds = parse(host, s);
        only_ours(host, &cmds);
        // recognisable against the seed, step by step
        for step in [
            "New-VMSwitch -Name 'KubeProxySwitch' -SwitchType Internal",
            "'network', 'create', '-d', 'transparent', '--gateway'",
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
        insta::assert_snapshot!(format!("example_{}", host.to_lowercase()), s);
    }
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
        binaries: &files,
        images: &images,
        reach: &reach,
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
    insta::assert_snapshot!("every_action_with_probe", s);
    let s = script::probe(&r, &probe);
    only_ours("probe", &parse("probe", &s));
    // the start script a scheduled task runs parses too, and keeps a
    // hostile argument inside its string
    let task = kwinctl::os::windows::desired::example_task();
    let s = script::start_script(&r, &task);
    let cmds = parse("start script", &s);
    only_ours("start script", &cmds);
    assert!(
        s.contains("$arguments = '--hostname-override=10.0.0.11"),
        "{s}"
    );
    insta::assert_snapshot!("start_script", s);
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

/// The example with `value` in the adapter's name and (without its white
/// space) in a binary's URL: the values that reach scripts as free text
/// (the others are refused at load unless plain: see
/// `values_that_could_change_a_command_line_are_refused`).
fn with_values(value: &str) -> String {
    let url_value: String = value.chars().filter(|c| !c.is_whitespace()).collect();
    std::fs::read_to_string(EXAMPLE).unwrap().replace(
        "    address: 10.0.0.11\n",
        &format!(
            "    address: 10.0.0.11\n    windows:\n      adapter: {:?}\n      binaries:\n        kubelet: {{ url: {:?}, sha256: {} }}\n",
            format!("Ethernet {value}"),
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
    let bad = scripts_for(&load(&with_values(hostile)));
    let good = scripts_for(&load(&with_values(benign)));
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
    // the values did reach Win01's script (the adapter, and the URL)
    assert!(bad[0].1.contains("Stop-Computer"), "{}", bad[0].1);
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
    let scripts = scripts_for(&inv);
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
