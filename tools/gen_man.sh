#!/usr/bin/env bash
# Builds sluice's man page with help2man: NAME, SYNOPSIS, DESCRIPTION, OPTIONS and ENVIRONMENT from
# `sluice --help` and `sluice --version`, then one section per subcommand ("SLUICE RUN", ...) made from
# `sluice CMD --help`, and EXAMPLES gathering every command's example. The per-command sections reach
# help2man through a generated --include file (help2man(1), INCLUDE FILES).
#
# Usage: tools/gen_man.sh OUT.1 [SLUICE_BIN]      (SLUICE_BIN: default $SLUICE_BIN, else build/sluice)
# Needs help2man (Debian/Ubuntu: apt-get install help2man), which brings perl, used here to turn each
# command's help into roff.
set -euo pipefail

out=${1:-}
bin=${2:-${SLUICE_BIN:-build/sluice}}
if [ -z "$out" ] || [ "$out" = -h ] || [ "$out" = --help ]; then
    echo "usage: tools/gen_man.sh OUT.1 [SLUICE_BIN]" >&2
    exit 2
fi
if ! command -v help2man >/dev/null 2>&1; then
    echo "gen_man.sh: help2man is not installed; install it (Debian/Ubuntu: apt-get install help2man) to build the man page" >&2
    exit 1
fi
if [ ! -x "$bin" ]; then
    echo "gen_man.sh: $bin is not an executable sluice; build it first (make), or pass its path" >&2
    exit 1
fi

inc=$(mktemp)
trap 'rm -f "$inc"' EXIT

# The commands, in the order `sluice --help` lists them.
cmds=$("$bin" --help | awk '/^Commands:$/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on { exit }')
[ -n "$cmds" ] || { echo "gen_man.sh: '$bin --help' lists no commands" >&2; exit 1; }

# One command's --help as roff: usage lines as a synopsis, "Heading:" lines as subsections, option lines
# as tagged paragraphs (flags bold, the value italic), example lines verbatim.
to_roff='
    sub esc { my $s = shift; $s =~ s/\\/\\e/g; $s =~ s/-/\\-/g; $s =~ s/^([.\x27])/\\&$1/; $s }
    my ($mode, $para) = ("", 0);
    my $end = sub { print ".fi\n" if $mode eq "nf"; $mode = "" };
    while (<STDIN>) {
        chomp;
        if (/^(?:Usage:|  or: ) sluice (\S+)\s*(.*)$/) {
            if ($mode ne "nf") { $end->(); print ".nf\n"; $mode = "nf" }
            print "\\fBsluice $1\\fR ", esc($2), "\n";
        } elsif (/^$/) {
            $end->(); $para = 1;
        } elsif (/^(\S.*):$/) {
            $end->(); print ".SS \"$1\"\n"; $mode = ($1 =~ /^Examples?$/) ? "ex" : ""; $para = 0;
        } elsif ($mode eq "ex" && /^  (\S.*)$/) {
            print ".nf\n", esc($1), "\n.fi\n";
        } elsif (/^  (-\S.*?)(?:\s{2,}(\S.*))?$/) {
            $end->(); $para = 0;
            my ($opt, $text) = ($1, $2 // "");
            my ($flags, $arg) = $opt =~ /^(-[^ ,]+(?:, -[^ ,]+)*)(?: (.*))?$/;
            my $f = join(", ", map { "\\fB" . esc($_) . "\\fR" } split /, /, $flags);
            $f .= " \\fI" . esc($arg) . "\\fR" if defined $arg;
            print ".TP\n$f\n", esc($text), "\n"; $mode = "opt";
        } elsif ($mode eq "opt" && /^\s{6,}(\S.*)$/) {
            print esc($1), "\n";
        } else {
            $end->() if $mode eq "nf";
            print ".PP\n" if $para; $para = 0;
            s/^\s+//; print esc($_), "\n";
        }
    }
    $end->();
'

{
    for c in $cmds; do
        up=$(printf '%s' "$c" | tr '[:lower:]' '[:upper:]')
        printf '[SLUICE %s]\n' "$up"
        "$bin" "$c" --help | perl -e "$to_roff"
        printf '\n'
    done
    # EXAMPLES: those of `sluice --help`, then each command's (once each)
    printf '[=EXAMPLES]\n'
    {
        "$bin" --help | awk '/^Examples?:$/ { on = 1; next } on && /^  / { sub(/^  /, ""); print; next } on { exit }'
        for c in $cmds; do
            "$bin" "$c" --help | awk '/^Examples?:$/ { on = 1; next } on && /^  / { sub(/^  /, ""); print; next } on { exit }'
        done
    } | awk '!seen[$0]++' | perl -ne 'chomp; s/\\/\\e/g; s/-/\\-/g; s/^([.\x27])/\\&$1/; print ".PP\n.nf\n$_\n.fi\n"'
    # the docs/*.md the help texts name: make install puts them in PREFIX/share/doc/sluice
    printf '[SEE ALSO]\n'
    printf 'The documents named above as docs/NAME.md are installed by make install in\n'
    printf '.IR PREFIX /share/doc/sluice/NAME.md\n'
    printf '(/usr/local/share/doc/sluice by default), and are in the docs folder of the source tree:\n'
    printf '%s\n' "$(ls "$(dirname "$0")/../docs/" | grep '\.md$' | tr '\n' ' ' | sed 's/ $//; s/ /, /g')."
} >"$inc"

help2man --no-info --section=1 \
    --name="run Mixture-of-Experts language models larger than memory" \
    --include="$inc" --output="$out" "$bin"
echo "wrote $out"
