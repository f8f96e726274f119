//! Which Windows builds run a Kubernetes release and which images a build
//! runs: kwinctl's table (`k8s.yaml`: windows_builds, pause_images) and
//! containerd's image matcher, which follows containerd/platforms'
//! compatibility table from containerd 1.7.20 (docs/research/containerd.md#d9).

use super::{Profile, TABLE, covers, in_profile, minor};
use crate::inventory::{ContainerdVersion, Minor};

/// Why a host of Windows `build` cannot run release `m`, if it cannot.
pub fn build_refusal(m: Minor, p: Profile, build: u32) -> Option<String> {
    let builds = || {
        TABLE
            .windows_builds
            .iter()
            .filter(move |b| in_profile(&b.profiles, p))
    };
    let mut known: Vec<String> = builds()
        .map(|b| format!("{} ({})", b.name, b.build))
        .collect();
    known.dedup();
    let Some(b) = builds().find(|b| b.build == build) else {
        return Some(format!(
            "Windows build {build} is not in kwinctl's table for the {} profile, which covers {}",
            p.name(),
            known.join(", ")
        ));
    };
    if covers(&b.since, b.until.as_deref(), m) {
        return None;
    }
    let why = if m < minor(&b.since) {
        b.since_reason.clone()
    } else {
        b.until_reason.clone()
    };
    let fits: Vec<String> = builds()
        .filter(|o| covers(&o.since, o.until.as_deref(), m))
        .map(|o| format!("{} ({})", o.name, o.build))
        .collect();
    Some(format!(
        "{} (build {build}) cannot run Kubernetes {m}: {}{}",
        b.name,
        why.unwrap_or_else(|| "outside the releases kwinctl's table gives it".into()),
        if fits.is_empty() {
            String::new()
        } else {
            format!("; Kubernetes {m} runs on {}", fits.join(", "))
        }
    ))
}

/// kwinctl's default pause image for release `m` on Windows `build`.
pub fn default_pause(m: Minor, build: u32) -> Option<&'static str> {
    TABLE
        .pause_images
        .iter()
        .find(|p| {
            p.default_for.builds.contains(&build)
                && covers(&p.default_for.since, p.default_for.until.as_deref(), m)
        })
        .map(|p| p.image.as_str())
}

/// The Windows builds a known pause image has an image for.
pub fn pause_builds(image: &str) -> Option<&'static [u32]> {
    let norm = super::super::facts::normalise_image;
    TABLE
        .pause_images
        .iter()
        .find(|p| norm(&p.image) == norm(image))
        .map(|p| p.builds.as_slice())
}

/// The Windows build kwinctl assumes for `render` (a fresh host of the first
/// build that runs `m` and that Kubernetes' docs list for it).
pub fn fresh_build(m: Minor, p: Profile) -> u32 {
    let documented = |b: &super::BuildRow| {
        b.documented
            .as_ref()
            .is_none_or(|d| covers(&d.since, d.until.as_deref(), m))
    };
    TABLE
        .windows_builds
        .iter()
        .filter(|b| in_profile(&b.profiles, p) && covers(&b.since, b.until.as_deref(), m))
        .find(|b| documented(b))
        .map(|b| b.build)
        .unwrap_or(TABLE.windows_builds[0].build)
}

/// The first containerd release whose image matcher follows
/// containerd/platforms' compatibility table (docs/research/containerd.md#d9).
pub const TABLE_FROM: ContainerdVersion = ContainerdVersion {
    major: 1,
    minor: 7,
    patch: 20,
};

/// Whether containerd `cv` matches Windows images with the table.
pub fn containerd_has_table(cv: ContainerdVersion) -> bool {
    cv >= TABLE_FROM
}

/// Whether a host of Windows build `host` runs (process isolation) an image
/// entry of build `image`. With `table` (containerd 1.7.20 and later):
/// containerd/platforms' `checkWindowsHostAndContainerCompat` — a host before
/// Windows Server 2022 needs the exact build; a later one runs the builds
/// from the newest stable-ABI LTSC below it up to its own (a 2025 host runs
/// 2022's images). Without (Docker, older containerd): the exact build.
pub fn image_runs(host: u32, image: u32, table: bool) -> bool {
    const LTSC2022: u32 = 20348;
    const COMPAT_LTSC: [u32; 2] = [20348, 26100];
    if !table || host < LTSC2022 {
        return host == image;
    }
    let oldest = COMPAT_LTSC
        .iter()
        .rev()
        .find(|b| host > **b)
        .copied()
        .unwrap_or(LTSC2022);
    (oldest..=host).contains(&image)
}

/// What the plan should say about running release `m` on `build` with
/// containerd `cv`: that Kubernetes' docs do not list the build for the
/// release (kwinctl still sets it up: neither the kubelet nor containerd
/// checks the build), and that a containerd before 1.7.20 on a build past
/// 2022 runs only images built for that very build.
pub fn build_note(
    m: Minor,
    p: Profile,
    build: u32,
    cv: Option<ContainerdVersion>,
) -> Option<String> {
    let row = TABLE
        .windows_builds
        .iter()
        .find(|b| in_profile(&b.profiles, p) && b.build == build)?;
    let mut notes = Vec::new();
    if let Some(d) = &row.documented
        && !covers(&d.since, d.until.as_deref(), m)
    {
        notes.push(format!(
            "{} (build {build}) with Kubernetes {m}: {}; kwinctl sets it up anyway, as neither the kubelet nor containerd checks the Windows build and the pause image has an entry it runs (docs/windows.md, Windows builds)",
            row.name, d.words
        ));
    }
    if let Some(cv) = cv
        && build > 20348
        && !containerd_has_table(cv)
    {
        notes.push(format!(
            "containerd {cv} matches Windows images by the exact build: on {} only images with an entry for build {build} run (the pause image has one; most images built for Windows Server 2022, agnhost 2.53 among them, have not); containerd {TABLE_FROM} or later also runs 2022's images there",
            row.name
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}
