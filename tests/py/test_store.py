"""The model store (src/cli/store.c): `sluice run ORG/NAME[:QUANT]` downloads from a mock Hugging Face Hub
on 127.0.0.1 (mock_hub.py: the qwen3_moe fixture with a tokenizer, and a repository of GGUF files written here by
test_gguf.py's writer), packs into $SLUICE_HOME and runs; again without the hub; then
`ls`, `show`, `rm`. Also: a download killed mid-transfer resumes (Range) on the next run, a file that
fails its sha256 is refused and nothing enters the store, a hub that cannot be reached is one line."""
import hashlib
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, sluice_bin
from mock_hub import SHARDS, add_repo, closed_port_url, hub, hub_env, repo_files, sluice_at  # noqa: F401

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from test_gguf import gguf_tokenizer_writer, write_gguf  # noqa: E402

TOK = os.path.join(ROOT, "tests/data/tiny_tokenizer")


def store_files(tmp_path):
    root = tmp_path / "store"
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)


def test_run_org_name_pulls_packs_runs_then_offline_ls_show_rm(hub, tmp_path):
    h = hub(seed=3, break_first=True)  # every file's first answer cut mid-body: resumed with Range
    args = ["--tokens", "1,2,3", "-n", "6"]
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe"] + args)
    err = r.stderr.decode()
    assert "acme/tiny-moe is not in the store" in err and "packed" in err and "routed experts q4, the rest q8" in err, err
    ids = r.stdout.decode().split()
    assert len(ids) == 6, r.stdout
    assert store_files(tmp_path) == ["models/acme/tiny-moe/q4.json", "models/acme/tiny-moe/q4.sluice"]
    assert any(e.get("range") for e in h.log)  # the cut answers were resumed
    # the same text as the container opened by path, and a second run needs no hub at all
    path = str(tmp_path / "store/models/acme/tiny-moe/q4.sluice")
    assert sluice_at(tmp_path, h.url, ["run", "-m", path] + args).stdout == r.stdout
    h.close()
    off = closed_port_url()
    r2 = sluice_at(tmp_path, off, ["run", "acme/tiny-moe"] + args)
    assert r2.stdout == r.stdout and r2.stderr == b"", r2.stderr
    assert sluice_at(tmp_path, off, ["run", "-m", "acme/tiny-moe:q4", "-p", "hello", "-n", "3", "--temp", "0"]).stdout
    # ls, show
    ls = sluice_at(tmp_path, off, ["ls"]).stdout.decode().splitlines()
    assert ls[0].split() == ["NAME", "QUANT", "SIZE", "LAST", "USED"] and len(ls) == 2, ls
    assert ls[1].split()[:2] == ["acme/tiny-moe", "q4"] and "just now" in ls[1], ls
    show = sluice_at(tmp_path, off, ["show", "acme/tiny-moe"]).stdout.decode()
    commit = hashlib.sha1(b"acme/tiny-moe").hexdigest()
    for want in ["name        acme/tiny-moe:q4", f"/acme/tiny-moe at commit {commit[:12]} (safetensors)",
                 "packed      routed experts q4, the rest q8", "arch        qwen3_moe", f"file        {path}"]:
        assert want in show, (want, show)
    # a quantization not in the store, with the hub gone: one line saying so
    r = sluice_at(tmp_path, off, ["run", "acme/tiny-moe:q8"] + args, check=False)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1 and "cannot reach" in lines[-1] and len(lines) == 2, lines
    # rm
    r = sluice_at(tmp_path, off, ["rm", "acme/tiny-moe"])
    assert r.stdout.decode().startswith("removed acme/tiny-moe:q4 (")
    assert store_files(tmp_path) == [] and not (tmp_path / "store/models/acme").exists()
    r = sluice_at(tmp_path, off, ["rm", "acme/tiny-moe"], check=False)
    assert r.returncode == 1 and b"acme/tiny-moe is not in the store" in r.stderr
    r = sluice_at(tmp_path, off, ["show", "not/a/name"], check=False)
    assert r.returncode == 1 and b"is not a model name" in r.stderr
    r = sluice_at(tmp_path, off, ["ls"])
    assert r.stdout == b"" and b"no models in" in r.stderr


def test_killed_download_resumes_and_bad_checksum_is_refused(hub, tmp_path):
    h = hub(break_first=False, corrupt_always={SHARDS[1]})
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe", "--tokens", "1", "-n", "1"], check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and SHARDS[1] in err and "sha256 mismatch" in err, err
    assert not [f for f in store_files(tmp_path) if f.startswith("models/")], store_files(tmp_path)
    assert not [f for f in store_files(tmp_path) if f.endswith(SHARDS[1]) or f.endswith(SHARDS[1] + ".incomplete")]
    # the next run downloads the file that failed (and any the failure stopped: which ones were still in flight
    # depends on the machine's speed), not those already verified (under their final names)
    verified = {f.rsplit("/", 1)[1] for f in store_files(tmp_path) if not f.endswith(".incomplete")}
    h.close()
    h = hub(break_first=False)
    sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe", "--tokens", "1", "-n", "1"])
    got = {e["file"] for e in h.log if "file" in e}
    assert SHARDS[1] in got and not got & verified, (got, verified)
    # a run killed mid-download: the next one resumes the partial file with a Range request
    tmp_path = tmp_path / "b"
    h.reset()
    h.delay = 0.05  # 4 KiB per 50 ms: a 400 KB shard takes 5 s
    p = subprocess.Popen([sluice_bin(), "run", "acme/tiny-moe", "--tokens", "1", "-n", "1"],
                         env=hub_env(tmp_path, h.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(200):
        time.sleep(0.05)
        if any("file" in e for e in h.log):
            break
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    part = [f for f in store_files(tmp_path) if f.endswith(".incomplete")]
    assert part, store_files(tmp_path)
    h.delay = 0
    h.reset()
    sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe", "--tokens", "1", "-n", "1"])
    assert any(e.get("range") and e["status"] == 206 for e in h.log), h.log
    assert store_files(tmp_path) == ["models/acme/tiny-moe/q4.json", "models/acme/tiny-moe/q4.sluice"]


def test_gguf_repository_picks_one_quantization(hub, tmp_path):
    h = hub(break_first=False)
    files = {}
    for name, qt in [("tiny-moe-Q8_0.gguf", QT.Q8_0), ("tiny-moe-Q4_0.gguf", QT.Q4_0)]:
        p = tmp_path / name
        write_gguf("qwen3_moe", str(p), qtype=qt, tokenizer=gguf_tokenizer_writer(TOK, "qwen2"))
        files[name] = p.read_bytes()
    files["mmproj-tiny-moe-f16.gguf"] = b"not a model"
    files["README.md"] = b"# tiny GGUF\n"
    add_repo(h, "acme/tiny-moe-GGUF", files)
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe-GGUF", "-p", "hello", "-n", "3", "--temp", "0"])
    assert {e["file"] for e in h.log if "file" in e} == {"tiny-moe-Q4_0.gguf"}  # Q4_0: no Q4_K_M here
    assert store_files(tmp_path) == ["models/acme/tiny-moe-GGUF/Q4_0.json", "models/acme/tiny-moe-GGUF/Q4_0.sluice"]
    h.reset()
    sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe-GGUF:q8_0", "--tokens", "1,2", "-n", "2"])
    assert {e["file"] for e in h.log if "file" in e} == {"tiny-moe-Q8_0.gguf"}
    show = sluice_at(tmp_path, h.url, ["show", "acme/tiny-moe-GGUF:Q8_0"]).stdout.decode()
    assert "(gguf: tiny-moe-Q8_0.gguf)" in show and "q8" in show, show
    ls = sluice_at(tmp_path, h.url, ["ls"]).stdout.decode()
    assert "Q4_0" in ls and "Q8_0" in ls
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe-GGUF:Q5_K", "--tokens", "1"], check=False)
    assert r.returncode == 1 and b"has no GGUF file of quantization Q5_K; it has: Q4_0, Q8_0" in r.stderr, r.stderr
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe-GGUF:q4", "--tokens", "1"], check=False)
    assert r.returncode == 1 and b"holds GGUF files" in r.stderr, r.stderr
    r = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe:Q4_K_M", "--tokens", "1"], check=False)
    assert r.returncode == 1 and b"holds a safetensors checkpoint" in r.stderr, r.stderr
    r = sluice_at(tmp_path, h.url, ["rm", "acme/tiny-moe-GGUF:Q8_0"])
    assert store_files(tmp_path) == ["models/acme/tiny-moe-GGUF/Q4_0.json", "models/acme/tiny-moe-GGUF/Q4_0.sluice"]


def test_store_errors_are_one_line(hub, tmp_path):
    h = hub(break_first=False)
    r = sluice_at(tmp_path, h.url, ["run", "acme/missing", "--tokens", "1"], check=False)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1 and "acme/missing: repository not found" in lines[-1] and len(lines) == 2, lines
    t0 = time.monotonic()
    r = sluice_at(tmp_path, closed_port_url(), ["chat", "acme/tiny-moe"], check=False)
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1 and "cannot reach" in lines[-1] and len(lines) == 2, lines
    assert time.monotonic() - t0 < 5
    # a name that is a file stays a file; a .sluice name that is not there is not looked up on the hub
    h.reset()
    r = sluice_at(tmp_path, h.url, ["run", "-m", "acme/tiny.sluice", "--tokens", "1"], check=False)
    assert r.returncode == 1 and b"not in the store" not in r.stderr and b"acme/tiny.sluice" in r.stderr, r.stderr
    assert h.log == []


def test_serve_a_model_of_the_store_under_its_name(hub, tmp_path):
    import json
    import urllib.request
    h = hub(break_first=False)
    p = subprocess.Popen([sluice_bin(), "serve", "acme/tiny-moe:q8", "--port", "0"], env=hub_env(tmp_path, h.url),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = None
        for line in p.stderr:
            line = line.decode()
            if line.startswith("listening on "):
                url = line.split()[-1]
                break
        assert url, "no 'listening on' line"
        models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=30))
        assert [m["id"] for m in models["data"]] == ["acme/tiny-moe:q8"], models
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    assert store_files(tmp_path) == ["models/acme/tiny-moe/q8.json", "models/acme/tiny-moe/q8.sluice"]


def readme_commands(heading):
    """The command lines of the first sh block after README.md's heading, comments dropped."""
    import shlex
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("\n## " + heading + "\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_readme_commands_as_written(hub, tmp_path):
    # README.md's first two blocks, run as written against the mock hub (the tiny fixture under the name
    # the README uses): `make` is the suite's own build; build/sluice and sluice are the binary under test
    h = hub(break_first=False)
    add_repo(h, "Qwen/Qwen3-30B-A3B", repo_files())
    env = hub_env(tmp_path, h.url)
    env["HOME"] = str(tmp_path)
    ran = 0
    for heading, stdin in [("Get a model, run it", b"Hello\n"), ("Your own model in three commands", None)]:
        for argv in readme_commands(heading):
            if argv == ["make"]:
                continue
            assert argv[0] in ("build/sluice", "sluice"), argv
            argv = [sluice_bin()] + [a.replace("~", str(tmp_path)) for a in argv[1:]]
            r = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, env=env, cwd=str(tmp_path))
            assert r.returncode == 0, (argv, r.stderr.decode(errors="replace"))
            ran += 1
    assert ran == 4
    assert (tmp_path / "store/models/Qwen/Qwen3-30B-A3B/q4.sluice").exists() and (tmp_path / "q30.sluice").exists()


def test_short_names_near_names_and_completion(hub, tmp_path):
    """NAME alone stands for the one ORG/NAME of the store (Ollama's short names); a word that names no file and no
    model says what a model name is and which models of the store come close; sluice completion bash completes
    commands, option values and the store's models."""
    h = hub(break_first=False)
    args = ["--tokens", "1,2,3", "-n", "4"]
    want = sluice_at(tmp_path, h.url, ["run", "acme/tiny-moe"] + args).stdout
    h.close()
    off = closed_port_url()
    r = sluice_at(tmp_path, off, ["run", "TINY-moe"] + args)
    assert r.stdout == want and r.stderr == b"", r.stderr
    assert "name        acme/tiny-moe:q4" in sluice_at(tmp_path, off, ["show", "tiny-moe"]).stdout.decode()
    r = sluice_at(tmp_path, off, ["run", "tiny"] + args, check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1, err
    assert "tiny: no such file, and no model of the store is called so" in err and "ORG/NAME[:QUANT]" in err, err
    assert err.rstrip().endswith("in the store: acme/tiny-moe:q4"), err
    r = sluice_at(tmp_path, off, ["rm", "acme/tiny-moe:q8"], check=False)
    assert r.returncode == 1 and b"acme/tiny-moe:q8 is not in the store" in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith(b"there: acme/tiny-moe:q4"), r.stderr
    # a NAME of two organisations: ambiguous, said so
    src, dst = tmp_path / "store/models/acme", tmp_path / "store/models/other"
    import shutil
    shutil.copytree(src, dst)
    r = sluice_at(tmp_path, off, ["run", "tiny-moe"] + args, check=False)
    assert r.returncode == 1 and b"names models of 2 organisations" in r.stderr, r.stderr
    # the completion script, as bash-completion would call it
    script = sluice_at(tmp_path, off, ["completion", "bash"]).stdout.decode()
    env = hub_env(tmp_path, off)
    env["PATH"] = os.path.dirname(sluice_bin()) + ":" + env["PATH"]
    probe = script + """
t() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=(); _sluice; echo "${COMPREPLY[*]}"; }
t sluice ch; t sluice run --kv ""; t sluice run ac; t sluice chat -m o; t sluice pack d --quant q4
"""
    out = subprocess.run(["bash", "-c", probe], capture_output=True, env=env, cwd=str(tmp_path), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == ["chat", "f32 f16 bf16 q8 q4 q4r", "acme/tiny-moe", "other/tiny-moe", "q4"], out
    r = sluice_at(tmp_path, off, ["show", str(tmp_path / "store/models/acme/tiny-moe/q4.sluice")], check=False)
    assert r.returncode == 1 and b"is a path here, not a model of the store ('sluice info FILE'" in r.stderr, r.stderr
    r = sluice_at(tmp_path, off, ["completion", "fish"], check=False)
    assert r.returncode == 1 and b"bash|zsh" in r.stderr


def test_no_room_for_the_download_fails_before_it(hub, tmp_path):
    """A store (or pull -o folder) on a file system without room for the download: one line at once naming
    what is needed and what is free, before any shard is downloaded (a real 256 KiB tmpfs; root only)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("mounting a tmpfs needs root: " + r.stderr.decode(errors="replace").strip())
    try:
        h = hub(break_first=False)
        env = hub_env(tmp_path, h.url)
        env["SLUICE_HOME"] = str(mnt / "store")
        r = subprocess.run([sluice_bin(), "run", "acme/tiny-moe", "--tokens", "1"], capture_output=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=60)
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1 and len(lines) == 2, lines
        assert "acme/tiny-moe: the download needs" in lines[1] and "are free" in lines[1], lines
        assert "set SLUICE_HOME to a folder on a larger disk" in lines[1], lines
        fetched = {e["file"] for e in h.log if "file" in e}
        assert fetched <= {"model.safetensors.index.json"}, fetched  # the index says which shards: then refused
        r = subprocess.run([sluice_bin(), "pull", "acme/tiny-moe", "-o", str(mnt / "dl")], capture_output=True, env=env,
                           timeout=60)
        err = r.stderr.decode()
        assert r.returncode == 1 and "the download needs" in err and "-o DIR, or HF_HOME" in err, err
    finally:
        subprocess.run(["umount", str(mnt)])
