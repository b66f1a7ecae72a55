#!/usr/bin/env python3
"""The rooms of src/ (its folders) and what they include of each other: issue 23's folder loops and arrows up.

A file's room is its first folder under src/ (src/family/arch/x.c is in family). Every `#include "room/..."` of
src/*.c, *.h, *.cu is an edge from the file's room to that room ("sluice.h", the public header, and includes
without a folder are no edge). Two counts come out:
  - folder loops: the elementary cycles of the room graph (a -> b -> a is one; the rooms of each cycle listed);
  - arrows up: the includes that go against ORDER (the room order tests/test_util.c `rooms_include_downward`
    checks), each listed with its file and line.
With --link DIR (a build folder, e.g. build), the same two counts for the symbol graph: an object that uses a
function or variable another room's object defines (nm) depends on that room, whatever it includes; the loops
that declarations in a lower room's header would hide show there, and 'both' counts the two graphs together.
Usage: tools/rooms.py [--link BUILD] [-v]"""
import os, re, subprocess, sys
from collections import defaultdict

# Lowest first; a room may include its own files and the rooms before it. Keep in step with tests/test_util.c.
ORDER = ['util', 'quant', 'kernels', 'family', 'import', 'format', 'backend', 'stream', 'dist', 'model', 'engine',
         'text', 'pull', 'serve', 'cli']


def room_of(path):
    parts = path.split('/')
    return parts[1] if len(parts) > 2 and parts[0] == 'src' else None


def include_edges():
    files = subprocess.check_output(['git', 'ls-files', 'src/*.c', 'src/*.h', 'src/*.cu']).decode().split()
    files += [f for f in subprocess.check_output(['git', 'ls-files', '-o', '--exclude-standard', 'src']).decode().split()
              if f.endswith(('.c', '.h', '.cu'))]
    inc = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')
    edges = defaultdict(list)  # (from, to) -> [file:line]
    for f in files:
        if not os.path.exists(f):
            continue
        src = room_of(f)
        for n, line in enumerate(open(f, errors='replace'), 1):
            m = inc.match(line)
            if m and m.group(1) != src and os.path.isdir('src/' + m.group(1)):
                edges[(src, m.group(1))].append(f'{f}:{n}')
    return edges


def link_edges(build):
    defs, uses = {}, defaultdict(set)
    for dirpath, _, names in os.walk(os.path.join(build, 'src')):
        for nm in names:
            if not nm.endswith('.o'):
                continue
            obj = os.path.join(dirpath, nm)
            rel = os.path.relpath(obj, build)
            room = room_of(rel)
            for line in subprocess.check_output(['nm', obj]).decode().splitlines():
                p = line.split()
                if len(p) == 2 and p[0] == 'U':
                    uses[p[1]].add((room, rel))
                elif len(p) == 3 and p[1] in 'TDBRVW':
                    defs[p[2]] = room
    edges = defaultdict(list)
    for sym, users in uses.items():
        to = defs.get(sym)
        for room, obj in users:
            if to and to != room:
                edges[(room, to)].append(f'{obj} uses {sym}')
    return edges


def cycles(edges):
    """Elementary cycles of the room graph, each once (rotated to start at its smallest room)."""
    adj = defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
    found = set()

    def walk(start, node, path, seen):
        for nxt in sorted(adj[node]):
            if nxt == start:
                found.add(tuple(path))
            elif nxt not in seen and nxt > start:
                walk(start, nxt, path + [nxt], seen | {nxt})

    for s in sorted(adj):
        walk(s, s, [s], {s})
    return sorted(found, key=lambda c: (len(c), c))


def report(what, edges, verbose):
    rank = {r: i for i, r in enumerate(ORDER)}
    loops = cycles(edges)
    up = [(a, b, w) for (a, b), where in sorted(edges.items()) for w in where
          if a in rank and b in rank and rank[b] > rank[a]]
    unknown = sorted({r for e in edges for r in e if r not in rank})
    print(f'{what}: {len(loops)} folder loops, {len(up)} arrows up'
          + (f' (rooms not in ORDER: {", ".join(unknown)})' if unknown else ''))
    for c in loops:
        print('  loop: ' + ' -> '.join(c + (c[0],)))
    shown = defaultdict(int)
    for a, b, w in up:
        shown[(a, b)] += 1
        if verbose or shown[(a, b)] <= 3:
            print(f'  up: {a} -> {b}: {w}')
    for (a, b), n in sorted(shown.items()):
        if not verbose and n > 3:
            print(f'  up: {a} -> {b}: ... {n} in all')
    return len(loops), len(up)


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    verbose = '-v' in sys.argv
    report('includes', include_edges(), verbose)
    if '--link' in sys.argv:
        build = sys.argv[sys.argv.index('--link') + 1]
        sym = link_edges(build)
        report('symbols', sym, verbose)
        both = include_edges()
        for e, w in sym.items():
            both[e] += w
        report('both', both, False)


if __name__ == '__main__':
    main()
