"""The simulated kube-proxy's first requests to the API server with its
--kubeconfig (docs/research/bootstrap.md#bt-proxy): it lists EndpointSlices
(and Services) as the lab cluster (lab/standin/accounts.py) allows that
kubeconfig's user. A refusal does not stop it: the real kube-proxy's
informers log the error and retry, and it never syncs, so its health
endpoint stays unhealthy (winsim/scm.py health).

Only a kubeconfig written for the lab cluster (its certificate authority
is the stand-in's CA) is checked: the lab's shared placeholder kubeconfig
names no real cluster and is left alone, as tlsboot.py leaves it.
"""

import base64
import json

from . import tlsboot

REFUSED = "kube_proxy_refused"
# the user its last start authenticated as (what a test reads)
USER = "kube_proxy_user"


def _kubeconfig(d, path):
    text = tlsboot._get(tlsboot.node_files(d), path) if path else None
    try:
        return json.loads(text or "")
    except ValueError:
        return None


def _names_lab_ca(kc, api):
    try:
        cluster = next(c["cluster"] for c in kc["clusters"])
        ca = base64.b64decode(cluster.get("certificate-authority-data") or "").decode()
    except (KeyError, TypeError, StopIteration, ValueError):
        return False
    return ca.strip() == api.ca_pem().strip()


def log_line(err):
    """What the informer logs when its list fails (B: klog's shape of
    client-go's reflector error)."""
    return ('E0101 00:00:00.000000    4343 reflector.go:158] "Unhandled Error" '
            'err="k8s.io/client-go/informers/factory.go:160: Failed to watch *v1.EndpointSlice: '
            'failed to list *v1.EndpointSlice: %s" logger="UnhandledError"' % str(err).replace('"', '\\"'))


def at_start(d, args):
    """kube-proxy starting: record in d[REFUSED] the log line of a refused
    list (401 Unauthorized, 403 forbidden), or clear it; d[USER] the user
    it authenticated as. Returns that user, or None when nothing was
    checked or it failed."""
    d.pop(REFUSED, None)
    d.pop(USER, None)
    api = tlsboot.api_of(d)
    if api is None:
        return None
    kc = _kubeconfig(d, tlsboot.flag_values(args).get("--kubeconfig"))
    if kc is None or not _names_lab_ca(kc, api):
        return None
    import accounts  # lab/standin, on the path since tlsboot.api_of
    try:
        user = accounts.request(api, kc, "list", "endpointslices.discovery.k8s.io")
    except Exception as e:  # noqa: BLE001 (the API server's refusal: ApiError)
        if not hasattr(e, "code"):
            raise
        d[REFUSED] = log_line(e)
        d.setdefault("logs", {})["kube-proxy:api"] = d[REFUSED]
        return None
    d[USER] = user.name
    return user
