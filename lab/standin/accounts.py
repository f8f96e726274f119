"""The lab API server's ServiceAccounts, Secrets written by hand,
ClusterRoleBindings and who may do what, by upstream's rules
(docs/research/bootstrap.md#bt-secret, #bt-proxy): what kwinctl's join
creates on a control plane without kubeadm (a bootstrap-token Secret and
kubeadm's bindings) and kube-proxy's own identity (a ServiceAccount token
Secret per node, filled by a modelled token controller).

Stored beside bootstrap.py's objects (the same folder):
  serviceaccounts/NS/NAME.json        ServiceAccounts (with a uid)
  secrets/NS/NAME.json                Secrets (bootstrap.py's and these)
  clusterrolebindings/NAME.json       ClusterRoleBindings

Used by the kubectl stand-in (`apply|create -f -`, `get endpointslices`,
`auth whoami`) and by winsim's kube-proxy (winsim/proxyauth.py).
"""

import base64
import json
import re
import secrets as pysecrets
import uuid

import bootstrap
from bootstrap import ApiError, User

SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_KEY = "kubernetes.io/service-account.name"
SA_UID_KEY = "kubernetes.io/service-account.uid"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

# docs/research/bootstrap.md#bt-proxy: system:node-proxier's rules
# (bootstrappolicy), as (verb, resource) with the API group in the name
NODE_PROXIER = {(v, r) for v in ("list", "watch") for r in ("services", "endpoints",
                                                           "endpointslices.discovery.k8s.io")}
NODE_PROXIER |= {(v, "nodes") for v in ("get", "list", "watch")}
NODE_PROXIER |= {(v, "events") for v in ("create", "update", "patch")}
# bootstrappolicy's default binding of system:node-proxier: the user
# system:kube-proxy (a client certificate's CN)
DEFAULT_BINDINGS = [{"metadata": {"name": "system:node-proxier"},
                     "roleRef": {"kind": "ClusterRole", "name": "system:node-proxier"},
                     "subjects": [{"kind": "User", "name": "system:kube-proxy"}]}]
# docs/research/bootstrap.md#bt-proxy: NodeRules(), the part kube-proxy's
# reads touch: services yes, nodes yes, EndpointSlices no
NODE_RULES = {(v, "services") for v in ("get", "list", "watch")} | \
    {(v, "nodes") for v in ("create", "get", "list", "watch")} | {("get", "endpoints")}


def _b64(s):
    return base64.b64encode(s.encode()).decode()


def _data(obj):
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


# ------------------------------------------------------------------ objects


def service_account(api, ns, name):
    return api._read("serviceaccounts", ns, name + ".json")


def secret(api, ns, name):
    return api._read("secrets", ns, name + ".json")


def token_controller(api, ns, name):
    """The token controller's syncSecret for one Secret
    (docs/research/bootstrap.md#bt-proxy): its ServiceAccount missing, the
    Secret is deleted; else token, ca.crt and namespace are filled and the
    ServiceAccount's uid recorded."""
    s = secret(api, ns, name)
    if not s or s.get("type") != SA_TOKEN_TYPE:
        return
    ann = s["metadata"].setdefault("annotations", {})
    sa = service_account(api, ns, ann.get(SA_NAME_KEY, ""))
    if sa is None or (ann.get(SA_UID_KEY) and ann[SA_UID_KEY] != sa["metadata"]["uid"]):
        api.delete_secret(name, ns)
        return
    d = s.setdefault("data", {})
    if not d.get("token"):
        # an opaque stand-in for the controller's signed JWT: unguessable,
        # compared whole by the authenticator below
        d["token"] = _b64("lab-sa." + pysecrets.token_urlsafe(32))
    d["ca.crt"] = _b64(api.ca_pem())
    d["namespace"] = _b64(ns)
    ann[SA_UID_KEY] = sa["metadata"]["uid"]
    api.put_secret(s)


def _invalid(kind, name, why):
    return ApiError(422, 'The %s "%s" is invalid: %s' % (kind, name, why))


def put(api, obj, default_ns, create):
    """`kubectl apply` (create=False) or `create` (True) of one object:
    (exit code, stdout, stderr), or None for kinds not modelled here."""
    kind = obj.get("kind")
    md = obj.setdefault("metadata", {})
    name = md.get("name") or ""
    try:
        if kind == "Secret" and obj.get("apiVersion") == "v1":
            return _put_secret(api, obj, md.setdefault("namespace", default_ns), name, create)
        if kind == "ServiceAccount" and obj.get("apiVersion") == "v1":
            return _put_sa(api, obj, md.setdefault("namespace", default_ns), name, create)
        if kind == "ClusterRoleBinding" and obj.get("apiVersion") == "rbac.authorization.k8s.io/v1":
            return _put_crb(api, obj, name, create)
    except ApiError as e:
        return 1, "", "Error from server (%s): %s\n" % (
            {409: "AlreadyExists", 422: "Invalid"}.get(e.code, "BadRequest"), e)
    return None


def _put_secret(api, obj, ns, name, create):
    if not NAME.match(name):
        raise _invalid("Secret", name, "metadata.name: Invalid value")
    old = secret(api, ns, name)
    if old and create:
        raise ApiError(409, 'secrets "%s" already exists' % name)
    data = dict(obj.get("data") or {})
    # the API server folds stringData into data
    for k, v in (obj.pop("stringData", None) or {}).items():
        data[k] = _b64(v)
    obj["data"] = data
    obj.setdefault("type", "Opaque")
    if old and old.get("type") != obj["type"]:
        raise _invalid("Secret", name, "type: Invalid value: field is immutable")
    if obj["type"] == SA_TOKEN_TYPE:
        # ValidateSecret: the annotation is required
        if not (obj["metadata"].get("annotations") or {}).get(SA_NAME_KEY):
            raise _invalid("Secret", name, "metadata.annotations[%s]: Required value" % SA_NAME_KEY)
        if old:
            # the controller's fields stay (apply merges; kubectl does not
            # send them back)
            for k in ("token", "ca.crt", "namespace"):
                if k in old.get("data", {}) and k not in data:
                    data[k] = old["data"][k]
            ann = obj["metadata"].setdefault("annotations", {})
            if SA_UID_KEY in old["metadata"].get("annotations", {}):
                ann.setdefault(SA_UID_KEY, old["metadata"]["annotations"][SA_UID_KEY])
    api.put_secret(obj)
    if obj["type"] == SA_TOKEN_TYPE:
        token_controller(api, ns, name)
    return 0, "secret/%s %s\n" % (name, "configured" if old else "created"), ""


def _put_sa(api, obj, ns, name, create):
    if not NAME.match(name):
        raise _invalid("ServiceAccount", name, "metadata.name: Invalid value")
    old = service_account(api, ns, name)
    if old and create:
        raise ApiError(409, 'serviceaccounts "%s" already exists' % name)
    obj["metadata"]["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
    api._write(obj, "serviceaccounts", ns, name + ".json")
    return 0, "serviceaccount/%s %s\n" % (name, "unchanged" if old else "created"), ""


def _put_crb(api, obj, name, create):
    if not name:
        raise _invalid("ClusterRoleBinding", name, "metadata.name: Required value")
    ref = obj.get("roleRef") or {}
    if ref.get("kind") != "ClusterRole" or not ref.get("name"):
        raise _invalid("ClusterRoleBinding", name, "roleRef.kind: Unsupported value")
    old = api._read("clusterrolebindings", name + ".json")
    if old and create:
        raise ApiError(409, 'clusterrolebindings.rbac.authorization.k8s.io "%s" already exists' % name)
    if old and old.get("roleRef") != ref:
        # roleRef is immutable (rbac validation)
        raise _invalid("ClusterRoleBinding", name, "roleRef: Invalid value: cannot change roleRef")
    api._write({"metadata": {"name": name}, "roleRef": ref, "subjects": obj.get("subjects") or []},
               "clusterrolebindings", name + ".json")
    return 0, "clusterrolebinding.rbac.authorization.k8s.io/%s %s\n" % (
        name, "unchanged" if old else "created"), ""


# ------------------------------------------------------------ authn, authz


def authenticate_sa_token(api, token):
    """The legacy ServiceAccount token authenticator
    (docs/research/bootstrap.md#bt-proxy): the Secret holding the token must
    exist, and its ServiceAccount with the uid it records. None: 401."""
    if not token:
        return None
    for ns in _namespaces(api):
        for s in api.secrets(ns):
            if s.get("type") != SA_TOKEN_TYPE or s["metadata"].get("deletionTimestamp"):
                continue
            if not pysecrets.compare_digest(_data(s).get("token", ""), token):
                continue
            ann = s["metadata"].get("annotations", {})
            sa = service_account(api, ns, ann.get(SA_NAME_KEY, ""))
            if sa is None or sa["metadata"]["uid"] != ann.get(SA_UID_KEY):
                return None
            return User("system:serviceaccount:%s:%s" % (ns, sa["metadata"]["name"]),
                        ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"])
    return None


def _namespaces(api):
    import os
    try:
        return sorted(os.listdir(api._path("secrets")))
    except OSError:
        return []


def authenticate(api, kubeconfig):
    """Who a kubeconfig's user is to the lab API server: a bootstrap token,
    a ServiceAccount token or a client certificate signed by the cluster CA
    (docs/research/bootstrap.md#bt-authn, #bt-proxy, #bt-node). None: 401."""
    user = kubeconfig_user(kubeconfig)
    if user is None:
        return None
    if user.get("token"):
        return api.authenticate_token(user["token"]) or authenticate_sa_token(api, user["token"])
    if user.get("client-certificate-data"):
        return api.authenticate_cert(base64.b64decode(user["client-certificate-data"]).decode())
    return None


def kubeconfig_user(kc):
    """The current context's user entry of a kubeconfig (a dict), or None."""
    try:
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == kc["current-context"])
        return next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
    except (KeyError, TypeError, StopIteration):
        return None


def _rules(binding):
    return {"system:node-proxier": NODE_PROXIER}.get(binding["roleRef"]["name"], set())


def _subject_matches(s, user):
    if s.get("kind") == "Group":
        return s.get("name") in user.groups
    if s.get("kind") == "User":
        return s.get("name") == user.name
    if s.get("kind") == "ServiceAccount":
        return user.name == "system:serviceaccount:%s:%s" % (s.get("namespace"), s.get("name"))
    return False


def allowed(api, user, verb, resource):
    """The Node authorizer (NodeRules for what it does not subdivide) then
    RBAC over the stored and default bindings
    (docs/research/bootstrap.md#bt-proxy)."""
    if "system:nodes" in user.groups and user.name.startswith("system:node:") and (verb, resource) in NODE_RULES:
        return True
    for b in api._list("clusterrolebindings") + DEFAULT_BINDINGS:
        if any(_subject_matches(s, user) for s in b.get("subjects", [])) and (verb, resource) in _rules(b):
            return True
    return False


def forbidden(user, verb, resource):
    res, _, group = resource.partition(".")
    return ApiError(403, '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" at the cluster scope'
                    % (resource, user.name, verb, res, group))


def request(api, kubeconfig, verb, resource):
    """One request with a kubeconfig's credentials: the user, or ApiError
    (401 Unauthorized, 403 forbidden)."""
    user = authenticate(api, kubeconfig)
    if user is None:
        raise bootstrap.unauthorized()
    if not allowed(api, user, verb, resource):
        raise forbidden(user, verb, resource)
    return user


# ------------------------------------------------------------------ kubectl

ADMIN = {"users": [{"name": "admin", "user": {}}], "contexts": [{"name": "a", "context": {"user": "admin"}}],
         "current-context": "a"}


def kubectl(api, verb, words, kubeconfig, out):
    """`kubectl get endpointslices -A -o json` and `kubectl auth whoami -o
    json` with the --kubeconfig's credentials (None: the control plane's
    admin, as the stand-in always was): (exit code, stdout, stderr), or
    None when the words are not about them."""
    if verb == "auth" and words[:1] == ["whoami"]:
        if kubeconfig is None:
            info = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]}
        else:
            user = authenticate(api, kubeconfig)
            if user is None:
                return 1, "", "error: You must be logged in to the server (Unauthorized)\n"
            info = {"username": user.name, "groups": user.groups}
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                  "status": {"userInfo": info}}
        return 0, json.dumps(review, indent=1) + "\n", ""
    if verb == "get" and words[:1] in (["endpointslices"], ["endpointslice"]):
        if out != "json":
            return 1, "", "error: the lab's kubectl stand-in prints -o json only\n"
        if kubeconfig is not None:
            try:
                request(api, kubeconfig, "list", "endpointslices.discovery.k8s.io")
            except ApiError as e:
                if e.code == 401:
                    return 1, "", "error: You must be logged in to the server (Unauthorized)\n"
                return 1, "", "Error from server (Forbidden): %s\n" % e
        return 0, json.dumps({"apiVersion": "v1", "kind": "List", "items": []}, indent=1) + "\n", ""
    return None
