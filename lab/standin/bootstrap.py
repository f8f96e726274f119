"""The lab API server's TLS bootstrapping, by upstream's rules
(docs/research/bootstrap.md): bootstrap tokens in kube-system Secrets, the
token authenticator, kubeadm's RBAC bindings, the CSR approver and signer
for kubelet client certificates, client-certificate authentication and the
Node authorizer's confinement of a node to its own Node.

The cluster lives in a folder (the stand-in's lab folder, kubectl/apiserver):
  ca.key ca.crt                       the cluster CA (made on first use)
  secrets/kube-system/NAME.json       Secrets (only bootstrap tokens here)
  csr/NAME.json                       CertificateSigningRequests
  clusterrolebindings/NAME.json       kubeadm's three bindings (bt-rbac)
  config.json                         {"signing_seconds": N} (default a year)

Used by the kubectl stand-in (lab/kubectl-standin) and by winsim's kubelet
(winsim/k8sbin.py), which performs the kubelet's side of the bootstrap
against it. Errors are the API server's texts (Unauthorized, forbidden).
"""

import base64
import datetime
import hashlib
import json
import os
import re
import secrets as pysecrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# docs/research/bootstrap.md#bt-token
TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
SECRET_PREFIX = "bootstrap-token-"
SECRET_TYPE = "bootstrap.kubernetes.io/token"
EXTRA_GROUP = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")
# docs/research/bootstrap.md#bt-authn
KUBEADM_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# docs/research/bootstrap.md#bt-csr
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CLIENT_USAGES = ({"digital signature", "key encipherment", "client auth"},
                 {"digital signature", "client auth"})
YEAR = 365 * 24 * 3600
# docs/research/bootstrap.md#bt-rbac: binding -> (cluster role, group)
KUBEADM_BINDINGS = {
    "kubeadm:kubelet-bootstrap": ("system:node-bootstrapper", KUBEADM_GROUP),
    "kubeadm:node-autoapprove-bootstrap":
        ("system:certificates.k8s.io:certificatesigningrequests:nodeclient", KUBEADM_GROUP),
    "kubeadm:node-autoapprove-certificate-rotation":
        ("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
}
# what each cluster role allows: (verb, resource, subresource)
ROLES = {
    "system:node-bootstrapper": {("create", "certificatesigningrequests", ""),
                                 ("get", "certificatesigningrequests", "")},
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient":
        {("create", "certificatesigningrequests", "nodeclient")},
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient":
        {("create", "certificatesigningrequests", "selfnodeclient")},
}


class ApiError(Exception):
    """An API server's refusal: code (401, 403, 404) and its message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def unauthorized():
    return ApiError(401, "Unauthorized")


def validity(cert):
    """(not before, not after) in UTC, on cryptography before 42 too (the
    stand-in runs on the system's python3)."""
    utc = datetime.timezone.utc
    if hasattr(cert, "not_valid_after_utc"):
        return cert.not_valid_before_utc, cert.not_valid_after_utc
    return cert.not_valid_before.replace(tzinfo=utc), cert.not_valid_after.replace(tzinfo=utc)


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class User:
    def __init__(self, name, groups):
        self.name, self.groups = name, list(groups)

    def __repr__(self):
        return "User(%r, %r)" % (self.name, self.groups)


class ApiServer:
    def __init__(self, folder):
        self.dir = folder
        os.makedirs(folder, exist_ok=True)

    # ---------------------------------------------------------------- files

    def _path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _read(self, *parts):
        try:
            with open(self._path(*parts)) as f:
                return json.load(f)
        except OSError:
            return None

    def _write(self, obj, *parts):
        p = self._path(*parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = p + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
        os.replace(tmp, p)

    def _list(self, *parts):
        try:
            names = sorted(n[:-5] for n in os.listdir(self._path(*parts)) if n.endswith(".json"))
        except OSError:
            return []
        return [o for o in (self._read(*parts, n + ".json") for n in names) if o]

    def config(self):
        return self._read("config.json") or {}

    # ------------------------------------------------------------------- CA

    def ca(self):
        """The cluster CA's key and certificate (kubeadm's: CN kubernetes,
        ten years), made on first use."""
        try:
            with open(self._path("ca.key"), "rb") as f:
                key = serialization.load_pem_private_key(f.read(), None)
            with open(self._path("ca.crt"), "rb") as f:
                return key, x509.load_pem_x509_certificate(f.read())
        except OSError:
            pass
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        t = now_utc()
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(t - datetime.timedelta(minutes=5))
                .not_valid_after(t + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        with open(self._path("ca.key"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        with open(self._path("ca.crt"), "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        return key, cert

    def ca_pem(self):
        return self.ca()[1].public_bytes(serialization.Encoding.PEM).decode()

    def ca_hash(self):
        """kubeadm's CA pin: sha256 of the CA's SubjectPublicKeyInfo."""
        spki = self.ca()[1].public_key().public_bytes(serialization.Encoding.DER,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)
        return "sha256:" + hashlib.sha256(spki).hexdigest()

    # --------------------------------------------------------------- tokens

    def ensure_kubeadm_bindings(self):
        for name, (role, group) in KUBEADM_BINDINGS.items():
            if not self._read("clusterrolebindings", name + ".json"):
                self._write({"metadata": {"name": name}, "roleRef": {"kind": "ClusterRole", "name": role},
                             "subjects": [{"kind": "Group", "name": group}]},
                            "clusterrolebindings", name + ".json")

    def create_token(self, ttl_seconds, groups=(KUBEADM_GROUP,), t=None, description=None):
        """`kubeadm token create --ttl [--description]`: a new token and its
        Secret; each creation is also written to created.jsonl (its id,
        description and time, never its secret): the lab's record of how
        many tokens a run made."""
        t = t or now_utc()
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        tid = "".join(pysecrets.choice(alphabet) for _ in range(6))
        sec = "".join(pysecrets.choice(alphabet) for _ in range(16))
        data = {"token-id": tid, "token-secret": sec, "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true", "auth-extra-groups": ",".join(groups)}
        if ttl_seconds:
            data["expiration"] = rfc3339(t + datetime.timedelta(seconds=ttl_seconds))
        if description:
            # docs/research/bootstrap.md#bt-join: the Secret's `description`
            data["description"] = description
        with open(self._path("created.jsonl"), "a") as f:
            f.write(json.dumps({"id": tid, "description": description or "", "at": rfc3339(t)}) + "\n")
        self.put_secret({"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
                         "metadata": {"name": SECRET_PREFIX + tid, "namespace": "kube-system"},
                         "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})
        return "%s.%s" % (tid, sec)

    def put_secret(self, obj):
        ns = obj["metadata"].get("namespace") or "default"
        self._write(obj, "secrets", ns, obj["metadata"]["name"] + ".json")

    def secrets(self, ns="kube-system"):
        return self._list("secrets", ns)

    def delete_secret(self, name, ns="kube-system"):
        try:
            os.remove(self._path("secrets", ns, name + ".json"))
        except FileNotFoundError:
            raise ApiError(404, 'secrets "%s" not found' % name) from None

    # -------------------------------------------------------------- authn

    def authenticate_token(self, token, t=None):
        """docs/research/bootstrap.md#bt-authn; None: not authenticated."""
        m = TOKEN.match(token or "")
        if not m:
            return None
        tid, sec = m.groups()
        s = self._read("secrets", "kube-system", SECRET_PREFIX + tid + ".json")
        if not s or s.get("type") != SECRET_TYPE or not s.get("data"):
            return None
        if s["metadata"].get("deletionTimestamp"):
            return None
        d = {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
        if not pysecrets.compare_digest(d.get("token-secret", ""), sec) or d.get("token-id") != tid:
            return None
        exp = d.get("expiration")
        if exp:
            try:
                when = datetime.datetime.strptime(exp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
            except ValueError:
                return None
            if (t or now_utc()) > when:
                return None
        if d.get("usage-bootstrap-authentication") != "true":
            return None
        groups = ["system:bootstrappers"]
        for g in [g.strip() for g in d.get("auth-extra-groups", "").split(",") if g.strip()]:
            if not EXTRA_GROUP.match(g):
                return None
            groups.append(g)
        return User("system:bootstrap:" + tid, groups)

    def authenticate_cert(self, cert_pem, t=None):
        """A client certificate signed by the cluster CA and valid now: its
        CN is the user, its O the groups (docs/research/bootstrap.md#bt-node)."""
        try:
            cert = x509.load_pem_x509_certificate(cert_pem.encode() if isinstance(cert_pem, str) else cert_pem)
        except ValueError:
            return None
        ca = self.ca()[1]
        try:
            pub = ca.public_key()
            if isinstance(pub, rsa.RSAPublicKey):
                pub.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                           cert.signature_hash_algorithm)
            else:
                pub.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        except Exception:  # noqa: BLE001 (any verification failure: not ours)
            return None
        t = t or now_utc()
        before, after = validity(cert)
        if not (before <= t <= after):
            return None
        cn = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        return User(cn[0] if cn else "", orgs + ["system:authenticated"])

    # -------------------------------------------------------------- authz

    def rbac_allows(self, user, verb, resource, sub=""):
        for b in self._list("clusterrolebindings"):
            subjects = b.get("subjects", [])
            if not any((s["kind"] == "Group" and s["name"] in user.groups)
                       or (s["kind"] == "User" and s["name"] == user.name) for s in subjects):
                continue
            if (verb, resource, sub) in ROLES.get(b["roleRef"]["name"], set()):
                return True
        return False

    def node_may_modify(self, user, node):
        """The Node authorizer and NodeRestriction: a node writes only its
        own Node (docs/research/bootstrap.md#bt-node). None: allowed; else
        the API server's refusal."""
        if "system:nodes" not in user.groups or not user.name.startswith("system:node:"):
            return ApiError(403, 'nodes "%s" is forbidden: User "%s" cannot patch resource "nodes" '
                                 'in API group "" at the cluster scope' % (node, user.name))
        own = user.name[len("system:node:"):]
        if own != node:
            return ApiError(403, 'nodes "%s" is forbidden: node "%s" is not allowed to modify node "%s"'
                                 % (node, own, node))
        return None

    # ---------------------------------------------------------------- CSRs

    def create_csr(self, user, csr_pem, signer, usages):
        """POST a CertificateSigningRequest as `user`; the approver and the
        signer act at once (docs/research/bootstrap.md#bt-csr). Returns its
        name."""
        if not self.rbac_allows(user, "create", "certificatesigningrequests"):
            raise ApiError(403, 'certificatesigningrequests.certificates.k8s.io is forbidden: User "%s" '
                                'cannot create resource "certificatesigningrequests" in API group '
                                '"certificates.k8s.io" at the cluster scope' % user.name)
        req = x509.load_pem_x509_csr(csr_pem.encode() if isinstance(csr_pem, str) else csr_pem)
        digest = hashlib.sha256(req.public_bytes(serialization.Encoding.DER)).hexdigest()[:43]
        name = "node-csr-" + digest
        obj = {"metadata": {"name": name},
               "spec": {"request": base64.b64encode(req.public_bytes(serialization.Encoding.PEM)).decode(),
                        "signerName": signer, "usages": list(usages), "username": user.name,
                        "groups": user.groups},
               "status": {}}
        self._approve(obj, req)
        self._sign(obj, req)
        self._write(obj, "csr", name + ".json")
        return name

    def csrs(self):
        return self._list("csr")

    def csr(self, name):
        return self._read("csr", name + ".json")

    def _approve(self, obj, req):
        spec = obj["spec"]
        if spec["signerName"] != KUBELET_SIGNER or not is_kubelet_client_csr(req, set(spec["usages"])):
            return
        cn = common_name(req)
        sub = "selfnodeclient" if spec["username"] == cn else "nodeclient"
        if self.rbac_allows(User(spec["username"], spec["groups"]), "create", "certificatesigningrequests", sub):
            msg = ("Auto approving self kubelet client certificate after SubjectAccessReview."
                   if sub == "selfnodeclient" else
                   "Auto approving kubelet client certificate after SubjectAccessReview.")
            obj["status"]["conditions"] = [{"type": "Approved", "status": "True", "reason": "AutoApproved",
                                            "message": msg}]

    def _sign(self, obj, req):
        if not any(c["type"] == "Approved" for c in obj["status"].get("conditions", [])):
            return
        key, ca = self.ca()
        t = now_utc()
        secs = int(self.config().get("signing_seconds", YEAR))
        cert = (x509.CertificateBuilder().subject_name(req.subject).issuer_name(ca.subject)
                .public_key(req.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(t - datetime.timedelta(minutes=5))
                .not_valid_after(t + datetime.timedelta(seconds=secs))
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(key, hashes.SHA256()))
        obj["status"]["certificate"] = base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def common_name(req):
    cn = [a.value for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return cn[0] if cn else ""


def is_kubelet_client_csr(req, usages):
    """IsKubeletClientCSR (docs/research/bootstrap.md#bt-csr)."""
    orgs = [a.value for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != ["system:nodes"]:
        return False
    try:
        san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if len(list(san)):
            return False
    except x509.ExtensionNotFound:
        pass
    return common_name(req).startswith("system:node:") and usages in CLIENT_USAGES


# ------------------------------------------------------------ kubectl, kubeadm
#
# What the stand-in's kubectl and kubeadm answer from this model (the
# dispatcher in lab/kubectl-standin hands these words over first).

KINDS = {"secrets": "secrets", "secret": "secrets", "csr": "csr", "certificatesigningrequests": "csr",
         "certificatesigningrequest": "csr", "configmap": "configmaps", "configmaps": "configmaps",
         "cm": "configmaps"}
_DUR = re.compile(r"(\d+)(h|m|s)")


def go_seconds(s):
    """A Go duration of h, m and s ("15m", "1h30m", "0"): seconds, or None."""
    if s == "0":
        return 0
    parts = _DUR.findall(s or "")
    if not parts or "".join(n + u for n, u in parts) != s:
        return None
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def cluster_info(api, server):
    """kube-public/cluster-info as kubeadm publishes it: a kubeconfig with
    the server and the CA (docs/research/bootstrap.md#bt-token)."""
    kc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
          "clusters": [{"name": "", "cluster": {
              "server": server,
              "certificate-authority-data": base64.b64encode(api.ca_pem().encode()).decode()}}],
          "contexts": None, "current-context": "", "users": None}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": json.dumps(kc, indent=1)}}


def kubectl(api, server, verb, words, ns, out):
    """`kubectl get|delete` of the kinds above: (exit code, stdout, stderr),
    or None when the words are not about them."""
    if verb not in ("get", "delete") or not words or words[0] not in KINDS:
        return None
    kind, names = KINDS[words[0]], words[1:]
    if verb == "get" and out != "json":
        return 1, "", "error: the lab's kubectl stand-in prints -o json only\n"
    if kind == "configmaps":
        if ns != "kube-public" or names != ["cluster-info"]:
            return 1, "", 'Error from server (NotFound): configmaps "%s" not found\n' % " ".join(names)
        return 0, json.dumps(cluster_info(api, server), indent=1) + "\n", ""
    items = api.secrets(ns) if kind == "secrets" else api.csrs()
    if verb == "get":
        if names:
            found = [i for i in items if i["metadata"]["name"] == names[0]]
            if not found:
                return 1, "", 'Error from server (NotFound): %s "%s" not found\n' % (kind, names[0])
            return 0, json.dumps(found[0], indent=1) + "\n", ""
        return 0, json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n", ""
    if kind != "secrets" or not names:
        return 1, "", "error: the lab's kubectl stand-in deletes secrets by name only\n"
    out_lines, err = [], []
    for n in names:
        try:
            api.delete_secret(n, ns)
            out_lines.append('secret "%s" deleted\n' % n)
        except ApiError as e:
            err.append("Error from server (NotFound): %s\n" % e)
    return (1 if err else 0), "".join(out_lines), "".join(err)


def kubeadm(api, args):
    """`kubeadm token create [--ttl D] [--description TEXT]`, `kubeadm token delete ID|TOKEN`,
    `kubeadm token list -o json`: (exit code, stdout, stderr)."""
    if args[:1] != ["token"] or len(args) < 2:
        return 1, "", "kubeadm (the kwinctl lab's stand-in) runs `kubeadm token create|delete|list` only\n"
    sub, rest = args[1], args[2:]
    api.ensure_kubeadm_bindings()
    if sub == "create":
        ttl = 24 * 3600
        description = None
        i = 0
        while i < len(rest):
            a = rest[i]
            if a.startswith("--ttl") or a.startswith("--description"):
                v = a.split("=", 1)[1] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
                i += 0 if "=" in a else 1
                if a.startswith("--description"):
                    description = v
                    i += 1
                    continue
                ttl = go_seconds(v)
                if ttl is None:
                    return 1, "", 'invalid argument "%s" for "--ttl" flag: time: invalid duration "%s"\n' % (v, v)
            else:
                return 1, "", "unknown flag: %s\n" % a
            i += 1
        return 0, api.create_token(ttl, description=description) + "\n", ""
    if sub == "delete" and rest:
        out, err = [], []
        for t in rest:
            tid = t.split(".", 1)[0]
            try:
                api.delete_secret(SECRET_PREFIX + tid)
                out.append('bootstrap token "%s" deleted\n' % tid)
            except ApiError:
                err.append('bootstrap token "%s" not found\n' % tid)
        return (1 if err else 0), "".join(out), "".join(err)
    if sub == "list":
        out = []
        # only bootstrap tokens (kubeadm selects the Secrets by their type)
        for s in api.secrets():
            if s.get("type") != SECRET_TYPE:
                continue
            d = {k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()}
            out.append({"token": d.get("token-id", "") + ".<hidden>", "expires": d.get("expiration"),
                        "groups": d.get("auth-extra-groups", "").split(",")})
        return 0, "".join(json.dumps(o) + "\n" for o in out), ""
    return 1, "", "kubeadm token: unknown command %r\n" % sub
