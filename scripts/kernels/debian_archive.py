#!/usr/bin/env python3
"""Debian's archive, read as apt reads it, without the host's apt: the kernel matrix's packages
come from several suites (trixie-backports, forky, sid) and architectures (amd64, arm64) that the
host's apt sources do not have, and should not need.

    debian_archive.py fetch SUITE ARCH DEST PKG=VERSION...
        Downloads each package at exactly that version into DEST (kept if already there and
        intact) and prints the paths. Dies, naming the versions the suite has, when one is gone.
    debian_archive.py versions SUITE ARCH REGEX
        Prints "package version" for every package of the suite whose name matches REGEX.
    debian_archive.py config SUITE ARCH PKG=VERSION
        Prints the .config of a linux-headers package (downloaded into the cache).
    debian_archive.py compare VERSION1 VERSION2
        Prints -1, 0 or 1 as dpkg orders the two versions (version_compare).

The suite's InRelease is checked with gpgv against Debian's archive keyring, the Packages index
against the hash InRelease gives, and each package against the hash the index gives. Indexes are
cached under $RUST_LOOP_CACHE/stock/archive/<suite>/ and fetched again when a pinned version is
not in the cached one (or when older than a day, for `versions`). A suite whose InRelease is past
its Valid-Until (a mirror or snapshot no longer updated: apt refuses it unless
Acquire::Check-Valid-Until is false) is used, with a warning on stderr.

ARCHIVE (default http://deb.debian.org/debian) and KEYRING
(/usr/share/keyrings/debian-archive-keyring.gpg) may be set in the environment.
"""
import datetime
import email.utils
import functools
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ARCHIVE = os.environ.get("ARCHIVE", "http://deb.debian.org/debian").rstrip("/")
KEYRING = os.environ.get("KEYRING", "/usr/share/keyrings/debian-archive-keyring.gpg")
CACHE = os.path.join(os.environ.get("RUST_LOOP_CACHE", os.path.expanduser("~/.cache/rust-loop")),
                     "stock", "archive")


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except OSError as e:
        die(f"cannot fetch {url}: {e}")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def _order(c):
    """dpkg's weight of a non-digit character: '~' before the end, letters before the rest."""
    if c == "~":
        return -1
    if c.isascii() and c.isalpha():
        return ord(c)
    return ord(c) + 256


def _isdigit(c):
    return "0" <= c <= "9"


def _verrevcmp(a, b):
    """dpkg's comparison of two upstream versions (or two revisions): alternately the non-digit
    parts, character by character (_order), and the digit parts, as numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not _isdigit(a[i])) or (j < len(b) and not _isdigit(b[j])):
            ac = _order(a[i]) if i < len(a) and not _isdigit(a[i]) else 0
            bc = _order(b[j]) if j < len(b) and not _isdigit(b[j]) else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i += 1
            j += 1
        i0 = i
        while i < len(a) and _isdigit(a[i]):
            i += 1
        j0 = j
        while j < len(b) and _isdigit(b[j]):
            j += 1
        na, nb = int(a[i0:i] or 0), int(b[j0:j] or 0)
        if na != nb:
            return -1 if na < nb else 1
    return 0


def _split_version(v):
    epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def version_compare(a, b):
    """-1, 0 or 1 as dpkg orders Debian versions a and b (epoch, then the upstream version,
    then the revision; '~' sorts before anything, even the end: 7.3~rc7 < 7.3,
    7.2.13-1~bpo13+1 < 7.2.13-1)."""
    ea, ua, ra = _split_version(a)
    eb, ub, rb = _split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


version_key = functools.cmp_to_key(version_compare)


def _field(text, name):
    m = re.search(rf"^{name}:[ \t]*(.*?)[ \t]*$", text, re.M)
    return m.group(1) if m else None


def valid_until_warning(suite, text, now=None):
    """A warning when the InRelease text is past its Valid-Until (None when it is not, or has
    none)."""
    until = _field(text, "Valid-Until")
    if not until:
        return None
    try:
        t = email.utils.parsedate_to_datetime(until)
    except (TypeError, ValueError):
        return f"warning: {suite}'s InRelease has a Valid-Until that is no date: '{until}'"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    if t >= now:
        return None
    return (f"warning: {suite}'s index is past its Valid-Until ({until}; dated "
            f"{_field(text, 'Date') or '?'}): the archive no longer updates it (a stale mirror or "
            f"snapshot), apt refuses it unless Acquire::Check-Valid-Until is false, and the "
            f"kernels it lists may not be the archive's newest")


_warned = set()


def warn_valid_until(suite):
    """Warns once per suite (stderr) when its cached InRelease is past its Valid-Until."""
    if suite in _warned:
        return
    path = os.path.join(CACHE, suite, "InRelease")
    if not os.path.exists(path):
        # An index cached before its InRelease was kept: fetch (and verify) that; the cached
        # index stays usable without it (offline).
        try:
            release_hashes(suite)
        except SystemExit:
            print(f"warning: {suite}'s Valid-Until not checked (its InRelease could not be had)",
                  file=sys.stderr)
            _warned.add(suite)
            return
    with open(path, encoding="utf-8", errors="replace") as f:
        w = valid_until_warning(suite, f.read())
    if w:
        _warned.add(suite)
        print(w, file=sys.stderr)


def release_hashes(suite):
    """The signed InRelease's SHA256 list: {path: (hash, size)}. The verified InRelease is kept
    in the cache (its Valid-Until: warn_valid_until)."""
    if not shutil.which("gpgv") or not os.path.exists(KEYRING):
        die(f"checking {suite}'s InRelease needs gpgv and {KEYRING}: install gpgv and "
            f"debian-archive-keyring (scripts/setup.sh does)")
    raw = get(f"{ARCHIVE}/dists/{suite}/InRelease")
    with tempfile.NamedTemporaryFile() as f:
        f.write(raw)
        f.flush()
        p = subprocess.run(["gpgv", "--keyring", KEYRING, f.name], capture_output=True)
        if p.returncode != 0:
            die(f"{suite}'s InRelease does not verify against {KEYRING}: "
                f"{p.stderr.decode(errors='replace').strip()[-300:]}")
    text = raw.decode(errors="replace")
    d = os.path.join(CACHE, suite)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f"InRelease.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(raw)
    os.replace(tmp, os.path.join(d, "InRelease"))
    hashes, inside = {}, False
    for line in text.splitlines():
        if line.startswith("SHA256:"):
            inside = True
            continue
        if inside:
            if not line.startswith(" "):
                inside = False
                continue
            h, size, path = line.split()
            hashes[path] = (h, int(size))
    return hashes


def index(suite, arch, refresh=False, max_age=None):
    """The suite's Packages index for arch (a list of dicts), cached and verified."""
    d = os.path.join(CACHE, suite)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"Packages-{arch}")
    stale = max_age is not None and os.path.exists(path) and \
        time.time() - os.path.getmtime(path) > max_age
    if refresh or stale or not os.path.exists(path):
        rel = f"main/binary-{arch}/Packages.xz"
        hashes = release_hashes(suite)
        if rel not in hashes:
            die(f"{suite} has no {rel}")
        data = get(f"{ARCHIVE}/dists/{suite}/{rel}")
        if sha256(data) != hashes[rel][0]:
            die(f"{suite}'s {rel} does not match its InRelease hash")
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(lzma.decompress(data))
        os.replace(tmp, path)
    warn_valid_until(suite)
    entries, cur = [], {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    entries.append(cur)
                cur = {}
            elif not line[0].isspace() and ":" in line:
                k, v = line.split(":", 1)
                if k in ("Package", "Version", "Architecture", "Filename", "SHA256", "Depends"):
                    cur[k] = v.strip()
    if cur:
        entries.append(cur)
    return entries


def find(entries, pkg, ver, arch):
    for e in entries:
        if e.get("Package") == pkg and e.get("Version") == ver and \
                e.get("Architecture") in (arch, "all"):
            return e
    return None


def fetch(suite, arch, dest, specs):
    os.makedirs(dest, exist_ok=True)
    entries = index(suite, arch)
    out = []
    for spec in specs:
        pkg, _, ver = spec.partition("=")
        e = find(entries, pkg, ver, arch)
        if e is None:
            entries = index(suite, arch, refresh=True)
            e = find(entries, pkg, ver, arch)
        if e is None:
            have = sorted({x["Version"] for x in entries if x.get("Package") == pkg})
            die(f"{pkg}={ver} ({arch}) is not in {suite} any more (it has: "
                f"{', '.join(have) or 'none'}): pin another version in config/kernels.conf "
                f"(make kernels lists the archive's kernels)")
        target = os.path.join(dest, os.path.basename(e["Filename"]))
        ok = False
        if os.path.exists(target):
            with open(target, "rb") as f:
                ok = sha256(f.read()) == e["SHA256"]
        if not ok:
            print(f"==> downloading {pkg}={ver} ({arch}) from {suite}", file=sys.stderr)
            data = get(f"{ARCHIVE}/{e['Filename']}")
            if sha256(data) != e["SHA256"]:
                die(f"{e['Filename']} does not match the hash of {suite}'s index")
            tmp = f"{target}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        out.append(target)
    print("\n".join(out))


def versions(suite, arch, regex):
    rx = re.compile(regex)
    for e in index(suite, arch, max_age=86400):
        if rx.search(e.get("Package", "")):
            print(e["Package"], e["Version"])


def config_text(suite, arch, spec):
    """The .config of linux-headers package spec (PKG=VERSION), cached."""
    pkg, _, ver = spec.partition("=")
    dest = os.path.join(CACHE, suite, "headers")
    os.makedirs(dest, exist_ok=True)
    cfg = os.path.join(dest, f"{pkg}_{ver}.config")
    if not os.path.exists(cfg):
        entries = index(suite, arch, max_age=86400)
        if find(entries, pkg, ver, arch) is None:
            entries = index(suite, arch, refresh=True)
        e = find(entries, pkg, ver, arch)
        if e is None:
            die(f"{pkg}={ver} is not in {suite}")
        data = get(f"{ARCHIVE}/{e['Filename']}")
        if sha256(data) != e["SHA256"]:
            die(f"{e['Filename']} does not match the hash of {suite}'s index")
        with tempfile.TemporaryDirectory() as t:
            deb = os.path.join(t, "h.deb")
            with open(deb, "wb") as f:
                f.write(data)
            tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], capture_output=True,
                                 check=True).stdout
            p = subprocess.run(["tar", "-xO", "--wildcards", "*/.config"], input=tar,
                               capture_output=True)
            if p.returncode != 0 or not p.stdout:
                die(f"no .config in {pkg}={ver}")
            tmp = f"{cfg}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(p.stdout)
            os.replace(tmp, cfg)
    with open(cfg) as f:
        return f.read()


def main(argv):
    if len(argv) >= 5 and argv[1] == "fetch":
        fetch(argv[2], argv[3], argv[4], argv[5:])
    elif len(argv) == 5 and argv[1] == "versions":
        versions(argv[2], argv[3], argv[4])
    elif len(argv) == 5 and argv[1] == "config":
        sys.stdout.write(config_text(argv[2], argv[3], argv[4]))
    elif len(argv) == 4 and argv[1] == "compare":
        print(version_compare(argv[2], argv[3]))
    else:
        die(__doc__.strip().split("\n\n")[1])


if __name__ == "__main__":
    main(sys.argv)
