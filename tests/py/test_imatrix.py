"""sluice pack --imatrix with importance matrices written by gguf-py in llama-imatrix's layouts (llama.cpp
tools/imatrix/imatrix.cpp save_imatrix: NAME.in_sum2 [n_mat][cols] and NAME.counts [n_mat][1], ggml dropping trailing
dimensions of 1; save_imatrix_legacy's .dat), for the qwen3_next fixture: the two formats give the same pack, and every
matrix the file covers is quantized with a lower importance-weighted error than the plain pack's, measured here in
numpy from the values gguf-py wrote (tools/demo_gguf.py decodes the q4 layout), the others byte for byte as plain."""
import json
import os
import struct
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from conftest import ROOT, run  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
from demo_gguf import decode, experts, manifest  # noqa: E402

FIX = os.path.join(ROOT, "tests/data/qwen3_next")
# GGUF name: (the fixture's tensor, per expert with {e}; columns; matrices)
ENTRIES = {
    "blk.0.attn_qkv.weight": ("layers.0.linear_attn.in_proj_qkvz", 64, 1),
    "blk.2.attn_output.weight": ("layers.2.self_attn.o_proj", 128, 1),
    "blk.0.ffn_down_exps.weight": ("layers.0.mlp.experts.{e}.down_proj", 32, 16),
}


def importances(seed):
    """sums and counts per entry: log-normal mean squares with a few channels 30-300x the rest, counts powers of two
    (so the legacy file's mean * ncall / ncall is exact)"""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (_, cols, n) in ENTRIES.items():
        w = np.exp(rng.normal(size=(n, cols))) * np.where(rng.random((n, cols)) < 0.05, rng.uniform(30, 300, (n, cols)), 1)
        counts = (2.0 ** rng.integers(9, 12, size=n)).astype(np.float32)
        out[name] = ((w * counts[:, None]).astype(np.float32), counts)
    return out


def write_gguf(path, im):
    w = gguf.GGUFWriter(path, arch=None)
    w.add_type("imatrix")
    w.add_array("imatrix.datasets", ["calib.txt"])
    w.add_uint32("imatrix.chunk_count", 4)
    w.add_uint32("imatrix.chunk_size", 512)
    for name in sorted(im):
        sums, counts = im[name]
        w.add_tensor(name + ".counts", counts.reshape(-1, 1) if len(counts) > 1 else counts.reshape(1))
        w.add_tensor(name + ".in_sum2", sums if len(counts) > 1 else sums.reshape(-1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_dat(path, im):
    out = [struct.pack("<i", len(im))]
    for name in sorted(im):
        sums, counts = im[name]
        ncall = int((counts.max() + 511) // 512)
        vals = ((sums / counts[:, None]) * np.float32(ncall)).astype(np.float32)
        out += [struct.pack("<i", len(name)), name.encode(), struct.pack("<ii", ncall, vals.size), vals.tobytes()]
    out += [struct.pack("<ii", 4, 9), b"calib.txt"]
    open(path, "wb").write(b"".join(out))


def fixture_weights():
    raw = open(os.path.join(FIX, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {k[len("model."):-len(".weight")]: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                                           np.float32).reshape(v["shape"])
            for k, v in hdr.items() if k != "__metadata__" and k.startswith("model.")}


def matrices(raw):
    """every q4 matrix of a pack by name: the backbone's tensors, then each expert's parts"""
    man, _ = manifest(raw)
    out = {t["name"]: decode(raw, t) for t in man["tensors"] if t["dtype"] == "q4"}
    for layer, e, part, a in experts(raw, man):
        out[f"layers.{layer}.mlp.experts.{e}.{part}"] = a
    return out


def pack(tmp_path, name, *extra):
    out = str(tmp_path / name)
    run(["pack", FIX, "-o", out, "--quant", "q4", "--group", "32", "--no-source-hash", *extra])
    return open(out, "rb").read()


def test_imatrix_gguf_and_dat_weight_what_they_cover(tmp_path):
    im = importances(7)
    write_gguf(str(tmp_path / "im.gguf"), im)
    write_dat(str(tmp_path / "im.dat"), im)
    plain, a, b = pack(tmp_path, "p.sluice"), pack(tmp_path, "a.sluice", "--imatrix", str(tmp_path / "im.gguf")), \
        pack(tmp_path, "b.sluice", "--imatrix", str(tmp_path / "im.dat"))
    (ma, oa), (mb, ob) = manifest(a), manifest(b)
    assert ma["pack"]["imatrix"]["format"] == "gguf" and mb["pack"]["imatrix"]["format"] == "dat"
    assert ma["pack"]["imatrix"]["weighted"] == 1 + 1 + 16
    # the same importances in either format: the same bytes but the manifest's record of the file (and the header)
    assert oa == ob and a[4096:oa] == b[4096:ob] and ma["tensors"] == mb["tensors"]
    src, qp, qa = fixture_weights(), matrices(plain), matrices(a)
    covered = set()
    for gname, (tname, cols, n) in ENTRIES.items():
        sums, counts = im[gname]
        for e in range(n):
            nm = tname.format(e=e)
            covered.add(nm)
            x, w = src[nm], sums[e] / counts[e]
            ep, ea = float((w * (x - qp[nm]) ** 2).sum()), float((w * (x - qa[nm]) ** 2).sum())
            assert ea <= ep * (1 + 1e-9), (nm, ea, ep)
            assert ea < 0.9 * ep, (nm, ea, ep)  # outlier channels: seen 0.07-0.65
    for nm in qp:
        if nm not in covered:
            assert np.array_equal(qp[nm], qa[nm]), nm
