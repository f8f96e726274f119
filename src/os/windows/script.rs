//! Windows scripts: the probe and one PowerShell script per host (prelude,
//! each action as a block led by its simulator header, then optionally the
//! probe).

use std::net::Ipv4Addr;

use minijinja::{Value, context};

use super::WIN_DIR;
use super::action::WinAction;
use super::files::FileSource;
use super::k8s::Profile;
use super::service::WinService;
use crate::diff::Describe;
use crate::render::{Renderer, comment, ps_list};
use crate::wire::sim_header;

/// Where the Windows probe looks, and what it pings.
pub struct WinProbe<'a> {
    pub files: &'a [String],
    /// Services of these names.
    pub services: &'a [String],
    /// kwinctl's scheduled tasks of these names.
    pub tasks: &'a [String],
    /// kwinctl's own folders (`leftovers.rs`): whether each is there.
    pub folders: &'a [String],
    /// Binaries whose `--version` it reads (when present).
    pub binaries: &'a [String],
    /// Images whose OS version it reads (when present).
    pub images: &'a [String],
    pub reach: &'a [Ipv4Addr],
    /// The node's profile: l2bridge probes its facts too (HNS, containerd,
    /// the Containers feature, the CNI conf dir, health endpoints).
    pub profile: Profile,
}

pub fn probe(r: &Renderer, p: &WinProbe) -> String {
    let l2bridge = p.profile == Profile::L2Bridge;
    let reach: Vec<String> = p.reach.iter().map(|a| a.to_string()).collect();
    let health = super::ProfileDesired::health(p.profile);
    let header = sim_header(&serde_json::json!({
        "kind": "probe", "files": p.files, "folders": p.folders, "services": p.services, "tasks": p.tasks,
        "binaries": p.binaries, "images": p.images, "reach": reach,
        "profile": if l2bridge { "l2bridge" } else { "transparent" },
        "health": health, "kubelet_client": crate::identity::cert::CURRENT,
    }));
    header
        + &r.render(
            "windows/probe.ps1",
            context! {
                files => ps_list(p.files), folders => ps_list(p.folders), services => ps_list(p.services),
                tasks => ps_list(p.tasks),
                binaries => ps_list(p.binaries), images => ps_list(p.images),
                reach => ps_list(&reach),
                l2bridge => l2bridge,
                health => health.iter().map(u16::to_string).collect::<Vec<_>>().join(", "),
            },
        )
}

/// A placed file's source for its template: its url, its content (base64)
/// or where the push left it on the host; the other two none.
fn source_values(src: &FileSource) -> (Value, Value, Value) {
    let none = || Value::from(());
    match src {
        FileSource::Url(u) => (Value::from(u.as_str()), none(), none()),
        FileSource::Inline(b) => (
            none(),
            Value::from(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                b,
            )),
            none(),
        ),
        FileSource::Push(p) => (none(), none(), Value::from(p.staged.as_str())),
    }
}

/// The PowerShell for one action: its template by kind, with the action's
/// fields (an upload's bytes, which its serde form leaves out, as base64).
pub fn action(r: &Renderer, a: &WinAction) -> String {
    let extra = match a {
        WinAction::PlaceFile { file } => {
            let (url, content, staged) = source_values(&file.source);
            context! { url, content, staged }
        }
        WinAction::InstallArchive { archive } => {
            let (url, content, staged) = source_values(&archive.archive.source);
            let leaf = archive
                .version_binary
                .as_deref()
                .map(|p| p.rsplit('\\').next().unwrap_or(p).to_string());
            context! { url, content, staged, version_binary_name => leaf }
        }
        WinAction::InstallTask { service, .. } => context! {
            start_script => start_script(r, service),
            description => service.task_description(),
        },
        WinAction::StartTask { name } | WinAction::RemoveTask { name } => context! {
            exe => format!(r"{WIN_DIR}\{name}.exe"),
        },
        WinAction::InstallBootTask { boot } => context! {
            boot_script => boot_script(r, boot),
            description => boot.description(),
            task => super::boot::BOOT_TASK,
        },
        _ => Value::UNDEFINED,
    };
    r.action("windows", "ps1", a, extra)
}

/// The start script a scheduled task runs for a binary without
/// `--windows-service` (written by the `install_task` action).
pub fn start_script(r: &Renderer, service: &WinService) -> String {
    r.render("windows/start_script.ps1", context! { service })
}

/// The script the boot task runs (written by `install_boot_task`).
pub fn boot_script(r: &Renderer, boot: &super::boot::BootSpec) -> String {
    r.render("windows/boot_script.ps1", context! { boot })
}

/// `plan`: a read-only script printing `paths` as `KWC` lines.
/// `up --reboot`: restart the host a few seconds after this call returns.
pub fn restart(r: &Renderer) -> String {
    sim_header(&serde_json::json!({"kind": "restart_computer"}))
        + &r.render("windows/restart_computer.ps1", context! {})
}

pub fn read_files(r: &Renderer, paths: &[String]) -> String {
    sim_header(&serde_json::json!({"kind": "read_files", "paths": paths}))
        + &r.render("windows/read_files.ps1", context! { paths })
}

/// The host a script is for.
pub struct ScriptHost<'a> {
    pub name: &'a str,
    pub cluster: &'a str,
    pub address: Ipv4Addr,
    /// The routable adapter's name, when the inventory names it.
    pub adapter: Option<&'a str>,
}

/// The prelude's PowerShell (its functions), without the simulator's header.
pub fn prelude(r: &Renderer, h: &ScriptHost) -> String {
    r.render(
        "windows/prelude.ps1",
        context! {
            host => h.name, cluster => h.cluster, address => h.address.to_string(),
            adapter => h.adapter,
        },
    )
}

/// One PowerShell script for a Windows host: prelude, each action as a
/// block led by its simulator header, then (optionally) the probe.
pub fn script(
    r: &Renderer,
    h: &ScriptHost,
    actions: &[&WinAction],
    then_probe: Option<&WinProbe>,
) -> String {
    let mut s = sim_header(
        &serde_json::json!({"kind": "prelude", "address": h.address.to_string(), "adapter": h.adapter}),
    );
    s += &prelude(r, h);
    for (i, a) in actions.iter().enumerate() {
        let mut v = serde_json::to_value(a).expect("action JSON");
        v["id"] = i.into();
        let body = action(r, a);
        s.push('\n');
        s += &sim_header(&v);
        s += &format!(
            "# action {i}: {}\nInvoke-KwAction {i} {{\n{}\n}}\nif (-not $script:KwOk) {{ exit 0 }}\n",
            comment(&a.describe()),
            body.trim_end()
        );
    }
    if let Some(p) = then_probe {
        s.push('\n');
        s += &probe(r, p);
    }
    s
}
