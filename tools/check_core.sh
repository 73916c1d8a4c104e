#!/usr/bin/env bash
# The engine installed alone: a fresh virtual environment outside the checkout gets the CPU
# torch and `pip install .` (no extras, not editable). No viewer package may come with it;
# `medvl info` describes a synthetic slide and mammogram, and `medvl-train` trains the toy
# TopKSigLIP of the installed package's topksiglip_tiny.yaml recipe (proving the recipes ship as
# package data) for one step. Nothing is written into the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
python=${PYTHON:-python3}
torch_cpu=${TORCH_CPU:-torch==2.13.0}
started=$SECONDS

work=$(mktemp -d "${TMPDIR:-/tmp}/medvl-core.XXXXXX")
trap 'rm -rf "$work"' EXIT
say() { echo "check-core: $*"; }

# The files git would commit, copied out, so that no build folder is made in (or read from)
# the checkout.
mkdir "$work/source"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$work/source"

say "fresh venv in $work/venv"
"$python" -m venv "$work/venv"
py=$work/venv/bin/python
pip_log=$work/pip.log
pip_install() {
  "$py" -m pip install -q "$@" >> "$pip_log" 2>&1
}
if ! { pip_install $torch_cpu \
  || pip_install torch --index-url https://download.pytorch.org/whl/cpu; } \
  || ! pip_install "$work/source"; then
  grep -v "^WARNING: Location" "$pip_log" | tail -n 40
  say "error: pip install failed"
  exit 1
fi
say "installed in $((SECONDS - started)) s"

cd "$work"
for package in napari qtpy magicgui superqt PyQt5 PyQt6 PySide2 PySide6 vispy; do
  if "$py" -c "import $package" 2>/dev/null; then
    say "error: the core install brought $package"
    exit 1
  fi
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MEDVL_CACHE=$work/cache
mkdir inputs
"$py" - <<'PY'
from medvl_engine.synthetic import make_mammogram_case, make_synthetic_slide

make_synthetic_slide("inputs/slide.tiff", seed=0, size=(512, 512))
make_mammogram_case("inputs/mammograms", seed=0, size=(256, 160), laterality="L")
PY
"$work/venv/bin/medvl" info inputs/slide.tiff inputs/mammograms/*_L_CC.dcm

recipe=$("$work/venv/bin/python" -c 'from medvl_engine.training.registry import recipe_path
print(recipe_path("topksiglip", "topksiglip_tiny.yaml"))')
case "$recipe" in "$checkout"/*) echo "the recipe came from the checkout, not the install" >&2; exit 1 ;; esac
"$work/venv/bin/medvl-train" topksiglip --config "$recipe" \
  run.max_steps=1 run.progress=false \
  run.out_dir="$work/run" task.synthetic_dir="$work/run/data" > "$work/train.log"
tail -n 16 "$work/train.log"
test -f "$work/run/checkpoint.pt"
say "passed in $((SECONDS - started)) s"
