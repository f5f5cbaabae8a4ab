# Sourced by the measure scripts of the low-rank methods (measure_lowrank_q4.sh, measure_lowrank_quant.sh,
# measure_rotated_quant.sh): the settings each takes from the environment (a script may set default_backend
# and default_examples first) and the full calibrations they share.
bin=${BIN:-build/bin}
backend=${BACKEND:-${default_backend:-cpu}}
out=${OUT:-docs/data}
examples=${EXAMPLES:-${default_examples:-8}}
calib=${CALIB:-build/calib_lowrank}
model=tools/model/default
commit=${COMMIT:-$(git rev-parse --short=12 HEAD)}
mkdir -p "$out" "$calib"

# Prints the path of method $1's calibration of the default model at removal rate 0 (zack on the default
# corpus, fdc on random token ids), making it first when $calib does not hold it yet.
full_calibration() {
  local file="$calib/$1.safetensors"
  [ -f "$file" ] || "$bin/kvcomp" calibrate -m $model --method "$1" -b "$backend" --removal-rate 0 --out "$file" >&2
  echo "$file"
}
