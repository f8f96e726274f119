"""Which Windows container images a simulated host runs (process isolation).

One rule for winsim's two pullers: `pull_sandbox` (ctr) and a pod's image
(containerd's CRI pull, or Docker through dockershim). Sources:
docs/research/containerd.md#d9 (containerd/platforms' compatibility table)
and docs/research/pods.md#images (what the e2e test images hold).

- containerd picks a manifest entry with its platform matcher. From
  containerd 1.7.20 (and every 2.x) the matcher is containerd/platforms'
  `checkWindowsHostAndContainerCompat`: a host before Windows Server 2022
  (build 20348) needs the image's exact build; a host from 20348 on runs
  images from the newest LTSC build *older* than the host (20348 for a
  2025 host) up to its own build. An older containerd, and Docker, need
  the exact build.
- Images with Windows entries are listed by repository (the whole name:
  `registry.k8s.io/e2e-test-images/busybox` has Windows entries, Docker
  Hub's `busybox` has none).
"""

from .util import norm_image

# Windows Server LTSC builds (containerd/platforms: ltsc2019 = 17763,
# ltsc2022 = 20348, ltsc2025 = 26100)
LTSC2022 = 20348
# compatLTSCReleases: the stable-ABI LTSC builds, ascending
COMPAT_LTSC = (20348, 26100)
# the first containerd release whose matcher has the table (it vendors
# containerd/platforms v0.2.1, the first with it)
COMPAT_FROM = (1, 7, 20)

WIN_BUILDS = {"ltsc2016": 14393, "sac2016": 14393, "1607": 14393, "1809": 17763, "ltsc2019": 17763,
              "ltsc2022": 20348, "ltsc2025": 26100}

# Docker Hub's official images without Windows entries (library/<name>)
LINUX_ONLY = ("busybox", "alpine", "nginx", "debian", "ubuntu", "centos", "fedora", "redis")

# Repositories whose manifest lists carry Linux and these Windows builds.
# agnhost: its BASEIMAGE lists windows/amd64 1809 and ltsc2022 for the
# releases up to 2.61 (ltsc2025 came with kubernetes PR #136727, 2026-02);
# busybox and nginx of e2e-test-images: built from Dockerfile_windows for
# 1809 and ltsc2022 (docs/research/pods.md#images)
E2E = "registry.k8s.io/e2e-test-images/"
MULTI_OS = {E2E + "agnhost": (17763, 20348), E2E + "busybox": (17763, 20348), E2E + "nginx": (17763, 20348)}


def repository(image):
    """The image's repository, normalised: Docker Hub's short names get
    docker.io/library/."""
    ref = norm_image(image)
    repo = ref.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    first = repo.split("/", 1)[0]
    if "/" not in repo:
        return "docker.io/library/" + repo
    if "." not in first and ":" not in first and first != "localhost":
        return "docker.io/" + repo
    return repo


def image_builds(image):
    """The Windows builds an image has entries for; [] for a Linux-only
    image; None when winsim does not know."""
    repo = repository(image)
    if repo in MULTI_OS:
        return list(MULTI_OS[repo])
    if repo.startswith("docker.io/library/") and repo.rsplit("/", 1)[-1] in LINUX_ONLY:
        return []
    tag = norm_image(image).rsplit("/", 1)[-1].partition(":")[2]
    for key, build in WIN_BUILDS.items():
        if key in tag:
            return [build]
    return None


def host_runs(host, image_build, table=True):
    """containerd/platforms' checkWindowsHostAndContainerCompat (table=True),
    else the exact match older runtimes require."""
    if not table or host < LTSC2022:
        return host == image_build
    oldest = LTSC2022
    for b in reversed(COMPAT_LTSC):
        if host > b:
            oldest = b
            break
    return oldest <= image_build <= host


def containerd_has_table(release):
    """Whether a containerd release (a tuple, None = unknown) matches with
    the table; an unknown release is taken as a current one."""
    return release is None or tuple(release) >= COMPAT_FROM


def pick(host, builds, table=True):
    """The entry the runtime takes for this host, or None: its own build
    first, else the newest compatible one."""
    ok = sorted((b for b in builds if host_runs(host, b, table)), reverse=True)
    return (host if host in ok else ok[0]) if ok else None
