#!/usr/bin/env bash
# Builds psql 17 (libpq and psql only) from Debian's source of
# postgresql-17 into $1, for the psql features Debian 12's psql 15 lacks
# (`\bind`). Called by .ci/run when $1/bin/psql is missing; about 40 s.
set -euo pipefail
prefix="$1"
version=17.11
sha256=dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979
tarball="postgresql-17_${version}.orig.tar.bz2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
curl -sSfO "http://deb.debian.org/debian/pool/main/p/postgresql-17/${tarball}"
echo "${sha256}  ${tarball}" | sha256sum -c --quiet
tar xjf "$tarball"
cd "postgresql-${version}"
./configure --prefix="$prefix" --without-readline --without-icu --without-zlib \
  --without-zstd --without-lz4 --with-ssl=openssl >configure.log 2>&1 || { tail -20 configure.log; exit 1; }
# The generated headers first, alone: psql's own parallel make may compile
# command.c before catalog/pg_class_d.h exists (seen on a fresh machine).
make -C src/backend generated-headers >make.log 2>&1 || { tail -40 make.log; exit 1; }
# Then the libraries psql links, one folder at a time: psql's own make
# builds them through two submakes (libpgport's and libpq's), which with
# -j2 can run in src/common at once and race on its archives (seen on a
# fresh machine: "ar: unable to copy file 'libpgcommon_srv.a'").
for dir in src/port src/common src/interfaces/libpq; do
  make -j2 -C "$dir" >>make.log 2>&1 || { tail -40 make.log; exit 1; }
done
make -j2 -C src/bin/psql >>make.log 2>&1 || { tail -40 make.log; exit 1; }
make -C src/interfaces/libpq install >>make.log 2>&1
make -C src/bin/psql install >>make.log 2>&1
"$prefix/bin/psql" --version
