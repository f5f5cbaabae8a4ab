#!/usr/bin/env bash
# Installs kvcomp's build and test dependencies from Debian 12 packages (and python3-matplotlib for
# the results report, tools/report/make_results.py). Idempotent and quiet:
# does nothing when everything is already installed. Needs root (or sudo).
# CUDA is not installed here: the toolkit is expected at /usr/local/cuda (optional).
set -euo pipefail

packages=(
  build-essential cmake git pkg-config
  ocl-icd-opencl-dev opencl-headers clinfo pocl-opencl-icd libclblast-dev
  libeigen3-dev libboost-program-options-dev libgtest-dev nlohmann-json3-dev
  python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup_deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup_deps: need root to install: ${missing[*]}" >&2; exit 1
  fi
fi
echo "setup_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq >/tmp/kvcomp_apt_update.log 2>&1; then
  echo "setup_deps: 'apt-get update' failed; see /tmp/kvcomp_apt_update.log" >&2; exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/kvcomp_apt_install.log 2>&1; then
  echo "setup_deps: 'apt-get install ${missing[*]}' failed; last lines of /tmp/kvcomp_apt_install.log:" >&2
  tail -n 20 /tmp/kvcomp_apt_install.log >&2; exit 1
fi
echo "setup_deps: done"
