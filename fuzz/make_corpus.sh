#!/bin/sh
# Writes the seed corpus of both fuzz targets:
#   fuzz/corpus/record_parser/<name>   the lock file's content, as is
#   fuzz/corpus/verdict/<name>.<flags> one byte of flags, then the content
# The seeds are the valid records and the hostile lock file contents of
# issue 5 part 2. Run from anywhere; re-running rewrites the seeds and
# leaves the files libFuzzer added (SHA-1 names) alone.
set -eu
cd "$(dirname "$0")"
P=corpus/record_parser
V=corpus/verdict
mkdir -p "$P" "$V"

BOOT=d1dce367-f09e-4b16-b699-8439646e535a
TOKEN=0123456789abcdef0123456789abcdef
FULL="4242
start=123456789
boot=$BOOT
token=$TOKEN
since=1764406800
pidns=4026531836
host=build-01
uid=0
mode=run
cmd=./sync.sh --all
cmdpid=4250
cmdstart=123456790
onlyone=1
"
LOCK="4242
start=123456789
boot=$BOOT
token=$TOKEN
since=1764406800
pidns=4026531836
host=build-01
uid=1000
mode=lock
cmd=cron-job
onlyone=1
"
MIN="4242
start=123456789
boot=$BOOT
"

# seed NAME PRINTF-FORMAT [ARGS...]: the bytes printf writes.
seed() {
    name=$1
    shift
    # shellcheck disable=SC2059
    printf "$@" >"$P/$name"
}
# text NAME STRING: the string, as is.
text() {
    printf '%s' "$2" >"$P/$1"
}

# Valid records.
text full-run-record "$FULL"
text lock-record "$LOCK"
text minimal-record "$MIN"
text bare-pid "4242
"
text bare-pid-no-newline "4242"
seed bare-pid-crlf '4242\r\n'
text bare-pid-padded " 4242 	
"
printf '%s' "$FULL" | sed 's/$/\r/' >"$P/full-run-record-crlf"
text pid-max-limit "4194304
"
text unknown-key "$MIN"'future_key=anything at all
'
text future-version "${LOCK%onlyone=1
}onlyone=99
"
text mode-weird "${MIN}mode=weird
"
text huge-numbers "4242
start=18446744073709551615
boot=$BOOT
since=18446744073709551615
pidns=18446744073709551615
uid=4294967295
cmdpid=4194304
cmdstart=18446744073709551615
onlyone=4294967295
"
text pid-1-wrong-start "1
start=1
boot=$BOOT
mode=lock
"
# The keys of a record written in a time namespace, of a lingering run, of
# a script and of a process group leader.
text timens-record "${MIN}pidns=4026531836
timens=4026531999
bootoff=-60000000000
"
text timens-odd-offset "${MIN}timens=4026531999
bootoff=1234567
"
text linger-record "${FULL%onlyone=1
}linger=4251:123456800,4252:123456801
onlyone=1
"
text script-record "${LOCK%mode=lock
cmd=cron-job
onlyone=1
}mode=script
cmd=./backup.sh
pgid=4242
pgstart=123456789
onlyone=1
"
text group-without-start "${MIN}pgid=4242
"
text other-host "${MIN}host=elsewhere.example
"
text other-pidns "${MIN}pidns=4026539999
"

# Hostile contents (issue 5 part 2).
: >"$P/empty"
seed whitespace '  \n\t\n'
text pid-0 "0
"
text pid-minus-1 "-1
"
text pid-1 "1
"
text pid-max-plus-1 "4194305
"
text pid-2-pow-64 "18446744073709551616
"
text pid-plus-sign "+42
"
text negative-start "4242
start=-5
boot=$BOOT
"
seed nul-bytes '4242\n\000start=1\n'
seed invalid-utf8 '4242\nstart=1\nboot=ab\nhost=\377\376\n'
text truncated-record "4242
start=123456789
bo"
text duplicate-keys "4242
start=1
start=2
boot=$BOOT
"
text onlyone-99 "${MIN}onlyone=99
"
text uid-overflow "${MIN}uid=4294967296
"
text start-overflow "4242
start=99999999999999999999
boot=$BOOT
"
text cmdpid-without-cmdstart "${MIN}cmdpid=5
"
text bootoff-minus-only "${MIN}bootoff=-
"
text bootoff-i64-min "${MIN}bootoff=-9223372036854775808
"
text linger-malformed "${MIN}linger=4251,4252:1
"
text linger-pid-0 "${MIN}linger=0:1
"
# A user's file at a lock path: never torn, never stale on its age.
text shell-script "#!/bin/sh
echo hello
"
text boot-not-hex "4242
start=1
boot=zz
"
text malformed-key "${MIN}Key=v
"
seed control-in-value '4242\nstart=1\nboot=ab\ncmd=a\007b\n'
seed blank-line "4242\nstart=1\nboot=ab\n\n"
text not-key-value "${MIN}garbage
"
# A long cmd= that still fits in MAX_RECORD_BYTES (8192), and a file one
# byte over it (the 100 MB case is rejected on the same size check).
{
    printf '%s' "${MIN}cmd="
    head -c 7000 /dev/zero | tr '\0' x
    printf '\n'
} >"$P/long-cmd"
head -c 8193 /dev/zero | tr '\0' 1 >"$P/oversized"

# The verdict seeds: each record behind flags 0x00 (as is) and 0x06 (this
# boot and PID namespace), plus a few that name this process or pid 1, are
# kernel-locked, older than this boot, in this time namespace, not readable
# (0x18 on a file that does not parse), or built with `arbitrary`.
for f in "$P"/*; do
    n=${f##*/}
    { printf '\000'; cat "$f"; } >"$V/$n.00"
    { printf '\006'; cat "$f"; } >"$V/$n.06"
done
{ printf '\026'; cat "$P/lock-record"; } >"$V/lock-record.self-start"
{ printf '\016'; cat "$P/lock-record"; } >"$V/lock-record.self-other-start"
{ printf '\036'; cat "$P/full-run-record"; } >"$V/full-run-record.pid-1"
{ printf '\007'; cat "$P/full-run-record"; } >"$V/full-run-record.kernel-locked"
{ printf '\100'; cat "$P/truncated-record"; } >"$V/truncated-record.before-boot"
{ printf '\101'; cat "$P/empty"; } >"$V/empty.before-boot-kernel-locked"
{ printf '\100'; cat "$P/shell-script"; } >"$V/shell-script.before-boot"
{ printf '\030'; cat "$P/shell-script"; } >"$V/shell-script.denied"
{ printf '\206'; cat "$P/timens-record"; } >"$V/timens-record.this-timens"
{ printf '\027'; cat "$P/timens-record"; } >"$V/timens-record.self-kernel-locked"
{ printf '\002'; cat "$P/other-pidns"; } >"$V/other-pidns.this-boot"
{ printf '\003'; cat "$P/other-pidns"; } >"$V/other-pidns.this-boot-kernel-locked"
printf '\040\001\052\000\000\000\000\000\000\000\001\001\070abcdef\000' >"$V/built.bytes"

echo "record_parser: $(ls "$P" | wc -l) seeds; verdict: $(ls "$V" | wc -l) seeds"
