#!/bin/sh
# nvcc's host compiler in a CUDA compile check (-Dgpu_build=compile_check, meson.build passes
# it as -ccbin). nvcc runs the host compiler to preprocess (-E) for its front end and cicc,
# then once with -c on the host half of the file. That last step here only checks: gcc
# -fsyntax-only parses the code and instantiates every template as a compile does, and skips
# code generation, which was about 45 % of a compile check's CUDA time at -O0 (a build
# without a GPU never runs the objects). It writes an empty object where nvcc expects one.
# Every other call (preprocessing, version queries) goes to gcc unchanged, nvcc's default
# host compiler.
compile=no
output=
previous=
for argument in "$@"; do
  case "$argument" in
    -E | -M | -MM) exec gcc "$@" ;;
    -c) compile=yes ;;
  esac
  [ "$previous" = "-o" ] && output=$argument
  previous=$argument
done
[ "$compile" = yes ] && [ -n "$output" ] || exec gcc "$@"
gcc -fsyntax-only "$@" || exit
exec gcc -c -x c /dev/null -o "$output"
