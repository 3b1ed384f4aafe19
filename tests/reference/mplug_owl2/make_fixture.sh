#!/usr/bin/env bash
# Regenerate tests/fixtures/mplug_owl2 by running the ORIGINAL mPLUG-Owl2 code (transformers 4.31) on a tiny
# random configuration. The original code is not part of this repository: pass the path of a checkout of
# X-PLUG/mPLUG-Owl (the folder that contains mPLUG-Owl2/).
# usage: bash tests/reference/mplug_owl2/make_fixture.sh /path/to/mPLUG-Owl [venv dir, default /tmp/mplug-ref-venv]
set -euo pipefail
CHECKOUT=${1:?path of a checkout of X-PLUG/mPLUG-Owl}
VENV=${2:-/tmp/mplug-ref-venv}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(cd "$HERE/../../fixtures" && pwd)/mplug_owl2
if [ ! -x "$VENV/bin/python" ]; then
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0 transformers==4.31.0 tokenizers==0.13.3 'numpy<2' einops icecream safetensors pillow==13.0.0
fi
mkdir -p "$OUT"
"$VENV/bin/python" "$HERE/make_fixture.py" "$CHECKOUT/mPLUG-Owl2" "$OUT"
