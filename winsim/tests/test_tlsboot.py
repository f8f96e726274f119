"""TLS bootstrapping in the lab (issue 35, slice a): winsim's kubelet
(winsim/tlsboot.py) against the lab API server's rules
(lab/standin/bootstrap.py), each rule from docs/research/bootstrap.md."""

import base64
import datetime
import json
import os
import sys

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from winsim import tlsboot

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lab", "standin"))
import bootstrap  # noqa: E402  (the lab's API server model)

KC = r"C:\k\kubelet.conf"
BKC = r"C:\k\bootstrap-kubelet.conf"
CERTS = r"C:\k\pki"


def bootstrap_kubeconfig(api, token):
    return json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {
            "server": "https://198.18.1.1:6443",
            "certificate-authority-data": base64.b64encode(api.ca_pem().encode()).decode()}}],
        "users": [{"name": "tls-bootstrap", "user": {"token": token}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "tls-bootstrap"}}],
        "current-context": "lab"})


@pytest.fixture
def api(tmp_path):
    a = bootstrap.ApiServer(str(tmp_path / "apiserver"))
    a.ensure_kubeadm_bindings()
    return a


def join(api, node, token=None, files=None):
    files = {} if files is None else files
    token = token or api.create_token(900)
    files[BKC] = bootstrap_kubeconfig(api, token)
    return tlsboot.load_client_cert(api, files, KC, BKC, CERTS, node), files


def cn(files):
    cert = x509.load_pem_x509_certificate(tlsboot.client_cert(files, KC).encode())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_a_token_has_upstreams_form_and_secret(tmp_path):
    # bt-token
    a = bootstrap.ApiServer(str(tmp_path))
    t = a.create_token(60)
    assert bootstrap.TOKEN.match(t)
    (s,) = [x for x in a.secrets() if x["metadata"]["name"] == "bootstrap-token-" + t.split(".")[0]]
    assert s["type"] == "bootstrap.kubernetes.io/token"
    data = {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert "expiration" in data
    a.delete_secret(s["metadata"]["name"])
    assert a.secrets() == []


def test_a_node_joins_with_a_certificate_of_its_own(api):
    out, files = join(api, "win1")
    assert out == "issued"
    assert cn(files) == "system:node:win1"
    # the file layout: the dated file, kubelet-client-current.pem, no temporary key
    names = sorted(p.rsplit("\\", 1)[1] for p in files if p.startswith(CERTS))
    assert names[-1] == "kubelet-client-current.pem" and names[0].startswith("kubelet-client-20")
    assert not any(p.endswith(tlsboot.KEY_TMP) for p in files)
    kc = json.loads(files[KC])
    assert kc["users"][0]["user"]["client-certificate"] == CERTS + "\\kubelet-client-current.pem"
    (csr,) = api.csrs()
    assert csr["status"]["conditions"][0]["reason"] == "AutoApproved"
    assert csr["spec"]["username"].startswith("system:bootstrap:")
    # the node may write its own Node, and no other
    assert tlsboot.register(api, files, KC, "win1") is None
    assert tlsboot.register(api, files, KC, "win2") == \
        'nodes "win2" is forbidden: node "win1" is not allowed to modify node "win2"'


def test_a_valid_certificate_needs_no_token(api):
    _, files = join(api, "win1")
    files[BKC] = bootstrap_kubeconfig(api, "abcdef.0123456789abcdef")  # not a token the cluster has
    assert tlsboot.load_client_cert(api, files, KC, BKC, CERTS, "win1") == "valid"
    assert len(api.csrs()) == 1


def test_an_expired_or_deleted_token_is_unauthorized(api):
    t = api.create_token(60, t=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1))
    with pytest.raises(tlsboot.KubeletFailed, match="cannot create certificate signing request: Unauthorized"):
        join(api, "win1", token=t)
    t = api.create_token(600)
    api.delete_secret("bootstrap-token-" + t.split(".")[0])
    with pytest.raises(tlsboot.KubeletFailed, match="Unauthorized"):
        join(api, "win1", token=t)
    assert api.csrs() == []


def test_a_csr_nobody_may_approve_stays_pending(api):
    os.remove(os.path.join(api.dir, "clusterrolebindings", "kubeadm:node-autoapprove-bootstrap.json"))
    with pytest.raises(tlsboot.Waiting, match="not approved"):
        join(api, "win1")
    (csr,) = api.csrs()
    assert "conditions" not in csr["status"] and "certificate" not in csr["status"]


def test_a_certificate_of_another_cluster_or_expired_is_unauthorized(api, tmp_path):
    other = bootstrap.ApiServer(str(tmp_path / "other"))
    other.ensure_kubeadm_bindings()
    _, files = join(other, "win1")
    assert tlsboot.register(api, files, KC, "win1") == "Unauthorized"
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=400)
    _, files = join(api, "win1")
    assert tlsboot.register(api, files, KC, "win1", now=later) == "Unauthorized"
    # and the kubelet bootstraps again once its certificate has expired
    assert not tlsboot.still_valid(files, KC, now=later)


def test_the_approver_recognises_only_node_client_requests(api):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())

    def csr(org, name, san=False):
        b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("win1")]), critical=False)
        return b.sign(key, hashes.SHA256())

    usages = {"digital signature", "key encipherment", "client auth"}
    assert bootstrap.is_kubelet_client_csr(csr("system:nodes", "system:node:win1"), usages)
    assert not bootstrap.is_kubelet_client_csr(csr("system:masters", "system:node:win1"), usages)
    assert not bootstrap.is_kubelet_client_csr(csr("system:nodes", "admin"), usages)
    assert not bootstrap.is_kubelet_client_csr(csr("system:nodes", "system:node:win1", san=True), usages)
    assert not bootstrap.is_kubelet_client_csr(csr("system:nodes", "system:node:win1"), usages | {"server auth"})


def test_kubeadm_and_kubectl_answer_from_the_model(api):
    code, out, _ = bootstrap.kubeadm(api, ["token", "create", "--ttl", "15m"])
    assert code == 0 and bootstrap.TOKEN.match(out.strip())
    tid = out.split(".")[0]
    code, out, _ = bootstrap.kubectl(api, "https://198.18.1.1:6443", "get", ["secrets"], "kube-system", "json")
    assert [s["metadata"]["name"] for s in json.loads(out)["items"]] == ["bootstrap-token-" + tid]
    assert bootstrap.kubeadm(api, ["token", "create", "--ttl", "15x"])[0] == 1
    code, out, _ = bootstrap.kubectl(api, "https://198.18.1.1:6443", "get", ["configmap", "cluster-info"],
                                     "kube-public", "json")
    kc = json.loads(json.loads(out)["data"]["kubeconfig"])
    assert base64.b64decode(kc["clusters"][0]["cluster"]["certificate-authority-data"]).decode() == api.ca_pem()
    assert bootstrap.kubectl(api, "", "get", ["nodes"], "default", "json") is None
    code, out, _ = bootstrap.kubectl(api, "", "delete", ["secret", "bootstrap-token-" + tid], "kube-system", "")
    assert (code, out) == (0, 'secret "bootstrap-token-%s" deleted\n' % tid)
    assert bootstrap.kubeadm(api, ["token", "delete", tid])[0] == 1
    assert api.secrets() == []


def host_state(api, node, token):
    return {"hostname": node.upper(), "apiserver": api.dir,
            "placed_text": {r"C:\k\bootstrap-kubelet.conf": {"sha256": "-", "text": bootstrap_kubeconfig(api, token)}}}


ARGS = ["--windows-service", r"--bootstrap-kubeconfig=C:\k\bootstrap-kubelet.conf", r"--kubeconfig=C:\k\kubelet.conf",
        r"--cert-dir=C:\var\lib\kubelet\pki"]


def test_the_simulated_kubelet_bootstraps_when_it_starts(api):
    token = api.create_token(900)
    d1 = host_state(api, "win1", token)
    assert tlsboot.at_start(d1, ARGS + ["--hostname-override=win1"]) is None
    assert r"C:\var\lib\kubelet\pki\kubelet-client-current.pem" in d1["kubelet_files"]
    files = tlsboot.node_files(d1)
    assert tlsboot.register(api, files, KC, "win1") is None
    # a restart with a valid certificate asks nothing, even once the token is gone
    api.delete_secret("bootstrap-token-" + token.split(".")[0])
    assert tlsboot.at_start(d1, ARGS + ["--hostname-override=win1"]) is None
    assert len(api.csrs()) == 1
    # the token gone, a node without a certificate cannot join
    d2 = host_state(api, "win2", token)
    why = tlsboot.at_start(d2, ARGS + ["--hostname-override=win2"])
    assert "cannot create certificate signing request: Unauthorized" in why
    # a node holding win1's certificate may not write its own Node
    d2["kubelet_files"] = dict(d1["kubelet_files"])
    assert tlsboot.register(api, tlsboot.node_files(d2), KC, "win2") == \
        'nodes "win2" is forbidden: node "win1" is not allowed to modify node "win2"'


def test_the_probe_fact_carries_the_certificate_and_never_the_key(api):
    token = api.create_token(900)
    d = host_state(api, "win1", token)
    assert tlsboot.at_start(d, ARGS + ["--hostname-override=win1"]) is None
    path = r"C:\var\lib\kubelet\pki\kubelet-client-current.pem"
    pem = d["kubelet_files"][path]
    cert_pem, key_pem = tlsboot.split_pem(pem)
    assert "PRIVATE KEY" in key_pem
    fact = tlsboot.probe_fact(d, path)
    want = x509.load_pem_x509_certificate(cert_pem.encode())
    assert x509.load_der_x509_certificate(base64.b64decode(fact["der"])) == want
    # the key's PEM, or any line of its base64, appears nowhere in the fact
    shown = json.dumps(fact)
    assert "PRIVATE KEY" not in shown
    key_lines = [ln for ln in key_pem.splitlines() if ln and not ln.startswith("-----")]
    assert key_lines and not any(ln in shown for ln in key_lines)
