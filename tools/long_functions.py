#!/usr/bin/env python3
"""Lists the functions of src/ over a length (default 100 lines, signature to closing brace) and the files over
1000 lines: issue 23's counts. Usage: tools/long_functions.py [LIMIT]."""
import re, subprocess, sys

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 100
files = subprocess.check_output(['git', 'ls-files', 'src/*.c', 'src/*.cu', 'src/*.h']).decode().split()
rows = []
sig = re.compile(r'^(static |extern "C" |__global__ |template|inline |[A-Za-z_][\w ]*[\w*]\s*\*?\s*)[\w ,*<>]*?(\w+)\s*\(')
for f in files:
    lines = open(f, errors='replace').read().split('\n')
    i = 0
    while i < len(lines):
        l = lines[i]
        m = sig.match(l) if l and not l[0].isspace() and not l.startswith(('#', '/', '*', '}')) else None
        if m and not re.match(r'(typedef|struct|enum|union|return)\b', l):
            j = i  # the line that opens the body
            code = lambda x: re.sub(r'/\*.*?\*/|//.*$', '', x).rstrip()  # the line without its comments
            while j < len(lines) and not code(lines[j]).endswith('{') and not code(lines[j]).endswith(';'):
                j += 1
            if j < len(lines) and code(lines[j]).endswith('{') and '=' not in lines[j].split('(')[0]:
                k = j + 1
                while k < len(lines) and lines[k] != '}':
                    k += 1
                if k - i + 1 > limit:
                    rows.append((k - i + 1, f, re.findall(r'(\w+)\s*\(', l)[0]))
                i = k
        i += 1
for n, f, name in sorted(rows, reverse=True):
    print(f'{n:5d} {f} {name}')
big = sorted((sum(1 for _ in open(f, errors='replace')), f) for f in files)
for n, f in (b for b in big if b[0] > 1000):
    print(f'{n:5d} {f} (file)')
print(f'{len(rows)} functions over {limit} lines, {sum(1 for b in big if b[0] > 1000)} files over 1000 lines')
