#!/usr/bin/env bash
# The BF16, Q8_0 and Q4_0 GGUFs from the F32 one, with llama-quantize's defaults (no --pure: the
# tied token_embd, which is also the output head, gets the type llama-quantize picks for it), and
# diffattn's Q8_0 and Q4_0 directories from the Motif BF16 one (diffattn-quantize, whose q4_0
# keeps the tied head at q8_0, docs/math.md §10).
set -euo pipefail
P=${PEER_DIR:-$PWD/peer-work}
M=$P/models
Q=$P/llama.cpp/build/bin/llama-quantize
DQ=${DIFFATTN_QUANTIZE:-$P/diffattn/build/release/examples/diffattn-quantize}
for t in BF16 Q8_0 Q4_0; do
  lc=$(echo $t | tr A-Z a-z)
  [ -f $M/llama_2p6b_$lc.gguf ] && continue
  $Q $M/llama_2p6b_f32.gguf $M/llama_2p6b_$lc.gguf $t 2 > $P/logs/quantize_$lc.log 2>&1
  tail -n 4 $P/logs/quantize_$lc.log
done
for f in q8_0 q4_0; do
  [ -f $M/motif_2p6b_$f/config.json ] && continue
  /usr/bin/time -v $DQ $M/motif_2p6b $M/motif_2p6b_$f --weights $f > $P/logs/diffattn_quantize_$f.log 2>&1
  grep -E "wrote|Maximum resident" $P/logs/diffattn_quantize_$f.log
done
