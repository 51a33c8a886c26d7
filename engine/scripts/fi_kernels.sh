#!/usr/bin/env bash
# FlashInfer's compiled kernels (.so only) carried between GPU hosts of one image:
#   fi_kernels.sh save DIR      writes DIR/fi_so.tgz.part-* (15 MB parts: under the device tool's file limit)
#   fi_kernels.sh install DIR   installs such parts as FlashInfer AOT modules, so that a fresh host
#                               skips the JIT compile; prints how many it installed
set -u
DIR=${2:?usage: fi_kernels.sh save|install DIR}
case "$1" in
  save)
    (cd "${HOME}/.cache/flashinfer" && find . -name '*.so' -path '*cached_ops*' | tar czf - -T -) \
      | split -b 15M - "$DIR/fi_so.tgz.part-" ;;
  install)
    aot=$(python3 -c 'import flashinfer.jit.env as e; print(e.FLASHINFER_AOT_DIR)')
    tmp=$(mktemp -d)
    cat "$DIR"/fi_so.tgz.part-* | tar xzf - -C "$tmp"
    for so in $(find "$tmp" -name '*.so'); do
      n=$(basename "$so" .so)
      mkdir -p "$aot/$n" && cp "$so" "$aot/$n/"
    done
    echo "installed $(find "$tmp" -name '*.so' | wc -l) prebuilt kernels into $aot" ;;
  *) echo "fi_kernels.sh: unknown action $1 (save or install)" >&2; exit 2 ;;
esac
