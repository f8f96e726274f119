"""Files on the simulated host: records of paths, SHA-256 and `--version`
lines; downloads (the lab's `downloads` folder), uploads (base64 in the
block) and pushed files (push.py)."""

import base64
import hashlib
import os
import re

from . import push
from .state import ActionError
from .util import block_has, slow


def file_of(d, path):
    """The recorded path (Windows paths compare without case)."""
    for p in d["files"]:
        if p.lower() == path.lower():
            return p
    return None


def file_version(d, path):
    p = file_of(d, path)
    return d["file_versions"].get(p) if p else None


def record_file(d, dest, sha, line):
    old = file_of(d, dest)
    if old:
        d["files"].pop(old)
        d["file_versions"].pop(old, None)
        d.get("file_contents", {}).pop(old, None)
    d["files"][dest] = sha
    d["file_versions"][dest] = line


def fetched(d, h, f):
    """The bytes of a WinFile: downloaded (as Invoke-WebRequest) or
    uploaded (base64 in the block), SHA-256 checked."""
    dest = f["path"]
    src = f.get("source") or {}
    if "url" in src:
        # Invoke-WebRequest over TLS: on .NET 4.6 (build 14393) only SSL 3
        # and TLS 1.0 are offered unless the block adds TLS 1.2 first; the
        # lab's download server, like dl.k8s.io, takes TLS 1.2 only
        if (src["url"].lower().startswith("https://") and not d.get("tls12_default", False)
                and not block_has(h, r"SecurityProtocol.*Tls12[\s\S]*Invoke-WebRequest")):
            raise ActionError("Invoke-WebRequest : The request was aborted: Could not create SSL/TLS secure channel.")
        slow(d, "place_file")
        content = download(d, src["url"])
    elif "push" in src:
        # pushed before the script (push.py): Copy-Item from the push
        # folder; a copy whose hash is wrong drops the pushed file too
        content = push.staged_content(h["_state_path"], src["push"]["staged"])
        sha = hashlib.sha256(content).hexdigest()
        if sha != f["sha256"].lower():
            push.drop_staged(h["_state_path"], src["push"]["staged"])
            raise ActionError("%s: SHA-256 is %s, expected %s" % (dest, sha, f["sha256"].lower()))
        return content
    else:
        # an upload: the bytes are in the block's PowerShell, as base64
        m = re.search(r"FromBase64String\('([A-Za-z0-9+/=]*)'\)", h.get("_block", ""))
        if not m:
            raise ActionError("winsim: no base64 content in the upload's block")
        content = base64.b64decode(m.group(1))
    sha = hashlib.sha256(content).hexdigest()
    if sha != f["sha256"].lower():
        raise ActionError("%s: SHA-256 is %s, expected %s" % (dest, sha, f["sha256"].lower()))
    return content


def download(d, url):
    """Invoke-WebRequest: the lab's downloads are files under the folder the
    state names (`downloads`), by the URL's path; nothing else resolves."""
    m = re.match(r"https?://([^/]+)(/.*)?$", url)
    host = m.group(1) if m else url
    root = d.get("downloads")
    if root and m and m.group(2):
        local = os.path.normpath(os.path.join(root, m.group(2).lstrip("/")))
        if local.startswith(os.path.normpath(root) + os.sep) and os.path.isfile(local):
            with open(local, "rb") as fh:
                return fh.read()
        raise ActionError("Invoke-WebRequest : The remote server returned an error: (404) Not Found.")
    raise ActionError("Invoke-WebRequest : The remote name could not be resolved: '%s'" % host)
