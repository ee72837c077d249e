#!/usr/bin/env bash
# Regenerates the picture of the workspace's module graph: docs/images/modules.dot (and
# docs/images/modules.svg when Graphviz's `dot` is installed). The graph is the one
# tests/shape.rs checks for cycles: `crate::`/`super::` references between the modules of a
# crate, test code left out; edges of a cycle are red.
#
#   hack/modgraph.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=docs/images/modules.dot
mkdir -p "$(dirname "$out")"
SHAPE_DOT="$PWD/$out" cargo test -q --locked --test shape -- --ignored --exact write_module_graph_dot
if command -v dot >/dev/null 2>&1; then
  dot -Tsvg "$out" -o "${out%.dot}.svg"
  echo "wrote $out and ${out%.dot}.svg"
else
  echo "wrote $out (install Graphviz for the SVG: dot -Tsvg $out)"
fi
