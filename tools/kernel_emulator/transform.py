#!/usr/bin/env python3
"""Turns a kernels/*.cu source into C++ the emulator can compile.

Only the launch syntax needs rewriting (emu.hpp supplies everything else):
    name<T...><<<grid, block[, smem[, stream]]>>>(args);
becomes
    emu::launch(grid, block[, smem[, stream]])([=] { name<T...>(args); });
(by value: with deferred streams the body runs later, with the arguments of the launch).
A #line directive and padding newlines keep compiler messages and debugger lines pointing
at the original .cu file.

usage: transform.py IN.cu OUT.cpp
"""
import sys


def launch_name_start(src, lt):
    """Index where the kernel name (with optional template arguments) before `<<<` begins."""
    k = lt - 1
    while k >= 0 and src[k].isspace():
        k -= 1
    if src[k] == '>':
        depth = 0
        while True:
            if src[k] == '>':
                depth += 1
            elif src[k] == '<':
                depth -= 1
            k -= 1
            if depth == 0:
                break
    while k >= 0 and (src[k].isalnum() or src[k] in '_:'):
        k -= 1
    return k + 1


def closing_paren(src, p):
    depth = 0
    q = p
    while True:
        if src[q] == '(':
            depth += 1
        elif src[q] == ')':
            depth -= 1
            if depth == 0:
                return q
        q += 1


def transform(src):
    out = []
    i = 0
    launches = 0
    while True:
        lt = src.find('<<<', i)
        if lt < 0:
            out.append(src[i:])
            break
        start = launch_name_start(src, lt)
        name = src[start:lt].strip()
        if not name:
            sys.exit('transform.py: no kernel name before <<< at offset %d' % lt)
        gt = src.index('>>>', lt)
        cfg = src[lt + 3:gt]
        p = gt + 3
        while src[p].isspace():
            p += 1
        if src[p] != '(':
            sys.exit('transform.py: expected ( after >>> near: %r' % src[p - 40:p + 40])
        q = closing_paren(src, p)
        args = src[p + 1:q]
        out.append(src[i:start])
        out.append('emu::launch(%s)([=] { %s(%s); })' % (' '.join(cfg.split()), name, ' '.join(args.split())))
        out.append('\n' * src.count('\n', start, q + 1))
        i = q + 1
        launches += 1
    return ''.join(out), launches


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, dest = sys.argv[1], sys.argv[2]
    with open(path) as f:
        src = f.read()
    text, _ = transform(src)
    with open(dest, 'w') as f:
        f.write('#line 1 "%s"\n' % path)
        f.write(text)


if __name__ == '__main__':
    main()
