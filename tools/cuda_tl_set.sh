#!/usr/bin/env bash
# tools/cuda_tl_set.sh SLUICE TLDIR OUTDIR MODEL: on the GPU machine, where a resident decode step's time goes for each
# switch set (issue 24): a kernel timeline each (tools/cuda_timeline.c, injected; summed by tools/cuda_timeline.py:
# busy, idle gaps, per kernel us a step), then ncu's stall sections of the step's kernels once. Run from the
# checkout's root (tools/cuda_timeline.py); LD_LIBRARY_PATH set by the caller for SLUICE's libraries.
#   TL_SETS="X=1 A=1 B=2+C=3" (items joined by +; default below); TL_PROMPT (1: the depth); TL_GEN (16); TL_API=1 records the
#   launch calls too (how far the host runs ahead; they cost it time); TL_NCU=0 skips ncu; TL_END (s, 200).
set -uo pipefail
sl=${1:?sluice}; tld=${2:?the dir of libsltl.so}; o=${3:?out dir}; m=${4:?a pack}
mkdir -p "$o"; S=$o/tl_summary.txt; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
sets=${TL_SETS:-"X=1 SLUICE_CUDA_PDL=2 SLUICE_CUDA_PDL=0 X=1 SLUICE_CUDA_PDL=2 SLUICE_CUDA_FUSE=none"}
B="--gpu --resident --kv f16 --decode random --json"
i=0
for sw in $sets; do
  i=$((i+1)); [ "$(el)" -lt "${TL_END:-200}" ] || { echo "timelines stopped at TL_END" >>"$S"; break; }
  api=SLTL_NO_API=1; [ "${TL_API:-0}" = 1 ] && api=X=1
  env ${sw//+/ } $api CUDA_INJECTION64_PATH=$tld/libsltl.so SLTL_OUT=$o/tl.$i.txt LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$tld \
    timeout 60 "$sl" bench -m "$m" $B --prompt ${TL_PROMPT:-1} --gen ${TL_GEN:-16} >$o/tl.$i.json 2>$o/tl.$i.err
  rc=$?
  echo "== timeline $i [$sw] rc=$rc $(grep -o '"decode_tok_s":[^,]*' $o/tl.$i.json) [$(el) s]" >>"$S"
  [ $rc = 0 ] || tail -c 300 $o/tl.$i.err >>"$S"
  python3 tools/cuda_timeline.py $o/tl.$i.txt --steps 8 --top 16 2>&1 | sed -n '2,4p;/^per step/,/^$/p;/^lead/p' >>"$S"
  xz -9 -f $o/tl.$i.txt; rm -f $o/tl.$i.json
done
if [ "${TL_NCU:-1}" != 0 ] && [ "$(el)" -lt "${TL_END:-200}" ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # the steps' kernels after the warm-up, prompt and first decode step (16-layer: ~180 launches a step)
  timeout 90 $NCU --clock-control none --launch-skip 400 --launch-count 14 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats "$sl" bench -m "$m" $B --prompt 1 --gen 6 >$o/ncu_sections.txt 2>$o/ncu.err
  echo "ncu sections rc=$? [$(el) s]" >>"$S"
  xz -9 -f $o/ncu_sections.txt
fi
