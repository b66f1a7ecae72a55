"""The mock Hugging Face Hub of the tests that download (test_pull.py, test_store.py, test_crash_safety.py):
http.server in a thread on 127.0.0.1, and the environment and command runner that point sluice at it.

The mock serves GET /api/models/{repo}/revision/{rev}?blobs=true (sha, siblings with size, blobId and
lfs.sha256) and /{repo}/resolve/{rev}/{path}: small git files directly (ETag: the git blob id), LFS
files with a 302 to a second host name ("localhost" instead of "127.0.0.1", the CDN) carrying
X-Linked-Etag / X-Linked-Size / X-Repo-Commit as the hub does. Bodies honour Range (206 + Content-Range,
416 past the end) and can be broken: the first answer for each file of more than 1 KiB is cut at a
seeded random point (the socket shut down mid-body), later ones with a probability; a file can be served
corrupt once, or always; the API can answer 503 a few times; a repository can require a token.
Every request is recorded (host, path, Range, Authorization, status, body bytes sent). It serves
acme/tiny-moe (the qwen3_moe fixture with a tokenizer) and acme/gated (the same, behind TOKEN); add_repo
adds others."""
import hashlib
import http.server
import json
import os
import random
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import ROOT, sluice_bin

FIX = os.path.join(ROOT, "tests/data/qwen3_moe")
TOK = os.path.join(ROOT, "tests/data/tiny_tokenizer")
SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
DEFAULT = sorted(["config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                  "tokenizer_config.json"] + SHARDS)
TOKEN = "hf_mock_secret_0123456789"


def read(p):
    with open(p, "rb") as f:
        return f.read()


def repo_files():
    files = {n: read(os.path.join(FIX, n)) for n in ["config.json", "generation_config.json",
                                                     "model.safetensors.index.json"] + SHARDS}
    files.update({n: read(os.path.join(TOK, n)) for n in ["tokenizer.json", "tokenizer_config.json"]})
    rnd = random.Random(5)
    files["pytorch_model.bin"] = bytes(rnd.getrandbits(8) for _ in range(40000))  # skipped by default
    files["README.md"] = b"# tiny-moe\n"
    files["extra.safetensors"] = files[SHARDS[2]][:4000]  # not named by the index: skipped by default
    files["original/consolidated.safetensors"] = files[SHARDS[2]]
    return files


def is_lfs(name):
    return name.endswith((".safetensors", ".bin"))


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub:
    def __init__(self, seed=1, break_first=True, break_prob=0.0, corrupt_once=(), corrupt_always=(), ignore_range=False,
                 api_503=0):
        self.repos = {"acme/tiny-moe": repo_files(), "acme/gated": repo_files()}
        self.gated = {"acme/gated"}
        self.commits = {r: hashlib.sha1(r.encode()).hexdigest() for r in self.repos}
        self.rng = random.Random(seed)
        self.break_first, self.break_prob = break_first, break_prob
        self.corrupt_once, self.corrupt_always = set(corrupt_once), set(corrupt_always)
        self.ignore_range, self.api_503 = ignore_range, api_503
        self.delay = 0.0  # seconds slept per 4 KiB of a body (test_crash_safety.py kills mid-transfer)
        self.lock = threading.Lock()
        self.log = []
        self.seen = set()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                hub.handle(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def reset(self):
        with self.lock:
            self.log = []

    def body_bytes(self):
        return sum(e["bytes"] for e in self.log)

    def file_requests(self, name):
        return [e for e in self.log if e.get("file") == name and e["status"] in (200, 206)]

    # ---- request handling
    def reply(self, h, status, body=b"", headers=(), entry=None, cut=None):
        data = body if cut is None else body[:cut]
        # logged before the client can see the answer, so that a test reading the log after the client
        # exits finds every request of it
        entry.update(status=status, bytes=len(data) if status in (200, 206) and "file" in entry else 0)
        with self.lock:
            self.log.append(entry)
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            if self.delay:
                for i in range(0, len(data), 4096):
                    h.wfile.write(data[i:i + 4096])
                    h.wfile.flush()
                    time.sleep(self.delay)
            else:
                h.wfile.write(data)
            h.wfile.flush()
        except OSError:
            pass
        if cut is not None:
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle(self, h):
        u = urllib.parse.urlsplit(h.path)
        parts = u.path.split("/")
        entry = {"host": h.headers.get("Host", "").split(":")[0], "path": u.path, "range": h.headers.get("Range"),
                 "auth": h.headers.get("Authorization")}
        if u.path.startswith("/api/models/"):
            return self.api(h, parts[3:], entry)
        if len(parts) >= 6 and parts[3] == "resolve":
            return self.resolve(h, "/".join(parts[1:3]), urllib.parse.unquote(parts[4]),
                                urllib.parse.unquote("/".join(parts[5:])), entry)
        if len(parts) == 5 and parts[1] == "cdn":
            repo = urllib.parse.unquote(parts[2]) + "/" + urllib.parse.unquote(parts[3])
            name = urllib.parse.parse_qs(u.query).get("file", [""])[0]
            files = self.repos.get(repo, {})
            if name in files and hashlib.sha256(files[name]).hexdigest() == parts[4]:
                return self.send_file(h, name, files[name], entry, [])
        self.reply(h, 404, b"not found", [("X-Error-Code", "EntryNotFound")], entry)

    def denied(self, h, repo, entry):
        if repo in self.gated and h.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.reply(h, 401, b'{"error":"gated"}', [("X-Error-Code", "GatedRepo"),
                       ("X-Error-Message", f"Access to model {repo} is restricted.")], entry)
            return True
        return False

    def commit_of(self, repo, rev):
        c = self.commits[repo]
        return c if rev in ("main", c) else None

    def api(self, h, rest, entry):
        # rest: [org, name, "revision", rev]
        repo = "/".join(rest[:2])
        with self.lock:
            busy = self.api_503 > 0
            self.api_503 -= busy
        if busy:
            return self.reply(h, 503, b"busy", [], entry)
        if repo not in self.repos:
            return self.reply(h, 401, b'{"error":"Repository Not Found"}', [("X-Error-Code", "RepoNotFound")], entry)
        if self.denied(h, repo, entry):
            return
        rev = urllib.parse.unquote(rest[3]) if len(rest) > 3 and rest[2] == "revision" else "main"
        commit = self.commit_of(repo, rev)
        if not commit:
            return self.reply(h, 404, b'{"error":"Invalid rev id"}', [("X-Error-Code", "RevisionNotFound")], entry)
        sib = []
        for name, data in sorted(self.repos[repo].items()):
            s = {"rfilename": name, "size": len(data)}
            if is_lfs(name):
                ptr = f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n" \
                      f"size {len(data)}\n".encode()
                s["blobId"] = git_blob_id(ptr)
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(ptr)}
            else:
                s["blobId"] = git_blob_id(data)
            sib.append(s)
        body = json.dumps({"id": repo, "sha": commit, "siblings": sib}).encode()
        self.reply(h, 200, body, [("Content-Type", "application/json")], entry)

    def resolve(self, h, repo, rev, name, entry):
        if repo not in self.repos:
            return self.reply(h, 401, b"", [("X-Error-Code", "RepoNotFound")], entry)
        if self.denied(h, repo, entry):
            return
        commit = self.commit_of(repo, rev)
        data = self.repos[repo].get(name)
        if not commit or data is None:
            return self.reply(h, 404, b"", [("X-Error-Code", "EntryNotFound" if commit else "RevisionNotFound")], entry)
        if is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            loc = f"http://localhost:{self.port}/cdn/{repo}/{sha}?file={urllib.parse.quote(name)}"
            return self.reply(h, 302, b"", [("Location", loc), ("X-Repo-Commit", commit), ("ETag", f'"{git_blob_id(data)}"'),
                                            ("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data)))], entry)
        self.send_file(h, name, data, entry, [("X-Repo-Commit", commit), ("ETag", f'"{git_blob_id(data)}"')])

    def send_file(self, h, name, data, entry, headers):
        entry["file"] = name
        start = 0
        rng = h.headers.get("Range")
        if rng and not self.ignore_range:
            assert rng.startswith("bytes=") and rng.endswith("-"), rng
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(h, 416, b"", [("Content-Range", f"bytes */{len(data)}")], entry)
        body = bytearray(data[start:])
        with self.lock:
            cut = None
            if len(body) > 1024 and ((self.break_first and name not in self.seen) or self.rng.random() < self.break_prob):
                cut = self.rng.randint(1, len(body) - 1)
            self.seen.add(name)
            # one byte in the middle flipped, in an answer that gets as far as the middle
            mid = len(data) // 2
            reaches = start <= mid and (cut is None or start + cut > mid)
            if reaches and (name in self.corrupt_always or (name in self.corrupt_once and (name, "bad") not in self.seen)):
                body[mid - start] ^= 0x5A
                self.seen.add((name, "bad"))
                entry["corrupt"] = True
        if start:
            headers = headers + [("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")]
        self.reply(h, 206 if start else 200, bytes(body), headers + [("Accept-Ranges", "bytes")], entry, cut)


def add_repo(hub, repo, files):
    """Serves files ({path: bytes}) as repository repo, at a commit named by its name."""
    hub.repos[repo] = files
    hub.commits[repo] = hashlib.sha1(repo.encode()).hexdigest()


@pytest.fixture
def hub():
    """make(**Hub's arguments) -> a Hub, closed at the test's end."""
    hubs = []

    def make(**kw):
        hubs.append(Hub(**kw))
        return hubs[-1]

    yield make
    for h in hubs:
        h.close()


def hub_env(tmp_path, url, token=None):
    """The environment of a sluice talking to the hub at url: its own Hugging Face cache (HF_HOME) and model
    store (SLUICE_HOME) under tmp_path, HF_TOKEN only when given, nothing inherited that would move either."""
    env = dict(os.environ, HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"), SLUICE_HOME=str(tmp_path / "store"))
    for k in ("HF_TOKEN", "HF_HUB_CACHE", "SLUICE_MODEL", "XDG_CACHE_HOME"):
        env.pop(k, None)
    if token:
        env["HF_TOKEN"] = token
    return env


def sluice_at(tmp_path, url, args, check=True, timeout=120, token=None):
    """Runs sluice ARGS in hub_env (stdin empty); with check, asserts exit status 0."""
    r = subprocess.run([sluice_bin()] + args, capture_output=True, timeout=timeout, env=hub_env(tmp_path, url, token),
                       stdin=subprocess.DEVNULL)
    if check:
        assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))
    return r


def closed_port_url():
    """An endpoint nothing listens on (a port just closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"
