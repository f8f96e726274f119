"""The simulated kubelet's TLS bootstrap (docs/research/bootstrap.md#bt-kubelet),
against an API server that follows upstream's rules (the lab's, in
lab/standin/bootstrap.py, passed in as `api`).

`files` is the node's file system as a dict, path -> text (Windows paths
compare without case); the kubelet reads and writes its kubeconfigs and
certificate directory there. Kubeconfigs are read and written as JSON
(which is YAML: client-go reads either).
"""

import base64
import datetime
import json

# (cryptography is imported where it is used: `winsim.py kinds` runs with
# the system python3 and no site packages, src/os/contract.rs)

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
USAGES = ["digital signature", "key encipherment", "client auth"]
KEY_TMP = "kubelet-client.key.tmp"
CURRENT = "kubelet-client-current.pem"


class KubeletFailed(Exception):
    """The kubelet exits with this message (its log's last line)."""


class Waiting(Exception):
    """The kubelet waits for its CSR to be issued (it is neither approved
    nor denied): it runs, but has no credentials and registers nothing."""


def _get(files, path):
    for p, v in files.items():
        if p.lower() == path.lower():
            return v
    return None


def _put(files, path, text):
    for p in list(files):
        if p.lower() == path.lower():
            del files[p]
    files[path] = text


def _join(folder, name):
    return folder.rstrip("\\") + "\\" + name


def _user(kubeconfig_text):
    """The kubeconfig's current user entry (a dict), or None."""
    try:
        kc = json.loads(kubeconfig_text or "")
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == kc["current-context"])
        return next(u["user"] for u in kc["users"] if u["name"] == ctx["user"]), kc
    except (ValueError, KeyError, TypeError, StopIteration):
        return None, None


def client_cert(files, kubeconfig_path):
    """The PEM of the kubeconfig's client certificate (inline, or the file
    it names), or None."""
    u, _ = _user(_get(files, kubeconfig_path))
    if not u:
        return None
    if u.get("client-certificate-data"):
        return base64.b64decode(u["client-certificate-data"]).decode()
    if u.get("client-certificate"):
        return _get(files, u["client-certificate"])
    return None


def still_valid(files, kubeconfig_path, now=None):
    """isClientConfigStillValid: the kubeconfig exists and its certificate
    parses and has not expired."""
    from cryptography import x509
    pem = client_cert(files, kubeconfig_path)
    if not pem:
        return False
    try:
        cert = x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        return False
    after = getattr(cert, "not_valid_after_utc", None) or \
        cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    return (now or datetime.datetime.now(datetime.timezone.utc)) <= after


def load_client_cert(api, files, kubeconfig, bootstrap, cert_dir, node_name, now=None):
    """LoadClientCert: returns "valid" (nothing to do) or "issued"; raises
    KubeletFailed or Waiting as the kubelet would fail or wait."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    if still_valid(files, kubeconfig, now):
        return "valid"
    u, bkc = _user(_get(files, bootstrap))
    if not u:
        raise KubeletFailed("failed to run Kubelet: unable to load bootstrap kubeconfig: "
                            "stat %s: no such file or directory" % bootstrap)
    user = api.authenticate_token(u.get("token"), now)
    if user is None:
        # the API server answers 401 to the CSR's POST
        raise KubeletFailed("failed to run Kubelet: cannot create certificate signing request: Unauthorized")
    key_path = _join(cert_dir, KEY_TMP)
    key_pem = _get(files, key_path)
    if key_pem:
        key = serialization.load_pem_private_key(key_pem.encode(), None)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption()).decode()
        _put(files, key_path, key_pem)
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                    x509.NameAttribute(NameOID.COMMON_NAME, "system:node:" + node_name)]))
           .sign(key, hashes.SHA256()))
    try:
        name = api.create_csr(user, csr.public_bytes(serialization.Encoding.PEM).decode(), SIGNER, USAGES)
    except Exception as e:  # noqa: BLE001 (the API server's refusal: ApiError)
        if not hasattr(e, "code"):
            raise
        raise KubeletFailed("failed to run Kubelet: cannot create certificate signing request: %s" % e) from None
    obj = api.csr(name)
    cert_b64 = obj["status"].get("certificate")
    if not cert_b64:
        raise Waiting("Waiting for client certificate to be issued (CSR %s is not approved)" % name)
    cert_pem = base64.b64decode(cert_b64).decode()
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d-%H-%M-%S")
    pem = cert_pem + key_pem
    _put(files, _join(cert_dir, "kubelet-client-%s.pem" % stamp), pem)
    _put(files, _join(cert_dir, CURRENT), pem)
    files.pop(key_path, None)
    cluster = next(c["cluster"] for c in bkc["clusters"])
    kc = {"apiVersion": "v1", "kind": "Config",
          "clusters": [{"name": "default-cluster", "cluster": {
              k: v for k, v in cluster.items() if k in ("server", "certificate-authority",
                                                         "certificate-authority-data")}}],
          "users": [{"name": "default-auth", "user": {"client-certificate": _join(cert_dir, CURRENT),
                                                      "client-key": _join(cert_dir, CURRENT)}}],
          "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster",
                                                               "user": "default-auth",
                                                               "namespace": "default"}}],
          "current-context": "default-context"}
    _put(files, kubeconfig, json.dumps(kc, indent=1))
    return "issued"


def register(api, files, kubeconfig, node_name, now=None):
    """The kubelet writes its Node with its credentials: None when the API
    server allows it, else the refusal's text (Unauthorized, forbidden)."""
    pem = client_cert(files, kubeconfig)
    user = api.authenticate_cert(pem, now) if pem else None
    if user is None:
        return "Unauthorized"
    e = api.node_may_modify(user, node_name)
    return str(e) if e else None


def _dotnet_name(name):
    """A distinguished name as .NET's X509Certificate2.Subject prints it:
    the last RDN first, ", " between them."""
    return ", ".join(rdn.rfc4514_string() for rdn in reversed(name.rdns))


def probe_fact(d, path):
    """What kwinctl's probe reports of the kubelet's client certificate
    file `path` (templates/probe.ps1.j2, `kubelet_client`): None without the
    file; its first certificate's subject, issuer, expiry (.NET's
    round-trip format, UTC) and base64 DER (only the CERTIFICATE block, never
    the key; empty over 16 KiB); empty strings when none parses."""
    if not path:
        return None
    pem = _get(node_files(d), path)
    if pem is None:
        return None
    from cryptography import x509
    try:
        cert = x509.load_pem_x509_certificate(split_pem(pem)[0].encode())
    except ValueError:
        return {"subject": "", "issuer": "", "not_after": "", "der": ""}
    after = getattr(cert, "not_valid_after_utc", None) or \
        cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    from cryptography.hazmat.primitives.serialization import Encoding
    der = base64.b64encode(cert.public_bytes(Encoding.DER)).decode()
    der = der if len(der) <= 16384 else ""
    return {"subject": _dotnet_name(cert.subject), "issuer": _dotnet_name(cert.issuer),
            "not_after": after.strftime("%Y-%m-%dT%H:%M:%S.0000000Z"), "der": der}


def split_pem(pem):
    """(certificate PEM, rest) of a cert-and-key file."""
    end = "-----END CERTIFICATE-----"
    i = pem.find(end)
    return (pem[:i + len(end)] + "\n", pem[i + len(end):]) if i >= 0 else ("", pem)



# ------------------------------------------------------------ the simulated host


def api_of(d):
    """The lab cluster the host's kubelet talks to (the state's
    "apiserver", written by lab.sh), or None."""
    folder = d.get("apiserver")
    if not folder:
        return None
    import os
    import sys
    standin = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab", "standin")
    if standin not in sys.path:
        sys.path.insert(0, standin)
    import bootstrap
    return bootstrap.ApiServer(folder)


def node_files(d):
    """The node's files the kubelet reads and writes, path -> text: the
    text winsim keeps of placed configuration files, and the kubelet's own
    (its kubeconfig and certificate directory, "kubelet_files")."""
    files = {p: v["text"] for p, v in d.get("placed_text", {}).items()}
    files.update(d.get("kubelet_files", {}))
    return files


def flag_values(args):
    out = {}
    for a in args:
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
    return out


def at_start(d, args):
    """The kubelet starting with --bootstrap-kubeconfig: LoadClientCert
    before anything else (docs/research/bootstrap.md#bt-kubelet). None: it
    runs (with a certificate, or waiting for one: d["kubelet_waiting"]);
    else what it printed before exiting."""
    f = flag_values(args)
    bootstrap = f.get("--bootstrap-kubeconfig")
    d.pop("kubelet_waiting", None)
    if not bootstrap:
        return None
    api = api_of(d)
    if api is None:
        return None
    files = node_files(d)
    before = dict(files)
    name = (f.get("--hostname-override") or d.get("hostname") or "").strip().lower()
    try:
        load_client_cert(api, files, f.get("--kubeconfig", r"C:\k\kubelet.conf"), bootstrap,
                         f.get("--cert-dir", r"C:\var\lib\kubelet\pki"), name)
    except KubeletFailed as e:
        return "E0101 00:00:00.000000    4242 run.go:72] \"command failed\" err=\"%s\"" % e
    except Waiting as e:
        d["kubelet_waiting"] = str(e)
    finally:
        kept = d.setdefault("kubelet_files", {})
        for p, v in files.items():
            if before.get(p) != v:
                kept[p] = v
        for p in before:
            if p not in files:
                kept.pop(p, None)
    return None
