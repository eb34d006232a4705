#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a consumer project
# through find_package(gradwire) and through pkg-config.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
libdir=$(ls -d "$work"/prefix/lib*/ | head -1)
test -e "$libdir/libgradwire.so.0" || { echo "no SONAME link libgradwire.so.0"; exit 1; }
cmake -S "$src/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_c"
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_cpp"
PKG_CONFIG_PATH=$libdir/pkgconfig cc -std=c99 "$src/consumer/consumer.c" -o "$work/pc_consumer" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs gradwire)
LD_LIBRARY_PATH=$libdir "$work/pc_consumer"
