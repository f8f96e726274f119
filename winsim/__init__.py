"""winsim: a simulated Windows Server host for kwinctl's lab and tests.

The command line is `winsim/winsim.py` (serve, reboot, gencert, kinds); the
modules:

  server       WinRM (WS-Management / WinRS) over HTTP(S), NTLM and Basic
  host         a script's headers carried out on the state (`execute`), `reboot`
  state        the host's state file (locked), ActionError, ConnectionDropped
  net          the Linux networking standing for Windows' adapters and routes
  hns          the l2bridge profile's HNS model (vSwitch, networks, endpoints)
  files        files on the host, downloads and uploads
  scm          services (SCM start/stop), wrapper tasks, kube-log-runner
  boot         the boot task (kwinctl-boot) and its running instance
  facts        what the probe reports (KWINCTL-FACTS)
  actions/     the `act_<kind>` handlers: common, transparent, l2bridge
  k8sbin       the simulated kubelet.exe / kube-proxy.exe / kube-log-runner.exe
  certs        the lab's CA and server certificates

See winsim/README.md for what it models and the sources.
"""
