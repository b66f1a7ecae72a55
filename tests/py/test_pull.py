"""`sluice pull` against a mock Hugging Face Hub on 127.0.0.1 (http.server in a thread).

The mock serves GET /api/models/{repo}/revision/{rev}?blobs=true (sha, siblings with size, blobId and
lfs.sha256) and /{repo}/resolve/{rev}/{path}: small git files directly (ETag: the git blob id), LFS
files with a 302 to a second host name ("localhost" instead of "127.0.0.1", the CDN) carrying
X-Linked-Etag / X-Linked-Size / X-Repo-Commit as the hub does. Bodies honour Range (206 + Content-Range,
416 past the end) and can be broken: the first answer for each file of more than 1 KiB is cut at a
seeded random point (the socket shut down mid-body), later ones with a probability; a file can be served
corrupt once, or always; the API can answer 503 a few times; a repository can require a token.
Every request is recorded (host, path, Range, Authorization, status, body bytes sent)."""
import hashlib
import http.server
import json
import os
import random
import shutil
import socket
import threading
import time
import urllib.parse

import pytest

from conftest import ROOT, run

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


@pytest.fixture
def hub():
    hubs = []

    def make(**kw):
        hubs.append(Hub(**kw))
        return hubs[-1]

    yield make
    for h in hubs:
        h.close()


def pull(hub, args, tmp_path, token=None, check=True):
    env = dict(os.environ, HF_ENDPOINT=hub.url + "/", HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_TOKEN", None)
    env.pop("HF_HUB_CACHE", None)
    if token:
        env["HF_TOKEN"] = token
    import subprocess
    from conftest import sluice_bin
    r = subprocess.run([sluice_bin(), "pull"] + args, capture_output=True, timeout=60, env=env)
    if check:
        assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r


def tree(d):
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, f), d) for f in files]
    return sorted(out)


def assert_files(d, files, names):
    assert tree(d) == sorted(names)
    for n in names:
        assert hashlib.sha256(read(os.path.join(d, n))).digest() == hashlib.sha256(files[n]).digest(), n


def test_pull_broken_connections_corrupt_file_cache_layout(hub, tmp_path):
    h = hub(seed=7, break_first=True, break_prob=0.3, corrupt_once={SHARDS[1]})
    files = h.repos["acme/tiny-moe"]
    r = pull(h, ["acme/tiny-moe", "--jobs", "3"], tmp_path)
    commit = h.commits["acme/tiny-moe"]
    repo_dir = tmp_path / "hf" / "hub" / "models--acme--tiny-moe"
    snap = repo_dir / "snapshots" / commit
    assert r.stdout.decode().splitlines()[-1] == str(snap)
    assert_files(snap, files, DEFAULT)
    # huggingface_hub's layout: relative links into blobs/ named by sha256 (LFS) or git blob id; refs/main
    for n in DEFAULT:
        link = os.readlink(snap / n)
        want = hashlib.sha256(files[n]).hexdigest() if is_lfs(n) else git_blob_id(files[n])
        assert link == "../../blobs/" + want, (n, link)
    assert read(repo_dir / "refs" / "main").decode() == commit
    assert not [p for p in tree(tmp_path / "hf") if p.endswith(".incomplete")]
    # every broken answer was continued with a Range request from where it broke, answered 206
    broken = [e for e in h.log if "file" in e and e["status"] == 200 and e["bytes"] < len(files[e["file"]])]
    ranged = [e for e in h.log if e.get("range") and e.get("status") == 206]
    assert len(broken) >= 5 and len(ranged) >= len(broken) - 1, (len(broken), len(ranged))
    # the corrupt shard failed its sha256 and was fetched again from byte 0
    assert sum(1 for e in h.log if e.get("corrupt")) == 1
    assert len([e for e in h.file_requests(SHARDS[1]) if not e["range"]]) >= 2
    # files outside the default set were never asked for
    asked = {e.get("file") for e in h.log}
    assert not asked & {"pytorch_model.bin", "README.md", "extra.safetensors", "original/consolidated.safetensors"}
    err = r.stderr.decode()
    assert "fetched again" in err and "retries" in err and "8 files, 8 downloaded" in err, err
    # a second pull downloads nothing and asks only for the listing
    h.reset()
    r = pull(h, ["acme/tiny-moe"], tmp_path)
    assert r.stdout.decode().splitlines()[-1] == str(snap)
    assert h.body_bytes() == 0 and all(e["path"].startswith("/api/") for e in h.log), h.log
    assert "8 already present" in r.stderr.decode()


def test_pull_to_dir_then_pack_and_info(hub, tmp_path):
    h = hub(seed=3, break_first=True)
    files = h.repos["acme/tiny-moe"]
    out = tmp_path / "model"
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert r.stdout.decode().splitlines()[-1] == str(out)
    assert_files(out, files, DEFAULT)
    m = str(tmp_path / "m.sluice")
    run(["pack", str(out), "-o", m])
    info = run(["info", m]).stdout.decode()
    assert "qwen3_moe" in info
    # again: every file is present (size and hash checked): nothing downloaded
    h.reset()
    pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert h.body_bytes() == 0
    # a final file of the right size but wrong bytes is found out and downloaded again, alone
    p = out / SHARDS[0]
    b = bytearray(read(p))
    b[100] ^= 1
    p.write_bytes(bytes(b))
    h.reset()
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert_files(out, files, DEFAULT)
    assert {e["file"] for e in h.log if "file" in e} == {SHARDS[0]}
    assert "1 downloaded" in r.stderr.decode() and "7 already present" in r.stderr.decode()


def test_resume_partial_file_across_runs(hub, tmp_path):
    h = hub(break_first=False)
    files = h.repos["acme/tiny-moe"]
    out = tmp_path / "model"
    out.mkdir()
    half = len(files[SHARDS[0]]) // 2
    (out / (SHARDS[0] + ".incomplete")).write_bytes(files[SHARDS[0]][:half])
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert_files(out, files, DEFAULT)
    reqs = h.file_requests(SHARDS[0])
    assert [e["range"] for e in reqs] == [f"bytes={half}-"] and reqs[0]["status"] == 206
    assert reqs[0]["bytes"] == len(files[SHARDS[0]]) - half
    assert "1 resumed" in r.stderr.decode()
    # a partial file that is not a prefix of the file: caught by the sha256, fetched again from 0
    (out / SHARDS[1]).unlink()
    junk = bytes(len(files[SHARDS[1]]) // 3)
    (out / (SHARDS[1] + ".incomplete")).write_bytes(junk)
    h.reset()
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert_files(out, files, DEFAULT)
    assert [e["range"] for e in h.file_requests(SHARDS[1])] == [f"bytes={len(junk)}-", None]
    assert "fetched again" in r.stderr.decode()


def test_server_without_range_support(hub, tmp_path):
    h = hub(seed=11, break_first=True, ignore_range=True)
    files = h.repos["acme/tiny-moe"]
    out = tmp_path / "model"
    pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert_files(out, files, DEFAULT)
    # the Range requests were answered 200 with the whole file: each was read from the start
    assert any(e["range"] and e["status"] == 200 for e in h.log)


def test_include(hub, tmp_path):
    h = hub(break_first=False)
    files = h.repos["acme/tiny-moe"]
    out = tmp_path / "a"
    pull(h, ["acme/tiny-moe", "--include", "config.json", "--include", "*.bin", "-o", str(out)], tmp_path)
    assert_files(out, files, ["config.json", "pytorch_model.bin"])
    out = tmp_path / "b"
    pull(h, ["acme/tiny-moe", "--include", "original/*", "-o", str(out)], tmp_path)
    assert_files(out, files, ["original/consolidated.safetensors"])
    r = pull(h, ["acme/tiny-moe", "--include", "*.gguf", "-o", str(out)], tmp_path, check=False)
    assert r.returncode == 1 and b"no file" in r.stderr


def test_token_sent_to_the_hub_only(hub, tmp_path):
    h = hub(break_first=False)
    r = pull(h, ["acme/gated", "-o", str(tmp_path / "g")], tmp_path, check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and "HF_TOKEN" in err and "gated" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "g").exists() or not tree(tmp_path / "g")
    r = pull(h, ["acme/gated", "-o", str(tmp_path / "g")], tmp_path, token="hf_wrong", check=False)
    assert r.returncode == 1 and "cannot read it" in r.stderr.decode() and b"hf_wrong" not in r.stderr
    h.reset()
    r = pull(h, ["acme/gated", "-o", str(tmp_path / "g")], tmp_path, token=TOKEN)
    assert_files(tmp_path / "g", h.repos["acme/gated"], DEFAULT)
    hub_reqs = [e for e in h.log if e["host"] == "127.0.0.1"]
    cdn_reqs = [e for e in h.log if e["host"] == "localhost"]
    assert len(cdn_reqs) == 3 and len(hub_reqs) == 1 + len(DEFAULT)
    assert all(e["auth"] == f"Bearer {TOKEN}" for e in hub_reqs)
    assert all(e["auth"] is None for e in cdn_reqs)
    assert TOKEN.encode() not in r.stdout + r.stderr


def test_not_found_and_bad_names(hub, tmp_path):
    h = hub()
    r = pull(h, ["acme/missing"], tmp_path, check=False)
    assert r.returncode == 1 and b"acme/missing: repository not found" in r.stderr, r.stderr
    r = pull(h, ["acme/tiny-moe", "--revision", "nope"], tmp_path, check=False)
    assert r.returncode == 1 and b"revision 'nope' not found" in r.stderr, r.stderr
    r = pull(h, ["acme/tiny-moe/x"], tmp_path, check=False)
    assert r.returncode == 1 and b"not a repository name" in r.stderr
    r = pull(h, ["acme/tiny-moe", "--jobs", "0"], tmp_path, check=False)
    assert r.returncode == 1 and b"--jobs" in r.stderr
    r = pull(h, ["acme/tiny-moe", "--frob"], tmp_path, check=False)
    assert r.returncode == 2 and b"unknown option '--frob'" in r.stderr
    # by commit: the same files
    out = tmp_path / "c"
    pull(h, ["acme/tiny-moe", "--revision", h.commits["acme/tiny-moe"], "-o", str(out)], tmp_path)
    assert_files(out, h.repos["acme/tiny-moe"], DEFAULT)


def test_always_corrupt_file_fails_naming_it(hub, tmp_path):
    h = hub(break_first=False, corrupt_always={SHARDS[2]})
    out = tmp_path / "model"
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path, check=False)
    err = r.stderr.decode()
    # one error line; a pull slower than a second also prints "downloading: N% ..." lines (not a terminal)
    lines = [ln for ln in err.splitlines() if not ln.startswith("downloading: ")]
    assert r.returncode == 1 and SHARDS[2] in err and "sha256 mismatch" in err and len(lines) == 1, err
    assert not (out / SHARDS[2]).exists() and not (out / (SHARDS[2] + ".incomplete")).exists()
    assert len(h.file_requests(SHARDS[2])) == 3


def test_transient_server_errors_are_retried(hub, tmp_path):
    h = hub(break_first=False, api_503=2)
    out = tmp_path / "model"
    r = pull(h, ["acme/tiny-moe", "-o", str(out)], tmp_path)
    assert_files(out, h.repos["acme/tiny-moe"], DEFAULT)
    assert "2 retries" in r.stderr.decode()


def test_two_pulls_of_one_directory_at_once(hub, tmp_path):
    import subprocess
    from conftest import sluice_bin
    h = hub(seed=5, break_first=True, break_prob=0.2)
    out = tmp_path / "model"
    env = dict(os.environ, HF_ENDPOINT=h.url, HF_HOME=str(tmp_path / "hf"))
    ps = [subprocess.Popen([sluice_bin(), "pull", "acme/tiny-moe", "-o", str(out), "--jobs", "2"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for p in ps:
        o, e = p.communicate(timeout=60)
        assert p.returncode == 0, e.decode()
        assert o.decode().splitlines()[-1] == str(out)
    assert_files(out, h.repos["acme/tiny-moe"], DEFAULT)


def test_unreachable_hub_fails_at_once(tmp_path):
    # no server behind the endpoint (a port just closed): one line naming the endpoint, no minute of retries
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    import subprocess
    from conftest import sluice_bin
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"))
    t0 = time.monotonic()
    r = subprocess.run([sluice_bin(), "pull", "acme/tiny-moe", "-o", str(tmp_path / "m")], capture_output=True,
                       timeout=60, env=env)
    took = time.monotonic() - t0
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1, err
    assert f"cannot reach http://127.0.0.1:{port}" in err and "check the network" in err, err
    assert took < 5, took  # was 16 s of silent retries
