#!/usr/bin/env bash
# A file larger than the device tool's carry limit (64 MiB a call, the engine's wheels and
# kernels included) travels in parts over several calls to one warm GPU host: each call carries
# one part folder (`carry: [".carry/p1"]`, then `[".carry/p2"]`, ...; an ignored path left there
# by an earlier call stays while the machine is held), and the last call joins them.
#   carry_parts.sh split FILE [PART_MB]   here: FILE into .carry/p1, .carry/p2, ... (default 48 MB
#                                         each), every part with a manifest (FILE's name, sha256,
#                                         the number of parts)
#   carry_parts.sh join DIR               there: the parts, checked, into DIR/NAME; prints the path
set -eu
case "${1:-}" in
  split)
    FILE=${2:?usage: carry_parts.sh split FILE [PART_MB]}; MB=${3:-48}
    rm -rf .carry && mkdir -p .carry/tmp
    split -b "${MB}M" -d -a 2 "$FILE" .carry/tmp/part-
    i=0
    for part in .carry/tmp/part-*; do
      i=$((i + 1)); mkdir -p ".carry/p$i"; mv "$part" ".carry/p$i/part"
    done
    rmdir .carry/tmp
    line="$(basename "$FILE") $(sha256sum "$FILE" | cut -d' ' -f1) $i"
    for p in $(seq 1 "$i"); do echo "$line" > ".carry/p$p/manifest"; done
    echo "$i parts: carry .carry/p1 ... .carry/p$i, one a call" ;;
  join)
    DIR=${2:?usage: carry_parts.sh join DIR}
    read -r NAME SUM N < "$(ls .carry/p*/manifest | head -1)"
    for p in $(seq 1 "$N"); do
      [ -f ".carry/p$p/part" ] || { echo "carry_parts: .carry/p$p is missing (carried by an earlier call to this machine?)" >&2; exit 1; }
    done
    mkdir -p "$DIR"
    for p in $(seq 1 "$N"); do cat ".carry/p$p/part"; done > "$DIR/$NAME"
    echo "$SUM  $DIR/$NAME" | sha256sum -c --quiet - || { echo "carry_parts: $NAME does not match its sha256" >&2; exit 1; }
    echo "$DIR/$NAME" ;;
  *) echo "usage: carry_parts.sh split FILE [PART_MB] | join DIR" >&2; exit 2 ;;
esac
