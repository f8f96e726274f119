"""k8sbin without root: the release edges of the flags, CommandLineToArgvW,
kube-log-runner's Go flag parsing (sources: winsim/README.md, "kube-log-runner"
and the k8sbin notes; spec §5/§6)."""

import pytest

from winsim import k8sbin

CGROUPS_OK = ("--cgroups-per-qos=false", "--enforce-node-allocatable=")


def starts(component, version, *args):
    return k8sbin.check_args(component, "Kubernetes v%s" % version, list(args)) is None


@pytest.mark.parametrize("flag,last", [
    ("--container-runtime=remote", "1.26.0"),
    ("--pod-infra-container-image=p", "1.34.0"),
    ("--log-dir=C:\\k\\logs", "1.25.0"),
    ("--logtostderr=false", "1.25.0"),
    ("--network-plugin=cni", "1.23.0"),
    ("--image-pull-progress-deadline=20m", "1.23.0"),
])
def test_kubelet_flag_last_release(flag, last):
    nxt = "1.%d.0" % (int(last.split(".")[1]) + 1)
    assert starts("kubelet", last, flag, *CGROUPS_OK)
    assert not starts("kubelet", nxt, flag, *CGROUPS_OK)


def test_image_pull_progress_deadline_from_1_6():
    # PR #36887 shipped in 1.6 (docs/research/kubernetes.md#k-ipd): a 1.5
    # kubelet does not know it; 1.6 on to dockershim's end does.
    flag = "--image-pull-progress-deadline=20m"
    assert "unknown flag: --image-pull-progress-deadline" in (
        k8sbin.check_args("kubelet", "Kubernetes v1.5.8", [flag]) or "")
    assert starts("kubelet", "1.6.13", flag, *CGROUPS_OK)


def test_unknown_flag_message_by_release():
    new = k8sbin.check_args("kubelet", "Kubernetes v1.30.0", ["--no-such-flag", *CGROUPS_OK])
    assert "unknown flag: --no-such-flag" in new


def test_dsr_needs_kb4580390_on_windows_server_2019():
    kp = ["--proxy-mode=kernelspace", "--network-name=cbr0", "--enable-dsr=true",
          "--feature-gates=WinDSR=true"]
    line = "Kubernetes v1.30.4"
    old = {"build": "10.0.17763", "ubr": 1553}
    why = k8sbin.check_args("kube-proxy", line, kp, host=old)
    assert "platform does not support feature Direct Server Return (DSR)" in why
    # without DSR it starts there; with the update, or on 2022, DSR starts
    assert k8sbin.check_args("kube-proxy", line, kp[:2], host=old) is None
    assert k8sbin.check_args("kube-proxy", line, kp, host={"build": "10.0.17763", "ubr": 1554}) is None
    assert k8sbin.check_args("kube-proxy", line, kp, host={"build": "10.0.20348", "ubr": 1}) is None


def test_enable_dsr_needs_the_windsr_gate():
    kp = ("--proxy-mode=kernelspace", "--network-name=cbr0", "--enable-dsr=true")
    assert not starts("kube-proxy", "1.32.0", *kp)
    assert starts("kube-proxy", "1.32.0", *kp, "--feature-gates=WinDSR=true")
    assert starts("kube-proxy", "1.33.0", *kp)
    assert not starts("kube-proxy", "1.34.0", *kp, "--feature-gates=WinDSR=false")


def test_userspace_gone_and_kernelspace_default_from_1_26():
    assert starts("kube-proxy", "1.25.0", "--proxy-mode=userspace")
    assert not starts("kube-proxy", "1.26.0", "--proxy-mode=userspace")
    assert not starts("kube-proxy", "1.26.0")
    assert starts("kube-proxy", "1.26.0", "--network-name=cbr0")


def test_kubelet_cgroups_fatal_on_1_29_warning_from_1_30():
    assert not starts("kubelet", "1.29.0")
    assert starts("kubelet", "1.30.0")
    assert any("ignored configuration option" in w for w in k8sbin.warnings("kubelet", "Kubernetes v1.30.0", []))


def test_version_line():
    assert k8sbin.version_line(b"MZ fake\nKubernetes v1.30.4\n") == "Kubernetes v1.30.4"
    assert k8sbin.version_line(b"MZ not a kubernetes binary\n") is None
    assert k8sbin.minor_of("Kubernetes v1.30.4") == (1, 30)


# CommandLineToArgvW's rules, with the examples Microsoft's documentation
# gives ("Parsing C++ command-line arguments"), as winsim needs them
@pytest.mark.parametrize("line,argv", [
    ('"abc" d e', ["abc", "d", "e"]),
    ('a\\\\b d"e f"g h', ["a\\\\b", "de fg", "h"]),
    ('a\\\\\\"b c d', ['a\\"b', "c", "d"]),
    ('a\\\\\\\\"b c" d e', ["a\\\\b c", "d", "e"]),
    ('"C:\\Program Files\\containerd\\containerd.exe" --run-service',
     ["C:\\Program Files\\containerd\\containerd.exe", "--run-service"]),
    ('  spaced\targs  ', ["spaced", "args"]),
    ('"a""b"', ['a"b']),
    ("", []),
])
def test_split_command_line(line, argv):
    assert k8sbin.split_command_line(line) == argv


ARGV = k8sbin.split_command_line("C:\\k\\kube-log-runner.exe -log-file=C:\\k\\logs\\kubelet.log "
                                 "-log-file-size=100M -log-file-age=168h -flush-interval=5s "
                                 "C:\\k\\kubelet.exe --windows-service --v=2")


def test_unwrap_splits_runner_and_program():
    runner, prog = k8sbin.unwrap(ARGV)
    assert runner == ARGV[:5]
    assert prog == ["C:\\k\\kubelet.exe", "--windows-service", "--v=2"]
    assert k8sbin.unwrap(["C:\\k\\kubelet.exe", "--v=2"]) == (None, ["C:\\k\\kubelet.exe", "--v=2"])


def test_go_quantity_and_duration():
    assert k8sbin.go_quantity("100M") == (100000000, None)
    assert k8sbin.go_quantity("100Mi") == (104857600, None)
    assert k8sbin.go_duration_str(k8sbin.go_duration("168h")) == "168h0m0s"


def test_runner_flags_by_release():
    r30, r34 = "Kubernetes v1.30.0", "Kubernetes v1.34.0"
    assert k8sbin.runner_check(r30, ARGV).startswith("flag provided but not defined: -log-file-size\n")
    assert k8sbin.runner_check(r34, ARGV) is None
    assert k8sbin.runner_check(r30, ["kube-log-runner.exe", "--log-file", "x.log", "kubelet.exe"]) is None
    assert k8sbin.runner_check(r34, ["kube-log-runner.exe", "-log-file=x.log"]).endswith("not enough arguments to run")
    assert 'invalid value "100MB" for flag -log-file-size' in k8sbin.runner_check(
        r34, ["kube-log-runner.exe", "-log-file-size=100MB", "kubelet.exe"])


def test_a_kubelet_the_knob_names_fails_to_start():
    d = {"kubelet_start_fails": ["1.31.2"]}
    why = k8sbin.start_fault(d, "kubelet", "Kubernetes v1.31.2")
    assert why and "failed to run Kubelet" in why
    assert k8sbin.start_fault(d, "kubelet", "Kubernetes v1.30.4") is None
    assert k8sbin.start_fault(d, "kube-proxy", "Kubernetes v1.31.2") is None
    assert k8sbin.start_fault({}, "kubelet", "Kubernetes v1.31.2") is None
