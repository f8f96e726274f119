"""Objects written by hand on the lab's API server (issue 35): a bootstrap
token Secret and kubeadm's bindings made without kubeadm, kube-proxy's
ServiceAccount token Secret (lab/standin/accounts.py), and winsim's
kube-proxy against them (winsim/proxyauth.py); each rule from
docs/research/bootstrap.md, bt-secret and bt-proxy."""

import base64
import json
import os
import sys

import pytest

from winsim import proxyauth, tlsboot

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lab", "standin"))
import accounts  # noqa: E402
import bootstrap  # noqa: E402

KUBEADM_GROUP = "system:bootstrappers:kubeadm:default-node-token"
ES = "endpointslices.discovery.k8s.io"


@pytest.fixture
def api(tmp_path):
    return bootstrap.ApiServer(str(tmp_path / "apiserver"))


def put(api, obj, create=False):
    return accounts.put(api, json.loads(json.dumps(obj)), "default", create)


def token_secret(tid, sec, exp="2999-01-01T00:00:00Z"):
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system"},
            "stringData": {"token-id": tid, "token-secret": sec, "expiration": exp,
                           "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                           "auth-extra-groups": KUBEADM_GROUP}}


def binding(name, role, group):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                    "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]}


def sa(name="kube-proxy"):
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "kube-system"}}


def sa_secret(node, account="kube-proxy"):
    return {"apiVersion": "v1", "kind": "Secret", "type": accounts.SA_TOKEN_TYPE,
            "metadata": {"name": "kwinctl-kube-proxy-" + node, "namespace": "kube-system",
                         "annotations": {accounts.SA_NAME_KEY: account}}}


def proxier_binding():
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "kubeadm:node-proxier"},
            "roleRef": {"kind": "ClusterRole", "name": "system:node-proxier"},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}]}


def kubeconfig(api, **user):
    return {"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {
                "server": "https://198.18.1.1:6443",
                "certificate-authority-data": base64.b64encode(api.ca_pem().encode()).decode()}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "u"}}],
            "current-context": "lab"}


def data(s):
    return {k: base64.b64decode(v).decode() for k, v in s["data"].items()}


def test_a_hand_made_bootstrap_token_authenticates_as_kubeadms(api):
    # bt-secret: stringData folded into data, read by the authenticator (bt-authn)
    code, out, _ = put(api, token_secret("abcdef", "0123456789abcdef"), create=True)
    assert (code, out) == (0, "secret/bootstrap-token-abcdef created\n")
    u = api.authenticate_token("abcdef.0123456789abcdef")
    assert u.name == "system:bootstrap:abcdef" and KUBEADM_GROUP in u.groups
    assert api.authenticate_token("abcdef.0123456789abcdeX") is None
    # create refuses an existing object; the token is unchanged
    code, _, err = put(api, token_secret("abcdef", "ffffffffffffffff"), create=True)
    assert code == 1 and "AlreadyExists" in err
    assert api.authenticate_token("abcdef.0123456789abcdef") is not None
    # an expired one does not authenticate
    put(api, token_secret("zzzzzz", "0123456789abcdef", exp="2000-01-01T00:00:00Z"))
    assert api.authenticate_token("zzzzzz.0123456789abcdef") is None
    api.delete_secret("bootstrap-token-abcdef")
    assert api.authenticate_token("abcdef.0123456789abcdef") is None


def join(api, token):
    files = {r"C:\k\b.conf": json.dumps(kubeconfig(api, token=token))}
    return tlsboot.load_client_cert(api, files, r"C:\k\kubelet.conf", r"C:\k\b.conf", r"C:\k\pki", "win1")


def test_without_kubeadms_bindings_a_token_cannot_join(api):
    # bt-rbac, bt-csr: no node-bootstrapper binding, the CSR's POST is forbidden
    put(api, token_secret("abcdef", "0123456789abcdef"))
    with pytest.raises(tlsboot.KubeletFailed, match="forbidden"):
        join(api, "abcdef.0123456789abcdef")
    # the bootstrapper binding only: the CSR stays pending (no nodeclient)
    put(api, binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", KUBEADM_GROUP))
    with pytest.raises(tlsboot.Waiting):
        join(api, "abcdef.0123456789abcdef")
    # the three of kubeadm, applied by hand: approved and issued
    put(api, binding("kubeadm:node-autoapprove-bootstrap",
                     "system:certificates.k8s.io:certificatesigningrequests:nodeclient", KUBEADM_GROUP))
    put(api, binding("kubeadm:node-autoapprove-certificate-rotation",
                     "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"))
    assert join(api, "abcdef.0123456789abcdef") == "issued"


def test_a_binding_applied_again_is_unchanged_and_its_role_immutable(api):
    b = binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", KUBEADM_GROUP)
    assert put(api, b)[1].endswith(" created\n")
    assert put(api, b)[1].endswith(" unchanged\n")
    b["roleRef"]["name"] = "cluster-admin"
    code, _, err = put(api, b)
    assert code == 1 and "cannot change roleRef" in err


def test_the_token_controller_fills_a_service_account_token_secret(api):
    # bt-proxy: without the annotation the Secret is invalid
    bad = sa_secret("win1")
    del bad["metadata"]["annotations"]
    code, _, err = put(api, bad)
    assert code == 1 and "Required value" in err
    # without the ServiceAccount the controller deletes it
    assert put(api, sa_secret("win1"))[0] == 0
    assert accounts.secret(api, "kube-system", "kwinctl-kube-proxy-win1") is None
    # with it: token, ca.crt, namespace and the uid
    put(api, sa())
    put(api, sa_secret("win1"))
    s = accounts.secret(api, "kube-system", "kwinctl-kube-proxy-win1")
    d = data(s)
    assert d["token"] and d["namespace"] == "kube-system" and d["ca.crt"] == api.ca_pem()
    uid = accounts.service_account(api, "kube-system", "kube-proxy")["metadata"]["uid"]
    assert s["metadata"]["annotations"][accounts.SA_UID_KEY] == uid
    # applied again: the same token
    put(api, sa_secret("win1"))
    assert data(accounts.secret(api, "kube-system", "kwinctl-kube-proxy-win1"))["token"] == d["token"]


def proxy_token(api, node):
    put(api, sa())
    put(api, proxier_binding())
    put(api, sa_secret(node))
    return data(accounts.secret(api, "kube-system", "kwinctl-kube-proxy-" + node))["token"]


def test_kube_proxys_token_is_its_service_account_with_node_proxier(api):
    t1, t2 = proxy_token(api, "win1"), proxy_token(api, "win2")
    assert t1 != t2
    u = accounts.request(api, kubeconfig(api, token=t1), "list", ES)
    assert u.name == "system:serviceaccount:kube-system:kube-proxy"
    assert "system:serviceaccounts:kube-system" in u.groups
    assert accounts.allowed(api, u, "watch", "services")
    # system:node-proxier reads; it writes no Secrets
    assert not accounts.allowed(api, u, "get", "secrets")
    # deleting one node's Secret revokes that node alone
    api.delete_secret("kwinctl-kube-proxy-win1")
    with pytest.raises(bootstrap.ApiError) as e:
        accounts.request(api, kubeconfig(api, token=t1), "list", ES)
    assert e.value.code == 401
    assert accounts.request(api, kubeconfig(api, token=t2), "list", ES).name.endswith(":kube-proxy")


def test_without_the_binding_the_service_account_is_forbidden(api):
    put(api, sa())
    put(api, sa_secret("win1"))
    t = data(accounts.secret(api, "kube-system", "kwinctl-kube-proxy-win1"))["token"]
    with pytest.raises(bootstrap.ApiError) as e:
        accounts.request(api, kubeconfig(api, token=t), "list", ES)
    assert e.value.code == 403
    assert str(e.value) == ('endpointslices.discovery.k8s.io is forbidden: User '
                            '"system:serviceaccount:kube-system:kube-proxy" cannot list resource '
                            '"endpointslices" in API group "discovery.k8s.io" at the cluster scope')


def test_a_nodes_certificate_may_read_services_but_not_list_endpointslices(api):
    # bt-proxy: NodeRules has services, not discovery.k8s.io
    node = bootstrap.User("system:node:win1", ["system:nodes", "system:authenticated"])
    assert accounts.allowed(api, node, "list", "services")
    assert not accounts.allowed(api, node, "list", ES)
    # the default binding: the user system:kube-proxy (its own certificate)
    assert accounts.allowed(api, bootstrap.User("system:kube-proxy", []), "list", ES)


def proxy_host(api, kc_text):
    return {"apiserver": api.dir, "placed_text": {r"C:\k\kube-proxy.conf": {"text": kc_text}}}


def test_winsims_kube_proxy_logs_a_refused_list_and_stays_unhealthy(api):
    args = [r"--kubeconfig=C:\k\kube-proxy.conf"]
    # a good token: nothing refused
    d = proxy_host(api, json.dumps(kubeconfig(api, token=proxy_token(api, "win1"))))
    assert proxyauth.at_start(d, args).name == "system:serviceaccount:kube-system:kube-proxy"
    assert proxyauth.REFUSED not in d
    assert d[proxyauth.USER] == "system:serviceaccount:kube-system:kube-proxy"
    # a deleted Secret: 401, the informer's line
    api.delete_secret("kwinctl-kube-proxy-win1")
    assert proxyauth.at_start(d, args) is None
    assert "failed to list *v1.EndpointSlice: Unauthorized" in d[proxyauth.REFUSED]
    assert proxyauth.USER not in d
    # a node's certificate: 403
    t = api.create_token(600)
    api.ensure_kubeadm_bindings()
    files = {r"C:\k\b.conf": json.dumps(kubeconfig(api, token=t))}
    tlsboot.load_client_cert(api, files, r"C:\k\kubelet.conf", r"C:\k\b.conf", r"C:\k\pki", "win1")
    pem = tlsboot.client_cert(files, r"C:\k\kubelet.conf")
    kc = kubeconfig(api, **{"client-certificate-data": base64.b64encode(pem.encode()).decode()})
    d = proxy_host(api, json.dumps(kc))
    proxyauth.at_start(d, args)
    assert 'User \\"system:node:win1\\" cannot list resource \\"endpointslices\\"' in d[proxyauth.REFUSED]


def test_the_labs_placeholder_kubeconfig_is_not_checked(api):
    kc = kubeconfig(api, token="lab-placeholder")
    kc["clusters"][0]["cluster"]["certificate-authority-data"] = "TEFCIENB"
    d = proxy_host(api, json.dumps(kc))
    assert proxyauth.at_start(d, [r"--kubeconfig=C:\k\kube-proxy.conf"]) is None
    assert proxyauth.REFUSED not in d


def test_kubectl_whoami_and_endpointslices_with_a_kubeconfig(api):
    t = proxy_token(api, "win1")
    code, out, _ = accounts.kubectl(api, "auth", ["whoami"], kubeconfig(api, token=t), "json")
    assert code == 0
    assert json.loads(out)["status"]["userInfo"]["username"] == "system:serviceaccount:kube-system:kube-proxy"
    assert accounts.kubectl(api, "get", ["endpointslices"], kubeconfig(api, token=t), "json")[0] == 0
    code, _, err = accounts.kubectl(api, "get", ["endpointslices"], kubeconfig(api, token="x"), "json")
    assert (code, err) == (1, "error: You must be logged in to the server (Unauthorized)\n")
    assert accounts.kubectl(api, "get", ["pods"], None, "json") is None
