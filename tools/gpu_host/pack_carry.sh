#!/usr/bin/env bash
# Packs what a GPU-host visit carries (README.md here; .carry is ignored through .git/info/exclude):
# the stripped binaries of BUILD (default build-full) as .carry/bin.tar.xz, the Debian runtime
# packages env.sh unpacks there (.carry/debs, downloaded once), and the commit they were built from
# (.carry/commit, "-dirty" when the working tree differs from it).
# BINS (default "kvcomp bench_ops test_backend_ops kvcomp_unit_tests") names the binaries. Each holds the
# CUDA kernels of every op (~30 MB stripped); xz -9's 64 MiB window packs the four into ~12 MB, where
# the default level packed 38 MB and the checkout with its carry went over the 64 MiB limit.
# BASE=1 packs the same binaries as .carry/base.tar.xz instead (an older build for an A/B in one visit;
# env.sh leaves it packed: a visit script unpacks it where it wants it).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-full}
mkdir -p .carry/debs
rm -rf .carry/bin && mkdir -p .carry/bin
for b in ${BINS:-kvcomp bench_ops test_backend_ops kvcomp_unit_tests}; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" .carry/bin/; else cp "$build/tests/$b" .carry/bin/; fi
done
strip .carry/bin/*
name=bin
[ "${BASE:-0}" = 1 ] && name=base
XZ_OPT=-9 tar -C .carry -cJf .carry/$name.tar.xz bin
rm -r .carry/bin
if ! ls .carry/debs/*.deb >/dev/null 2>&1; then
  (cd .carry/debs && apt-get download libclblast1 libboost-program-options1.74.0)
fi
if [ "${BASE:-0}" != 1 ]; then
  rev=$(git rev-parse --short=12 HEAD)
  git diff --quiet HEAD -- . || rev="$rev-dirty"
  echo "$rev" > .carry/commit
fi
du -sh .carry/*.tar.xz .carry/debs
