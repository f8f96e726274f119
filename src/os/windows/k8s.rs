//! Kubernetes releases × the Windows profile, from the data in `k8s.yaml`
//! (beside this file, with a source for every boundary): which kubelet and
//! kube-proxy flags and environment variables exist in which release, the
//! command lines built from them, how each binary is hosted (a native service
//! where it has `--windows-service`, else a wrapper), which releases and
//! Windows builds the profile refuses and why, and the default pause image.
//!
//! Both profiles (transparent, l2bridge) share the table: a row names the
//! profiles it belongs to (none: all), and everything here works per row.

use serde::Deserialize;
use std::sync::LazyLock;

use crate::inventory::{ContainerdVersion, Identity, Inventory, KubeVersion, Minor, Os, Problem};

pub use crate::inventory::WindowsProfile as Profile;

/// The table, parsed once (a malformed one is a bug the unit tests catch).
pub static TABLE: LazyLock<Table> = LazyLock::new(|| {
    serde_saphyr::from_str(include_str!("k8s.yaml")).expect("src/os/windows/k8s.yaml parses")
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Component {
    #[serde(rename = "kubelet")]
    Kubelet,
    #[serde(rename = "kube-proxy")]
    KubeProxy,
    /// The log wrapper of kubelet and kube-proxy (see [`log_runner`]).
    #[serde(rename = "kube-log-runner")]
    LogRunner,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Kubelet => "kubelet",
            Component::KubeProxy => "kube-proxy",
            Component::LogRunner => "kube-log-runner",
        }
    }
}

/// When a row's flag is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum When {
    Always,
    Kubeconfig,
    NoKubeconfig,
    /// Windows nodes join with their own identity (`cluster.identity:
    /// bootstrap`): TLS bootstrapping's flags.
    Bootstrap,
    /// The binary runs as a native service (it has `--windows-service`).
    Native,
    Taints, // the inventory gives the node taints (`windows.taints`)
}

/// What kwinctl does in a release outside a row's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Missing {
    Skip,
    Refuse,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagRow {
    pub component: Component,
    pub name: String,
    /// The profiles the row belongs to; empty: every profile.
    #[serde(default)]
    pub profiles: Vec<Profile>,
    #[serde(default)]
    pub env: bool,
    #[serde(default)]
    pub value: Option<String>,
    pub when: When,
    pub missing: Missing,
    pub since: String,
    pub since_source: String,
    #[serde(default)]
    pub since_reason: Option<String>,
    pub until: Option<String>,
    pub until_source: String,
    #[serde(default)]
    pub until_reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildRow {
    pub build: u32,
    pub name: String,
    /// The profiles the row belongs to; empty: every profile.
    #[serde(default)]
    pub profiles: Vec<Profile>,
    pub since: String,
    pub since_source: String,
    #[serde(default)]
    pub since_reason: Option<String>,
    pub until: Option<String>,
    pub until_source: String,
    #[serde(default)]
    pub until_reason: Option<String>,
    /// The releases Kubernetes' docs list the build for, when narrower.
    #[serde(default)]
    pub documented: Option<Documented>,
}

/// Where Kubernetes' own support list for a build ends (a note, not a gate).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Documented {
    pub since: String,
    pub until: Option<String>,
    pub source: String,
    pub words: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultFor {
    pub builds: Vec<u32>,
    pub since: String,
    pub until: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRow {
    pub image: String,
    pub builds: Vec<u32>,
    pub builds_source: String,
    pub default_for: DefaultFor,
    pub default_source: String,
}

/// The containerd releases the l2bridge profile takes for a range of
/// Kubernetes releases: the oldest patch release of each release line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerdRow {
    pub since: String,
    pub until: String,
    pub minimum: Vec<String>,
    pub source: String,
}

/// A profile's own range of releases.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRow {
    pub name: Profile,
    pub since: String,
    pub until: Option<String>,
    pub source: String,
    #[serde(default)]
    pub since_reason: Option<String>,
    #[serde(default)]
    pub until_reason: Option<String>,
}

/// Which releases can join a node with an identity of its own (TLS
/// bootstrapping) and rotate its certificate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsBootstrapRow {
    pub join_since: String,
    pub join_source: String,
    pub rotation_since: String,
    pub rotation_source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub flags: Vec<FlagRow>,
    pub windows_builds: Vec<BuildRow>,
    pub pause_images: Vec<PauseRow>,
    pub containerd: Vec<ContainerdRow>,
    pub profiles: Vec<ProfileRow>,
    pub skew: Vec<skew::SkewRow>,
    pub tls_bootstrap: TlsBootstrapRow,
}

fn in_profile(profiles: &[Profile], p: Profile) -> bool {
    profiles.is_empty() || profiles.contains(&p)
}

/// The rows of `c` in profile `p`, in table order.
fn rows(c: Component, p: Profile) -> impl Iterator<Item = &'static FlagRow> + Clone {
    TABLE
        .flags
        .iter()
        .filter(move |r| r.component == c && in_profile(&r.profiles, p))
}

fn profile_row(p: Profile) -> &'static ProfileRow {
    TABLE
        .profiles
        .iter()
        .find(|r| r.name == p)
        .expect("k8s.yaml: every profile has a row")
}

fn minor(s: &str) -> Minor {
    Minor::parse(s).unwrap_or_else(|| panic!("k8s.yaml: {s:?} is not a minor release"))
}

fn covers(since: &str, until: Option<&str>, m: Minor) -> bool {
    minor(since) <= m && until.is_none_or(|u| m <= minor(u))
}

impl FlagRow {
    pub fn exists_in(&self, m: Minor) -> bool {
        covers(&self.since, self.until.as_deref(), m)
    }

    /// Why the profile cannot work in `m` without this row (a `refuse` row
    /// outside its range).
    fn refusal(&self, m: Minor) -> String {
        if m < minor(&self.since) {
            self.since_reason.clone().unwrap_or_else(|| {
                format!(
                    "{} {} exists from {} on",
                    self.component.name(),
                    self.name,
                    self.since
                )
            })
        } else {
            self.until_reason.clone().unwrap_or_else(|| {
                format!(
                    "{} {} was removed after {}",
                    self.component.name(),
                    self.name,
                    self.until.as_deref().unwrap_or("?")
                )
            })
        }
    }
}

/// How a binary runs on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hosting {
    /// A native service: the binary talks to the Service Control Manager
    /// (`--windows-service`, 1.10+).
    Service,
    /// Releases before `--windows-service`: a start script that a scheduled
    /// task runs at boot as SYSTEM, restarting the binary when it exits.
    Task,
}

/// Whether `c` of release `m` can be a native service.
pub fn hosting(c: Component, m: Minor) -> Hosting {
    let native = TABLE
        .flags
        .iter()
        .any(|r| r.component == c && r.when == When::Native && r.exists_in(m));
    if native {
        Hosting::Service
    } else {
        Hosting::Task
    }
}

/// The values the table's `{placeholders}` stand for.
#[derive(Debug, Clone)]
pub struct Values<'a> {
    pub ip: &'a str,
    /// The Kubernetes node name (`Host::node_name`).
    pub node_name: &'a str,
    pub pause_image: &'a str,
    /// `Some(path on the node)` when the kubelet has a kubeconfig (the
    /// shared one, or its own from TLS bootstrapping).
    pub kubeconfig: Option<&'a str>,
    /// kube-proxy's kubeconfig (the shared one, or its own
    /// [`super::KUBE_PROXY_CONF`] in bootstrap mode).
    pub proxy_kubeconfig: &'a str,
    /// `cluster.identity: bootstrap` (the `bootstrap` rows apply).
    pub bootstrap: bool,
    pub api_server: &'a str,
    pub log_dir: &'a str,
    pub network: &'a str,
    pub proxy_adapter: &'a str,
    /// The host endpoint's name (l2bridge).
    pub host_endpoint: &'a str,
    /// The wrapped binary's log file (filled in by [`log_runner`]).
    pub log_file: &'a str,
    /// The cluster DNS service's address (`cluster.dns_service_ip`).
    pub cluster_dns: &'a str,
    /// The cluster's DNS domain (`cluster.dns_domain`).
    pub cluster_domain: &'a str,
    pub taints: &'a str, // comma-separated (`windows.taints`; empty: none)
}

impl Values<'_> {
    fn fill(&self, template: &str) -> String {
        template
            .replace("{ip}", self.ip)
            .replace("{node_name}", self.node_name)
            .replace("{pause_image}", self.pause_image)
            .replace("{kubeconfig}", self.kubeconfig.unwrap_or(""))
            .replace("{proxy_kubeconfig}", self.proxy_kubeconfig)
            .replace("{api_server}", self.api_server)
            .replace("{log_dir}", self.log_dir)
            .replace("{network}", self.network)
            .replace("{proxy_adapter}", self.proxy_adapter)
            .replace("{host_endpoint}", self.host_endpoint)
            .replace("{log_file}", self.log_file)
            .replace("{cluster_dns}", self.cluster_dns)
            .replace("{cluster_domain}", self.cluster_domain)
            .replace("{taints}", self.taints)
    }
}

/// What one binary is started with: arguments (one per flag, unquoted) and
/// environment (`NAME=value`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub hosting: Hosting,
}

fn applies(w: When, kubeconfig: bool, taints: bool, hosting: Hosting, bootstrap: bool) -> bool {
    match w {
        When::Always => true,
        When::Bootstrap => bootstrap,
        When::Kubeconfig => kubeconfig,
        When::NoKubeconfig => !kubeconfig,
        When::Native => hosting == Hosting::Service,
        When::Taints => taints,
    }
}

/// The command line of `c` in release `m`, from the table's rows in order;
/// an error (why, in words) when a row the profile needs is missing in `m`.
pub fn invocation(c: Component, m: Minor, p: Profile, v: &Values) -> Result<Invocation, String> {
    let hosting = hosting(c, m);
    let mut inv = Invocation {
        args: Vec::new(),
        env: Vec::new(),
        hosting,
    };
    let taints = !v.taints.is_empty();
    for r in rows(c, p) {
        if !applies(r.when, v.kubeconfig.is_some(), taints, hosting, v.bootstrap) {
            continue;
        }
        if !r.exists_in(m) {
            match r.missing {
                Missing::Skip => continue,
                Missing::Refuse => return Err(r.refusal(m)),
            }
        }
        let value = r.value.as_deref().map(|t| v.fill(t));
        if r.env {
            inv.env
                .push(format!("{}={}", r.name, value.unwrap_or_default()));
        } else {
            inv.args.push(match value {
                Some(val) => format!("{}={val}", r.name),
                None => r.name.clone(),
            });
        }
    }
    Ok(inv)
}

/// The releases profile `p` runs in (whatever the kubeconfig): its own
/// range intersected with the `refuse` rows that always apply.
pub fn profile_range(p: Profile) -> (Minor, Option<Minor>) {
    let own = profile_row(p);
    let refusing = rows(Component::Kubelet, p)
        .chain(rows(Component::KubeProxy, p))
        .filter(|r| r.missing == Missing::Refuse && r.when == When::Always);
    let lo = refusing
        .clone()
        .map(|r| minor(&r.since))
        .chain([minor(&own.since)])
        .max()
        .expect("rows");
    let hi = refusing
        .filter_map(|r| r.until.as_deref().map(minor))
        .chain(own.until.as_deref().map(minor))
        .min();
    (lo, hi)
}

fn range_text(p: Profile) -> String {
    match profile_range(p) {
        (lo, Some(hi)) => format!("{lo} to {hi}"),
        (lo, None) => format!("{lo} and later"),
    }
}

/// Why release `m` cannot run profile `p` with this kubeconfig choice, if it
/// cannot: the reasons of every row that refuses.
pub fn refusal(m: Minor, p: Profile, kubeconfig: bool) -> Option<String> {
    // (reason, whether the row words it itself): the worded ones say it best
    let mut reasons: Vec<(String, bool)> = Vec::new();
    let own = profile_row(p);
    if !covers(&own.since, own.until.as_deref(), m) {
        let why = if m < minor(&own.since) {
            own.since_reason.clone()
        } else {
            own.until_reason.clone()
        };
        let worded = why.is_some();
        reasons.push((
            why.unwrap_or_else(|| format!("the {} profile runs {}", p.name(), range_text(p))),
            worded,
        ));
    }
    for c in [Component::Kubelet, Component::KubeProxy] {
        let hosting = hosting(c, m);
        for r in rows(c, p) {
            if applies(r.when, kubeconfig, false, hosting, false)
                && r.missing == Missing::Refuse
                && !r.exists_in(m)
            {
                let worded = if m < minor(&r.since) {
                    r.since_reason.is_some()
                } else {
                    r.until_reason.is_some()
                };
                let why = r.refusal(m);
                if !reasons.iter().any(|(w, _)| *w == why) {
                    reasons.push((why, worded));
                }
            }
        }
    }
    if reasons.iter().any(|(_, worded)| *worded) {
        reasons.retain(|(_, worded)| *worded);
    }
    let reasons: Vec<String> = reasons.into_iter().map(|(w, _)| w).collect();
    (!reasons.is_empty()).then(|| {
        format!(
            "Kubernetes {m} cannot run kwinctl's {} Windows profile ({}): {}; the profile supports Kubernetes {}",
            p.name(),
            profile_words(p),
            reasons.join("; "),
            range_text(p)
        )
    })
}

mod builds;
mod check;
mod logs;
mod skew;
pub use builds::{
    build_note, build_refusal, containerd_has_table, default_pause, fresh_build, image_runs,
    pause_builds,
};
pub use check::{
    can_join, containerd_refusal, identity, identity_note, inventory_problems, join_note,
    newest_containerd, newest_release, profile_words,
};
pub use logs::{log_runner, log_runner_rotates, wrapped};
pub use skew::skew_refusal;

#[cfg(test)]
mod l2_tests;
#[cfg(test)]
mod tests;
