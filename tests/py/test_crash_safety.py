"""Crash safety (issue 14 §2): a process killed with SIGKILL at a random moment never leaves a file under
the final name that is not complete and valid, and the next run removes the stale temporary it left and
says so; a full filesystem (a real one: a size-limited tmpfs) fails cleanly and leaves what was there.

Each writer is killed at 20 seeded random moments spread over its measured run time (some before it
writes, some mid-write, some after its rename), each on the same output, then run to the end once more:
  - `sluice pack` and `sluice synth` are deterministic, so a final file that exists must equal,
    byte for byte, the one an undisturbed run writes;
  - `sluice chat --save` (a session state after every turn): the file, when there, loads;
  - `sluice pull` (tests/py/mock_hub.py): every file under its final name has the hub's bytes,
    and the last run finishes from what the killed ones left (.incomplete files are resumed, not stale).
"""
import glob
import os
import random
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ROOT, run, sluice_bin
from mock_hub import Hub, hub_env, repo_files

DEMO = os.path.join(ROOT, "models/demo.sluice")
KILLS = 20


def kill_at(args, delay, stdin=None, env=None):
    """Starts sluice, SIGKILLs it after delay seconds (if still running); returns its exit status."""
    p = subprocess.Popen([sluice_bin()] + args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if stdin is not None:
        try:
            p.stdin.write(stdin)
            p.stdin.close()
        except BrokenPipeError:
            pass
    try:
        return p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        return p.wait()


def measured(args, stdin=None):
    t = time.monotonic()
    r = subprocess.run([sluice_bin()] + args, input=stdin, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return time.monotonic() - t


def temps(path):
    return glob.glob(glob.escape(path) + ".tmp.*")


def kills_then_finish(args, out, check, seed, stdin=None):
    """KILLS runs of args killed at random moments, check(out) after each; then a whole run, whose stderr
    must name the temporary the last killed run left (if it left one). Returns how many kills left a
    temporary and how many found the final file present."""
    t = measured(args, stdin)  # also the reference output
    os.unlink(out)
    rng = random.Random(seed)
    left = present = 0
    for _ in range(KILLS):
        kill_at(args, rng.uniform(0, 1.3 * t), stdin)
        st = temps(out)
        assert len(st) <= 1, f"stale temporaries pile up: {st}"  # each run removed the one before it
        left += bool(st)
        if os.path.exists(out):
            present += 1
            check(out)
    st = temps(out)
    r = subprocess.run([sluice_bin()] + args, input=stdin, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    err = r.stderr.decode(errors="replace")
    for s in st:
        assert f"removed {s}, left by an interrupted earlier run" in err, err
    assert not temps(out)
    check(out)
    return left, present


def same_as(ref):
    data = open(ref, "rb").read()

    def check(path):
        assert open(path, "rb").read() == data, f"{path} is not the complete file"
    return check


def test_pack_killed_at_random_moments(tmp_path):
    src = os.path.join(ROOT, "tests/data/qwen3_5_moe")
    ref = str(tmp_path / "ref.sluice")
    run(["pack", src, "-o", ref, "--quant", "q4"])
    out = str(tmp_path / "m.sluice")
    kills_then_finish(["pack", src, "-o", out, "--quant", "q4"], out, same_as(ref), seed=11)
    run(["verify", out])


def test_synth_killed_at_random_moments(tmp_path):
    ref = str(tmp_path / "ref.sluice")
    run(["synth", "--shape", "tiny", "-o", ref])
    out = str(tmp_path / "s.sluice")
    kills_then_finish(["synth", "--shape", "tiny", "-o", out], out, same_as(ref), seed=12)


def test_state_save_killed_at_random_moments(tmp_path):
    out = str(tmp_path / "c.state")

    def loads(path):
        r = run(["chat", "-m", DEMO, "--load", path, "-n", "1"], input=b"", check=False)
        assert r.returncode == 0, r.stderr.decode(errors="replace")

    turns = b"And it came to pass\nIn the beginning\nThe LORD said\n"
    kills_then_finish(["chat", "-m", DEMO, "--save", out, "-n", "6", "--temp", "0"], out, loads, seed=13,
                      stdin=turns)


def test_profile_write_leaves_no_partial_file(tmp_path):
    out = str(tmp_path / "p.profile")
    args = ["profile", "-m", DEMO, "--tokens", "10,200,3000,7,42", "-o", out]
    run(args)
    ref = open(out, "rb").read()
    fake = out + ".tmp.999999"  # a temporary of a process that is gone (pid_max is lower)
    open(fake, "wb").write(b"half")
    r = run(args)
    assert f"removed {fake}, left by an interrupted earlier run" in r.stderr.decode(errors="replace")
    assert not temps(out) and open(out, "rb").read() == ref


def test_pull_killed_at_random_moments(tmp_path):
    hub = Hub(seed=3, break_first=False)
    try:
        files = repo_files()
        dest = str(tmp_path / "dl")
        env = hub_env(tmp_path, hub.url)
        args = ["pull", "acme/tiny-moe", "-o", dest]
        rng = random.Random(14)
        t0 = time.monotonic()
        r = subprocess.run([sluice_bin()] + args, capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        t = time.monotonic() - t0
        shutil.rmtree(dest)
        hub.delay = max(0.002, t / 400)  # slow the bodies down so that kills land mid-transfer

        for _ in range(KILLS):
            kill_at(args, rng.uniform(0, 1.3 * t + 0.3), env=env)
            for name in os.listdir(dest) if os.path.isdir(dest) else []:
                p = os.path.join(dest, name)
                if os.path.isfile(p) and not name.endswith(".incomplete") and name in files:
                    assert open(p, "rb").read() == files[name], f"{name} under its final name is not complete"
        r = subprocess.run([sluice_bin()] + args, capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        got = {n for n in os.listdir(dest) if os.path.isfile(os.path.join(dest, n))}
        assert not [n for n in got if n.endswith(".incomplete")]
        for name in got & set(files):
            assert open(os.path.join(dest, name), "rb").read() == files[name]
    finally:
        hub.close()


@pytest.fixture
def small_fs(tmp_path):
    """A real 1 MiB filesystem (tmpfs with a size limit), mounted for the test."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("mounting a tmpfs needs root: " + r.stderr.decode(errors="replace").strip())
    yield str(mnt)
    subprocess.run(["umount", str(mnt)])


def test_full_filesystem_fails_cleanly(small_fs):
    out = os.path.join(small_fs, "m.sluice")
    open(out, "wb").write(b"the user's old file")
    src = os.path.join(ROOT, "tests/data/qwen3_5_moe")
    for args in (["pack", src, "-o", out], ["synth", "--shape", "tiny", "-o", out]):
        r = run(args, check=False)
        err = r.stderr.decode(errors="replace")
        assert r.returncode != 0 and "No space left on device" in err and out in err, err
        assert open(out, "rb").read() == b"the user's old file"
        assert os.listdir(small_fs) == ["m.sluice"], os.listdir(small_fs)
    state = os.path.join(small_fs, "c.state")
    big = os.path.join(small_fs, "filler")
    with open(big, "wb") as f:  # leave less room than one state (about 360 KB)
        f.write(b"\1" * 900_000)
    r = run(["chat", "-m", DEMO, "--save", state, "-n", "2", "--temp", "0"], input=b"Hello\n", check=False)
    err = r.stderr.decode(errors="replace")
    assert "No space left on device" in err and state in err, err
    assert sorted(os.listdir(small_fs)) == ["filler", "m.sluice"], os.listdir(small_fs)
