//! Every command in every PowerShell script kwinctl renders for Windows —
//! every action (reset's included), the probe, the start script, the
//! boot-time script, the transport's bootstrap, and whole scripts for a
//! Windows Server 2016 and a 2019 node — exists in Windows PowerShell 5.1
//! on build 14393, each named parameter exists, and together they fit one
//! parameter set. The truth is PSScriptAnalyzer's compatibility data for
//! that PowerShell (`tests/data/ps51/`, MIT), not kwinctl.
//!
//! Not checked: positional arguments and mandatory parameters (a call that
//! leaves one out would prompt), parameter values and types, .NET methods
//! (`[IO.File]::WriteAllBytes`), and native programs' own arguments. Named
//! parameters must be spelt out (PowerShell would also take an unambiguous
//! prefix or an alias; kwinctl's scripts never rely on either).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kwinctl::inventory::Inventory;
use kwinctl::os::windows::examples::examples;
use kwinctl::os::windows::script::{self, ScriptHost, WinProbe};

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/ps51/desktop-5.1.14393.206-windows.json"
);
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

/// Parameters every cmdlet and advanced function takes (about_CommonParameters).
const COMMON: &[&str] = &[
    "verbose",
    "debug",
    "erroraction",
    "warningaction",
    "informationaction",
    "errorvariable",
    "warningvariable",
    "informationvariable",
    "outvariable",
    "outbuffer",
    "pipelinevariable",
];

/// ServerManager is missing from the data (collected without it): its
/// syntax from Microsoft's documentation, MicrosoftDocs/windows-powershell-docs
/// docset/winserver2022-ps/ServerManager/Get-WindowsFeature.md and
/// docset/winserver2019-ps/.../Install-WindowsFeature.md.
const SERVER_MANAGER: &[(&str, &str)] = &[
    (
        "Get-WindowsFeature",
        "[[-Name] <String[]>] [-Vhd <String>] [-ComputerName <String>] [-Credential <PSCredential>] [-LogPath <String>] [<CommonParameters>]",
    ),
    (
        "Install-WindowsFeature",
        "[-Name] <Feature[]> [-Restart] [-IncludeAllSubFeature] [-IncludeManagementTools] [-Source <String[]>] [-ComputerName <String>] [-Credential <PSCredential>] [-LogPath <String>] [-WhatIf] [-Confirm] [<CommonParameters>] \
         [-Name] <Feature[]> -Vhd <String> [-IncludeAllSubFeature] [-IncludeManagementTools] [-Source <String[]>] [-ComputerName <String>] [-Credential <PSCredential>] [-LogPath <String>] [-WhatIf] [-Confirm] [<CommonParameters>] \
         -ConfigurationFilePath <String> [-Vhd <String>] [-Restart] [-Source <String[]>] [-ComputerName <String>] [-Credential <PSCredential>] [-LogPath <String>] [-WhatIf] [-Confirm] [<CommonParameters>]",
    ),
];

/// Provider dynamic parameters, which the data leaves out: (command, parameter,
/// source). They are added to every parameter set of the command.
const DYNAMIC: &[(&str, &str, &str)] = &[(
    "Set-ItemProperty",
    "Type",
    "Microsoft docs, Set-ItemProperty: \"-Type ... This is a dynamic parameter that the Registry provider adds\" (about_Registry_Provider)",
)];

/// Programs, not PowerShell commands: their arguments are theirs.
const NATIVE: &[&str] = &["docker", "sc.exe", "powershell.exe"];

#[derive(Debug, Default)]
struct Command {
    /// Each parameter set: its parameters (lower case).
    sets: Vec<BTreeSet<String>>,
    common: bool,
}

fn parse_sets(syntax: &str) -> Command {
    let common = syntax.contains("[<CommonParameters>]");
    let mut sets = Vec::new();
    for set in syntax.split("[<CommonParameters>]") {
        if set.trim().is_empty() && !sets.is_empty() {
            continue;
        }
        let mut params = BTreeSet::new();
        let b = set.as_bytes();
        for (i, _) in set.match_indices('-') {
            let before = if i == 0 { b' ' } else { b[i - 1] };
            if before != b' ' && before != b'[' {
                continue;
            }
            let name: String = set[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
                params.insert(name.to_ascii_lowercase());
            }
        }
        sets.push(params);
    }
    Command { sets, common }
}

/// Every command of Windows PowerShell 5.1 on 14393, by lower-case name (a
/// name two modules export has both definitions).
fn commands() -> BTreeMap<String, Vec<Command>> {
    let text = std::fs::read_to_string(DATA).expect("the 5.1 data");
    let data: serde_json::Value =
        serde_json::from_str(text.trim_start_matches('\u{feff}')).expect("JSON");
    let mut out: BTreeMap<String, Vec<Command>> = BTreeMap::new();
    for m in data["Modules"].as_array().expect("Modules") {
        let exported = match &m["ExportedCommands"] {
            serde_json::Value::Array(a) => a.clone(),
            serde_json::Value::Null => vec![],
            one => vec![one.clone()],
        };
        for c in exported {
            let name = c["Name"].as_str().expect("Name").to_ascii_lowercase();
            let syntax = match &c["ParameterSets"] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .filter_map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => String::new(),
            };
            out.entry(name).or_default().push(parse_sets(&syntax));
        }
    }
    for (name, syntax) in SERVER_MANAGER {
        out.entry(name.to_ascii_lowercase())
            .or_default()
            .push(parse_sets(syntax));
    }
    for (name, param, _source) in DYNAMIC {
        for def in out.get_mut(&name.to_ascii_lowercase()).expect("known") {
            for set in &mut def.sets {
                set.insert(param.to_ascii_lowercase());
            }
        }
    }
    out
}

/// A command as a script calls it: its name, named parameters and line.
#[derive(Debug)]
struct Call {
    name: String,
    params: Vec<String>,
    line: usize,
    text: String,
}

fn text_of<'a>(n: tree_sitter::Node, src: &'a str) -> &'a str {
    n.utf8_text(src.as_bytes()).unwrap()
}

/// The calls in a script, and the functions it defines (name → parameters).
fn calls(label: &str, src: &str) -> (Vec<Call>, BTreeMap<String, Command>) {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_powershell::LANGUAGE.into())
        .expect("grammar");
    let tree = p.parse(src, None).expect("parse");
    assert!(
        !tree.root_node().has_error(),
        "{label}: does not parse (tests/cli/powershell.rs says where)"
    );
    let mut out = Vec::new();
    let mut functions = BTreeMap::new();
    let mut stack = vec![tree.root_node()];
    while let Some(n) = stack.pop() {
        let mut c = n.walk();
        let children: Vec<_> = n.children(&mut c).collect();
        if n.kind() == "function_statement" {
            let name = children
                .iter()
                .find(|c| c.kind() == "function_name")
                .map(|c| text_of(*c, src).to_ascii_lowercase())
                .unwrap_or_default();
            let mut params = BTreeSet::new();
            let mut inner = vec![n];
            while let Some(x) = inner.pop() {
                if x.kind() == "script_parameter" {
                    let mut w = x.walk();
                    for v in x.children(&mut w).filter(|v| v.kind() == "variable") {
                        params.insert(text_of(v, src).trim_start_matches('$').to_ascii_lowercase());
                    }
                    continue;
                }
                let mut w = x.walk();
                // (parameters of functions nested in it are theirs)
                inner.extend(
                    x.children(&mut w)
                        .filter(|k| x == n || k.kind() != "function_statement"),
                );
            }
            functions.insert(
                name,
                Command {
                    sets: vec![params],
                    common: false,
                },
            );
        }
        if n.kind() == "command"
            && let Some(name) = children.iter().find(|c| c.kind() == "command_name")
        {
            let mut params = Vec::new();
            if let Some(el) = children.iter().find(|c| c.kind() == "command_elements") {
                let mut w = el.walk();
                for e in el.children(&mut w) {
                    if e.kind() == "command_parameter" {
                        params.push(
                            text_of(e, src)
                                .trim_start_matches('-')
                                .trim_end_matches(':')
                                .to_string(),
                        );
                    }
                }
            }
            out.push(Call {
                name: text_of(*name, src).to_string(),
                params,
                line: n.start_position().row + 1,
                text: text_of(n, src).lines().next().unwrap_or("").to_string(),
            });
        }
        stack.extend(children);
    }
    (out, functions)
}

/// What is wrong with the calls in `src` for PowerShell 5.1.
fn problems(label: &str, src: &str, known: &BTreeMap<String, Vec<Command>>) -> Vec<String> {
    let (calls, functions) = calls(label, src);
    let mut out = Vec::new();
    for c in calls {
        let name = c.name.to_ascii_lowercase();
        if NATIVE.contains(&name.as_str()) {
            continue;
        }
        let defs: Vec<&Command> = match functions.get(&name) {
            Some(f) => vec![f],
            None => match known.get(&name) {
                Some(d) => d.iter().collect(),
                None => {
                    out.push(format!(
                        "{label}:{}: {} is not a command of Windows PowerShell 5.1 on build 14393: {}",
                        c.line, c.name, c.text
                    ));
                    continue;
                }
            },
        };
        let fits = |d: &Command, p: &str| {
            let p = p.to_ascii_lowercase();
            (d.common && COMMON.contains(&p.as_str())) || d.sets.iter().any(|s| s.contains(&p))
        };
        if let Some(bad) = c.params.iter().find(|p| !defs.iter().any(|d| fits(d, p))) {
            out.push(format!(
                "{label}:{}: {} has no parameter -{bad} in Windows PowerShell 5.1: {}",
                c.line, c.name, c.text
            ));
            continue;
        }
        let one_set = defs.iter().any(|d| {
            d.sets.iter().any(|s| {
                c.params.iter().all(|p| {
                    let p = p.to_ascii_lowercase();
                    s.contains(&p) || (d.common && COMMON.contains(&p.as_str()))
                })
            })
        });
        if !one_set {
            out.push(format!(
                "{label}:{}: {} -{} fit no single parameter set in Windows PowerShell 5.1: {}",
                c.line,
                c.name,
                c.params.join(" -"),
                c.text
            ));
        }
    }
    out
}

fn load(text: &str) -> Inventory {
    Inventory::parse(Path::new(EXAMPLE), text).unwrap_or_else(|e| panic!("{e}"))
}

/// Every PowerShell text kwinctl sends to Windows, labelled.
fn every_script() -> Vec<(String, String)> {
    let r = kwinctl::os::renderer();
    let host = ScriptHost {
        name: "w",
        cluster: "c",
        address: "10.0.0.11".parse().unwrap(),
        adapter: Some("Ethernet"),
    };
    let mut out: Vec<(String, String)> = examples()
        .iter()
        .map(|a| (format!("{a:?}"), script::script(&r, &host, &[a], None)))
        .collect();
    let files = vec![r"C:\k\kubelet.exe".to_string()];
    let services = vec!["kubelet".to_string(), "kube-proxy".into()];
    let images = vec!["apprenda/pause".to_string()];
    let reach = ["10.0.0.10".parse().unwrap()];
    let probe = WinProbe {
        files: &files,
        services: &services,
        tasks: &services,
        folders: &kwinctl::os::windows::leftovers::folders(),
        binaries: &files,
        images: &images,
        reach: &reach,
        profile: kwinctl::inventory::WindowsProfile::Transparent,
    };
    out.push(("probe".into(), script::probe(&r, &probe)));
    let l2probe = WinProbe {
        profile: kwinctl::inventory::WindowsProfile::L2Bridge,
        ..probe
    };
    out.push(("l2bridge probe".into(), script::probe(&r, &l2probe)));
    out.push(("restart".into(), script::restart(&r)));
    out.push((
        "l2bridge boot script".into(),
        script::boot_script(&r, &kwinctl::os::windows::boot::example_l2bridge()),
    ));
    for task in [
        kwinctl::os::windows::service::example_task(),
        kwinctl::os::windows::service::example_service(),
    ] {
        out.push((
            format!("start script of {}", task.name),
            script::start_script(&r, &task),
        ));
    }
    // the action run detached from the connection: its three scripts
    let a = examples()
        .into_iter()
        .find(kwinctl::os::windows::detach::cuts_connection)
        .unwrap();
    let d = kwinctl::os::windows::detach::scripts(&r, &host, &a, "run1-7");
    out.push(("detach start".into(), d.start));
    out.push(("detach result".into(), d.result));
    out.push((
        "detach task".into(),
        kwinctl::os::windows::detach::task_script(&r, &host, &a, "run1-7"),
    ));
    out.push((
        "bootstrap".into(),
        kwinctl::transport::BOOTSTRAP.to_string(),
    ));
    out.extend(common::push_scripts());
    // whole scripts: Windows Server 2016 (the example, 1.10) and 2019 (1.16:
    // `check` refuses the transparent profile there — its pods get no IP —
    // but the 2019 branches of the scripts still exist and must parse)
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    for (label, text) in [
        ("2016", example.clone()),
        (
            "2019",
            example
                .replace(
                    "kubernetes_version: \"1.10.13\"",
                    "kubernetes_version: \"1.16.15\"",
                )
                .lines()
                .filter(|l| !l.trim_start().starts_with("pause_image:"))
                .map(|l| format!("{l}\n"))
                .collect(),
        ),
    ] {
        for (h, s) in common::windows_scripts(&load(&text)) {
            out.push((format!("{h} ({label})"), s));
        }
    }
    out
}

#[test]
fn every_rendered_command_exists_in_powershell_5_1_with_its_parameters() {
    let known = commands();
    assert!(known.len() > 1000, "{} commands", known.len());
    let scripts = every_script();
    assert!(scripts.len() > 20, "{}", scripts.len());
    assert!(
        scripts
            .iter()
            .any(|(l, s)| l.ends_with("(2019)") && s.contains("vEthernet (Ethernet 2)")),
        "no 2019 render"
    );
    let mut all = Vec::new();
    let mut checked = BTreeSet::new();
    for (label, s) in &scripts {
        all.extend(problems(label, s, &known));
        for c in calls(label, s).0 {
            checked.insert(format!("{} -{}", c.name, c.params.join(" -")));
        }
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
    // (the research checked 52 command + parameter combinations)
    assert!(checked.len() > 50, "{checked:?}");
}

/// The check finds what PowerShell 5.1 would refuse.
#[test]
fn known_bad_lines_fail_the_check() {
    let known = commands();
    for (line, want) in [
        // PowerShell 7 only
        ("$x | ConvertTo-Json -AsArray", "no parameter -AsArray"),
        (
            "Test-Connection -TargetName 10.0.0.1 -Count 1",
            "no parameter -TargetName",
        ),
        ("Get-Process | ForEach-Object -Parallel { $_ }", "-Parallel"),
        // no such parameter in 5.1 (6.0 added it)
        (
            "Set-Service -Name kubelet -DependsOn docker",
            "no parameter -DependsOn",
        ),
        // two parameter sets at once
        (
            "New-NetRoute -DestinationPrefix '10.0.0.0/8' -InterfaceAlias 'Ethernet' -InterfaceIndex 4",
            "fit no single parameter set",
        ),
        (
            "Get-Content -Path a -LiteralPath b",
            "fit no single parameter set",
        ),
        // not a command at all
        ("Get-KwNothing -Name x", "is not a command"),
        ("Install-WindowsFeature -Name Routing -Reboot", "-Reboot"),
    ] {
        let p = problems("seed", &format!("{line}\n"), &known);
        assert!(
            p.iter().any(|x| x.contains(want)),
            "{line}: expected {want:?}, got {p:?}"
        );
    }
    // and the good forms of the same pass
    for line in [
        "$x | ConvertTo-Json -Compress -Depth 6",
        "Test-Connection -ComputerName 10.0.0.1 -Count 1 -Quiet",
        "New-NetRoute -DestinationPrefix '10.0.0.0/8' -InterfaceIndex 4 -NextHop '10.0.0.1'",
        "Set-ItemProperty -Path $key -Name Environment -Type MultiString -Value @('a')",
        "Install-WindowsFeature -Name Routing -IncludeManagementTools -ErrorAction Stop",
        "Remove-NetRoute -Confirm:$false",
    ] {
        let p = problems("good", &format!("{line}\n"), &known);
        assert!(p.is_empty(), "{line}: {p:?}");
    }
}
