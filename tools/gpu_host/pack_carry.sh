#!/usr/bin/env bash
# Packs what a GPU-host visit carries (README.md here; .carry is ignored through .git/info/exclude):
# the stripped binaries of BUILD (default build-full) as .carry/bin.tar.xz, the Debian runtime
# packages env.sh unpacks there (.carry/debs, downloaded once), and the commit they were built from
# (.carry/commit, "-dirty" when the working tree differs from it).
# BASE=1 packs the same binaries as .carry/base.tar.xz instead (an older build for an A/B in one visit;
# env.sh leaves it packed: a visit script unpacks it where it wants it).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-full}
mkdir -p .carry/debs
rm -rf .carry/bin && mkdir -p .carry/bin
cp "$build"/bin/{kvcomp,bench_ops} "$build"/tests/{test_backend_ops,kvcomp_unit_tests} .carry/bin/
strip .carry/bin/*
name=bin
[ "${BASE:-0}" = 1 ] && name=base
tar -C .carry -cJf .carry/$name.tar.xz bin
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
