"""The `act_<kind>` handlers, one per action kind kwinctl sends: `common`
(both profiles), `transparent` (Docker's transparent network) and `l2bridge`
(containerd + HNS). `host.handlers()` collects them by name."""
