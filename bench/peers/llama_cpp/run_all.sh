#!/usr/bin/env bash
# The whole side-by-side measurement, from nothing: builds, synthetic checkpoints, timing rounds,
# table. Each step skips what already exists. PEER_DIR (default ./peer-work) holds everything;
# PROJECT_DIR is a diffattn checkout (default: this one); LLAMA_SRC a llama.cpp checkout.
# ROUNDS (default 2), GEN (tokens generated per tg run, default 128) and TYPES (default
# F32,BF16,Q8_0,Q4_0) are passed to rounds.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
P=${PEER_DIR:-$PWD/peer-work}; export PEER_DIR=$P
PROJECT_DIR=${PROJECT_DIR:-$(cd "$here/../../.." && pwd)}
: "${LLAMA_SRC:?set LLAMA_SRC to a llama.cpp checkout}"
mkdir -p $P/logs $P/models $P/results
# 0. numpy for the checkpoints, sentencepiece for llama.cpp's gguf-py (Debian's packages)
/usr/bin/python3 -c "import numpy, sentencepiece" 2>/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-numpy python3-sentencepiece
# 1. diffattn (a clone of PROJECT_DIR), release preset: diffattn-forward and diffattn-quantize
#    with -march=native, as a user builds them
[ -d $P/diffattn ] || git clone -q "$PROJECT_DIR" $P/diffattn
(cd $P/diffattn && ./scripts/install-deps.sh && cmake --preset release &&
   cmake --build build/release --target diffattn-forward diffattn-quantize)
export DIFFATTN_FORWARD=$P/diffattn/build/release/examples/diffattn-forward
# 2. llama.cpp (a clone of LLAMA_SRC). -march=native (GGML_NATIVE=ON) enables ggml's AMX path,
#    whose tile instructions died of SIGILL on an Emerald Rapids VM (Q8_0, Q4_0), so the same ISA
#    is given explicitly, without AMX.
[ -d $P/llama.cpp ] || git clone -q "$LLAMA_SRC" $P/llama.cpp
(cd $P/llama.cpp && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
   -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
   -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
   -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF && cmake --build build -j2 --target llama-bench llama-quantize)
# 3. the two checkpoints of one shape from the same BF16 weights, then the quantized GGUFs and
#    diffattn's quantized directories
[ -f $P/models/llama_2p6b_f32.gguf ] || /usr/bin/python3 "$here"/make_models.py --motif $P/models/motif_2p6b --gguf $P/models/llama_2p6b_f32.gguf --layers 32
"$here"/quantize.sh
# 4. the bandwidth yardstick
gcc -O3 -march=native -fopenmp "$here"/stream.c -o $P/stream
# 5. timing rounds (alternating programs, quiet-machine waits), then the table
/usr/bin/python3 "$here"/rounds.py --out $P/results/main --rounds "${ROUNDS:-2}" --gen "${GEN:-128}" \
  --types "${TYPES:-F32,BF16,Q8_0,Q4_0}" --wait-limit 150
/usr/bin/python3 "$here"/summarize.py $P/results/main
