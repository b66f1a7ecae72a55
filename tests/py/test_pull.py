"""`sluice pull` against the mock Hugging Face Hub of mock_hub.py (127.0.0.1, a CDN host beside it, broken
answers, corrupt files, a gated repository, 503s)."""
import hashlib
import os
import subprocess
import time

from conftest import run, sluice_bin
from mock_hub import DEFAULT, SHARDS, TOKEN, closed_port_url, git_blob_id, hub, hub_env, is_lfs, read, sluice_at  # noqa: F401

def pull(hub, args, tmp_path, token=None, check=True):
    return sluice_at(tmp_path, hub.url + "/", ["pull"] + args, check=check, timeout=60, token=token)


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
    h = hub(seed=5, break_first=True, break_prob=0.2)
    out = tmp_path / "model"
    env = hub_env(tmp_path, h.url)
    ps = [subprocess.Popen([sluice_bin(), "pull", "acme/tiny-moe", "-o", str(out), "--jobs", "2"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for p in ps:
        o, e = p.communicate(timeout=60)
        assert p.returncode == 0, e.decode()
        assert o.decode().splitlines()[-1] == str(out)
    assert_files(out, h.repos["acme/tiny-moe"], DEFAULT)


def test_unreachable_hub_fails_at_once(tmp_path):
    # no server behind the endpoint (a port just closed): one line naming the endpoint, no minute of retries
    url = closed_port_url()
    env = hub_env(tmp_path, url)
    t0 = time.monotonic()
    r = subprocess.run([sluice_bin(), "pull", "acme/tiny-moe", "-o", str(tmp_path / "m")], capture_output=True,
                       timeout=60, env=env)
    took = time.monotonic() - t0
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1, err
    assert f"cannot reach {url}" in err and "check the network" in err, err
    assert took < 5, took  # was 16 s of silent retries
