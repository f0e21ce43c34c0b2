#!/usr/bin/env bash
# lintian on the source and binary packages (make lintian; .ci/run counts it as one test): builds
# them (scripts/pkg/deb.sh, reused when built already) and runs Debian trixie's lintian in the
# packaging root (scripts/pkg/debroot.sh) on the .changes. Any error or warning fails; info tags
# and overrides are shown. Overrides live in debian/source/lintian-overrides and
# debian/rust-loop-dkms.lintian-overrides, each with the reason in a comment above it.
#
#   scripts/pkg/lintian.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$ROOT"
deb=$(bash scripts/pkg/deb.sh) || die "scripts/pkg/deb.sh failed"
changes=$(compgen -G "$(dirname "$deb")/rust-loop_*.changes" | head -n 1) ||
	die "no .changes beside $deb"
say "lintian: $(basename "$changes") (Debian trixie's lintian)"
status=0
# (As nobody: lintian warns when run as root.)
bash scripts/pkg/debroot.sh exec runuser -u nobody -- env HOME=/tmp lintian --fail-on error,warning \
	--display-info --show-overrides --color never "$changes" || status=$?
bash scripts/pkg/debroot.sh exec sh -c 'echo "lintian $(lintian --print-version)"'
[ "$status" = 0 ] || die "lintian reports errors or warnings (above)"
say "lintian: no errors, no warnings"
