#!/usr/bin/env bash
# Brings a file larger than one device call can carry (64 MiB, the tree
# included) to the GPU machine: cut here into pieces that each travel in a
# call of their own, back to back on one warm machine (its /tmp stays while
# it is warm), and joined there once the whole file's checksum holds.
#   here:  bash scripts/carry.sh split FILE OUT_DIR [MB [EXTRA...]]
#          -> OUT_DIR/part0 .. partN, one carry each: FILE's pieces of at
#          most MB megabytes (34 unless said) as NAME.partNN; the last part
#          also holds NAME.sha256 and the EXTRA files (small ones that go
#          with it: a config, a vocabulary)
#   there: copy each carried part's files into one directory, then
#          bash scripts/carry.sh join DIR
#          -> DIR/NAME for every NAME.sha256 whose pieces are all there and
#          match (the pieces removed); exit 1, naming what is there so
#          far, while some file is incomplete (a DIR/NAME that does not
#          match is moved aside to NAME.stale)
# scripts/whisper/gpu_stage.sh (Whisper folders for the GPU tests) and
# training/streaming_whisper/run_gpu.sh (the decoder pack) use it.
set -euo pipefail
case "${1:-}" in
split)
    file=${2:?file}; out=${3:?output directory}; mb=${4:-34}
    shift $(($# < 4 ? $# : 4))
    [ -s "$file" ] || { echo "carry.sh: no $file" >&2; exit 1; }
    [[ $mb =~ ^[1-9][0-9]*$ ]] || { echo "carry.sh: MB must be a whole number (got $mb)" >&2; exit 2; }
    for e in "$@"; do [ -f "$e" ] || { echo "carry.sh: no $e" >&2; exit 1; }; done
    name=$(basename "$file")
    rm -rf "$out"/part* && mkdir -p "$out"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    split -b "${mb}000000" -d -a 2 "$file" "$tmp/$name.part"
    n=0
    for p in "$tmp/$name".part*; do mkdir -p "$out/part$n" && mv "$p" "$out/part$n/"; n=$((n + 1)); done
    last=$out/part$((n - 1))
    sha256sum <"$file" | cut -d' ' -f1 >"$last/$name.sha256"
    [ $# -gt 0 ] && cp "$@" "$last/"
    du -sh "$out"/part*
    ;;
join)
    dir=${2:?directory}
    incomplete=0
    for sum in "$dir"/*.sha256; do
        [ -e "$sum" ] || continue
        name=$(basename "$sum" .sha256)
        want=$(cat "$sum")
        if [ -s "$dir/$name" ]; then
            [ "$(sha256sum <"$dir/$name" | cut -d' ' -f1)" = "$want" ] && continue
            # another file of that name (an earlier pack): never used in its place
            mv "$dir/$name" "$dir/$name.stale"
        fi
        if ls "$dir/$name".part* >/dev/null 2>&1; then
            cat "$dir/$name".part* >"$dir/$name.joining"
            if [ "$(sha256sum <"$dir/$name.joining" | cut -d' ' -f1)" = "$want" ]; then
                mv "$dir/$name.joining" "$dir/$name" && rm "$dir/$name".part*
                echo "carry.sh: $name joined"
                continue
            fi
            rm -f "$dir/$name.joining"
        fi
        echo "carry.sh: $name incomplete; pieces so far: $(cd "$dir" && ls "$name".part* 2>/dev/null | tr '\n' ' ')" >&2
        incomplete=1
    done
    exit $incomplete
    ;;
*)
    echo "usage: carry.sh split FILE OUT_DIR [MB [EXTRA...]] | join DIR" >&2; exit 2
    ;;
esac
